"""What the reference workload prints besides its own ``[rank<r>]`` lines (:mod:`.rank_log`): Megatron Bridge's
setup and training_log lines in Megatron Bridge's wording, and the summaries of its own lines (``CONFIG``,
``FINISHED ... params_sha256``, ``STEP_TIMES``).

Why a module of its own: ``report``, ``plan --from`` and ``benchmarks/restart_phases.py`` read these lines from real
Megatron Bridge jobs and from the workload's alike (job/log_lines.py holds their patterns), so their wording is one
concern, apart from the training loop in :mod:`.workload` that decides when each is printed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import signal
import time
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist

if TYPE_CHECKING:
    from megatron.bridge.training.config import ConfigContainer
    from megatron.bridge.training.state import GlobalState

__all__ = ["config_summary", "iteration_line", "params_sha256", "setup_line", "step_times_line"]


def params_sha256(model: torch.nn.Module) -> str:
    """SHA-256 over the parameter names and raw bytes, in state_dict order."""
    h = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        h.update(name.encode())
        h.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def _describe(obj: Any) -> Any:
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: _describe(getattr(obj, f.name)) for f in dataclasses.fields(obj) if not f.name.startswith("_")}
    if isinstance(obj, dict):
        return {str(k): _describe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_describe(v) for v in obj]
    return repr(obj)


def config_summary(cfg: ConfigContainer) -> dict[str, Any]:
    """The fields the workload and the plugins care about, with their Python types (for the CONFIG line)."""
    summary: dict[str, Any] = {}
    for name in ("ft", "nvrx_straggler", "inprocess_restart", "straggler", "rerun_state_machine"):
        value = getattr(cfg, name)
        summary[name] = _describe(value)
        summary[f"{name}_type"] = type(value).__name__
    for path in (
        "train.train_iters",
        "train.exit_signal_handler",
        "train.exit_signal",
        "checkpoint.save",
        "checkpoint.load",
        "checkpoint.save_interval",
        "checkpoint.async_save",
        "optimizer.optimizer",
        "optimizer.lr",
        "rng.seed",
    ):
        section, field = path.split(".")
        value = getattr(getattr(cfg, section), field)
        summary[path] = int(value) if isinstance(value, signal.Signals) else _describe(value)
        summary[f"{path}_type"] = type(value).__name__
    return summary


def setup_line(what: str, *, barrier: bool = True) -> None:
    """One of Megatron Bridge's setup lines: ``print_rank_0`` of ``what``, or with ``barrier`` its
    ``barrier_and_log`` (a barrier, then ``[what] datetime: <Y-m-d H:M:S>`` on rank 0)."""
    if barrier:
        from megatron.bridge.training.utils.log_utils import barrier_and_log  # imported by the workload already

        barrier_and_log(what)
    elif dist.get_rank() == 0:
        print(what, flush=True)


def iteration_line(state: GlobalState, train_iters: int, seconds_per_iteration: float) -> str:
    """Megatron Bridge 0.6.2's training_log line (``utils/train_utils.py``), the fields this model has: the wall
    clock to the second, the iteration, consumed samples and the average time per iteration (what
    ``nemo-resiliency report`` reads to measure goodput on real jobs and on this one alike)."""
    return (
        f" [{time.strftime('%Y-%m-%d %H:%M:%S')}] iteration {state.train_state.step:8d}/{train_iters:8d} |"
        f" consumed samples: {state.train_state.consumed_train_samples:12d} |"
        f" elapsed time per iteration (ms): {seconds_per_iteration * 1000.0:.1f} |"
    )


def step_times_line(seconds: list[float]) -> str:
    """``STEP_TIMES n=<iterations> median_ms=<m> min_ms=<a> max_ms=<b>``: this attempt's iterations that saved
    no checkpoint, each from the FT step-start hook to the end of the iteration (hooks included), so that the
    cost per step of a mechanism can be compared without process start-up or checkpoint writes."""
    ordered = sorted(seconds)
    mid = len(ordered) // 2
    median = ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
    return (
        f"STEP_TIMES n={len(ordered)} median_ms={median * 1e3:.3f} "
        f"min_ms={ordered[0] * 1e3:.3f} max_ms={ordered[-1] * 1e3:.3f}"
    )
