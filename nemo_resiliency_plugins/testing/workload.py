"""Reference workload: a small deterministic CPU training loop driven by Megatron Bridge's resiliency code.

It exists so that the plugins can be proven end to end on a machine without GPUs. The *configuration*, the
*override parsing* and the *fault-tolerance integration* are Megatron Bridge's real code; only the model and
the training step are a toy (a ``torch.nn.Linear`` trained with a hand-written gradient all-reduce over gloo),
because Megatron Bridge's real model/optimizer setup needs CUDA.

What runs for real (Megatron Bridge 0.6):
    * ``megatron.bridge.training.config.ConfigContainer`` and its sub-configs, built by
      :func:`reference_config` (or, as a fiddle tree, by :func:`reference_config_buildable`), completed by its own
      ``runtime_config_update`` (environment variables, data-parallel size, ``validate()``).
    * Script path: Megatron Bridge's Hydra override applier
      ``process_config_with_overrides(cfg, cli_overrides=argv)``.
    * ``GlobalState`` / ``TrainState`` / ``FaultToleranceState`` (TrainState is checkpointed via its state_dict).
    * ``megatron.bridge.training.fault_tolerance``: ``setup``, ``maybe_setup_simulated_fault``,
      ``on_checkpoint_loaded``, ``on_training_step_start/end``, ``on_checkpointing_start/end``, ``shutdown``,
      including its ``ft_state.json`` timeout persistence in the checkpoint directory.
    * ``megatron.bridge.training.utils.sig_utils.DistributedSignalHandler`` (through
      ``GlobalState.signal_handler``) when ``cfg.train.exit_signal_handler`` is set.
    * NVRx straggler detection when ``cfg.nvrx_straggler`` is set: Megatron Bridge's own
      ``NVRxStragglerDetectionManager`` (``GlobalState.nvrx_straggler_manager``) is initialised, wraps the train
      step, is checked after every iteration with ``check_nvrx_straggler_detection`` (its report names the slow
      rank on the logger ``nvrx_straggler.logger_name``; with ``stop_if_detected`` the loop saves a checkpoint
      and ends with exit code 0, as Megatron Bridge's ``checkpoint_and_decide_exit`` does) and is shut down with
      ``safe_shutdown_nvrx_straggler_manager``. NVRx's ``Detector`` computes the scores.
    * Megatron Core's re-run state machine, initialised by Megatron Bridge's ``init_rerun_state`` from
      ``cfg.rerun_state_machine``: each step runs inside ``should_run_forward_backward`` with the data behind a
      ``RerunDataIterator``, the loss goes through Megatron Bridge's ``masked_next_token_loss`` (which validates
      it when ``check_for_nan_in_loss`` / ``check_for_spiky_loss`` are on), and ``should_checkpoint_and_exit``
      decides the exit code (16 or 17) like Megatron Bridge's ``train_step``/``train``.
    * In-process restart when ``cfg.inprocess_restart.enabled``: the training loop is wrapped with Megatron
      Bridge's own ``maybe_wrap_for_inprocess_restart`` (its coordination TCPStore, NVRx ``inprocess.Wrapper``
      with Megatron Bridge's rank assignment, finalize/abort/health-check chain and timeouts) and called like
      Megatron Bridge's ``pretrain`` calls it; each restart iteration builds its process group on a
      ``PrefixStore(<iteration>, store)``, as Megatron Bridge's ``_pretrain`` does, and resumes from the last
      checkpoint in the same processes. See "In-process restart" in the code.

CPU accommodations (each marked ``# CPU accommodation:`` in the code):
    * ``maybe_setup_simulated_fault`` puts a one-element broadcast tensor on ``torch.cuda.current_device()``;
      on a host without CUDA that call is redirected to the CPU for the duration of the call only.
    * NVRx straggler detection (see ``../shared/research/ft-cpu.md`` section 6): NVRx's CUPTI extension cannot
      load here (it needs a newer libstdc++ and a GPU), so while the manager initialises, NVRx's
      ``CuptiManager`` is replaced by :class:`_CpuKernelClock`, which reports the CPU time of the step's compute
      part (forward, loss, backward and the injected delay; not the gradient all-reduce, as NVRx leaves NCCL
      kernels out) as one "kernel". NVRx's report code and Megatron Bridge's thresholds then apply to it
      unchanged. ``torch.cuda.synchronize`` (NVRx's report), ``torch.cuda.current_device`` (NVRx's interval
      tracker, Megatron Bridge's stop flag broadcast) are redirected to the CPU during those calls only.
    * Re-run state machine: Megatron Core's ``RerunStateMachine`` saves and restores the CUDA RNG state and
      all-reduces its flags in CUDA tensors. During the train step ``torch.cuda.get_rng_state``/``set_rng_state``
      are no-ops (there is no CUDA RNG) and ``current_device`` answers "cpu", and the machine's ``_reduce_any`` is
      replaced on the instance by the same all-reduce on CPU tensors (gloo).
    * In-process restart (see ``../shared/research/ft-cpu.md`` section 5): (a) NVRx's ``Wrapper`` adds NVML
      GPU/NVLink/NIC health checks when ``LOCAL_RANK`` is set, which fail on a host without NVML at the first
      restart; ``LOCAL_RANK`` is hidden while Megatron Bridge constructs the wrapper, and only then. (b) NVRx's
      ``AbortTorchDistributed`` aborts only NCCL backends and gloo has no working abort, so a rank blocked in a
      gloo collective is released only by the process-group timeout: inside the wrapper the gloo group uses
      ``NRP_IPR_PG_TIMEOUT`` seconds (default 10) instead of ``dist.distributed_timeout_minutes`` (which on GPUs
      is the NCCL watchdog the plugin sets above ``hard_timeout``).
    * Test accommodation: :func:`reference_config_buildable` builds ``env_vars`` through :func:`no_env_vars`
      so that a fresh process deserializing the tree (NeMo-Run's fdl_runner) imports this module, and with
      it :mod:`~nemo_resiliency_plugins.testing.te_compat`, before any Megatron Bridge class.

Interfaces
----------
Script::

    torchrun --standalone --nproc-per-node=2 -m nemo_resiliency_plugins.testing.workload [hydra overrides...]
    python -m nemo_resiliency_plugins.testing.workload checkpoint.save=/tmp/ck train.train_iters=20

Python (e.g. ``run.Partial(pretrain, config=reference_config_buildable(d))``)::

    pretrain(reference_config("/tmp/ck"))

Environment variables (fault injection; all optional):
    ``NRP_FAULT``       one of kill, hang, raise, sigterm, slow, nan, nan_persistent
    ``NRP_FAULT_STEP``  step (number of completed iterations) at which to inject; default 0
    ``NRP_FAULT_RANK``  global rank that injects; default 1
    ``NRP_STEP_TIME``   extra sleep per step in seconds; default 0.05
    ``NRP_SAVE_DIR``    script path only: default for ``checkpoint.save`` (an override still wins)
    ``NRP_IPR_PG_TIMEOUT``  in-process restart only: gloo process-group timeout in seconds; default 10
    ``NRP_DEVICE``      ``cpu`` (default: gloo) or ``cuda`` (GPU mode: model and batches on GPU ``LOCAL_RANK``,
                        NCCL process group, the step's extra compute time spent in a GPU kernel)

kill/hang/raise/sigterm are injected once per save directory: a marker file ``nrp_fault_injected`` in
``checkpoint.save`` stops a restarted attempt from injecting again (without ``checkpoint.save`` there is no
marker and every attempt injects). ``slow`` models a persistently slow
rank: it applies on every step >= NRP_FAULT_STEP of every attempt (its compute part takes 3x as long).
``nan`` adds NaN to the model output, hence to the loss and the gradients, of step NRP_FAULT_STEP once (a
transient fault: a re-run of the step is clean); ``nan_persistent`` adds it on every run of that step in the
attempt that injects it (the re-run reproduces it). Both use the marker, so a restarted attempt is clean.

Log lines (stdout, flushed, each prefixed with ``[rank<r>] ``):
    ``START rank=<r> world=<w> restart=<TORCHELASTIC_RESTART_COUNT>``
    ``CONFIG <json>`` (rank 0: parsed ft/straggler/in-process-restart/train/checkpoint fields and types)
    ``RESUMED from step <n>`` or ``STARTING from scratch``
    ``FAULT_INJECTED kind=<k> step=<s> rank=<r>``
    ``CHECKPOINT saved step=<n>`` (rank 0)
    ``EXIT on signal step=<n>`` (exit-signal handler path; the process then exits 0)
    ``STRAGGLER_REPORT step=<n> elapsed_s=<s>`` (rank 0, each time NVRx's report interval elapsed; the
    report itself is logged by Megatron Bridge's manager: ``STRAGGLER DETECTION WARNING ...``,
    ``GPU relative performance:`` followed by ``Rank=<r> Node=<n> Score=<s>`` lines)
    ``EXIT on straggler step=<n>`` (``stop_if_detected``; the process then exits 0)
    ``EXIT rerun_state_machine exit_code=<c> step=<n>`` (the process then exits with that code)
    ``FINISHED step=<n> params_sha256=<hex>`` (rank 0)
    ``STEP_TIMES n=<k> median_ms=<m> min_ms=<a> max_ms=<b>`` (rank 0, after its loop: iterations without a
    checkpoint, FT hooks included)
    ``INPROCESS iteration=<i> pid=<pid> time=<unix s>`` (in-process restart: each entry into the loop)
    ``INPROCESS completed pid=<pid> iterations=<n>`` (in-process restart: the wrapper returned)

Files in ``checkpoint.save``: ``iter_<step:07d>.pt`` (written atomically by rank 0; model, optimizer,
TrainState and every rank's RNG/data-stream state), ``latest_checkpointed_iteration.txt`` (an iteration
number, readable by ft_launcher's ``--ft-checkpoint-iteration-file``), ``final_params.pt`` (rank 0, end of
training), ``ft_state.json`` (written by Megatron Bridge when ``ft.calc_ft_timeouts`` is on) and the fault
marker.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import gc
import hashlib
import io
import json
import logging
import os
import re
import signal
import socket
import sys
import threading
import time
from typing import Any

from nemo_resiliency_plugins.testing.te_compat import ensure_megatron_bridge_importable

# Importing Megatron Bridge creates millions of objects (every model bridge it ships); the cyclic garbage
# collector, run again and again while they appear, adds ~10% to every rank's start-up. It is off during the
# imports below and on again after them.
_GC_WAS_ENABLED = gc.isenabled()
gc.disable()
ensure_megatron_bridge_importable()

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from megatron.bridge.models.gpt_provider import GPTModelProvider  # noqa: E402
from megatron.bridge.training import fault_tolerance  # noqa: E402
from megatron.bridge.training import nvrx_straggler as mb_nvrx_straggler  # noqa: E402
from megatron.bridge.training.config import (  # noqa: E402
    CheckpointConfig,
    ConfigContainer,
    LoggerConfig,
    MockGPTDatasetConfig,
    OptimizerConfig,
    RNGConfig,
    SchedulerConfig,
    TrainingConfig,
    runtime_config_update,
)
from megatron.bridge.training.initialize import init_rerun_state  # noqa: E402
from megatron.bridge.training.losses import masked_next_token_loss  # noqa: E402
from megatron.bridge.training.state import GlobalState  # noqa: E402
from megatron.bridge.training.tokenizers.config import TokenizerConfig  # noqa: E402
from megatron.core.rerun_state_machine import (  # noqa: E402
    RerunDataIterator,
    destroy_rerun_state_machine,
    get_rerun_state_machine,
)

if _GC_WAS_ENABLED:
    gc.enable()

__all__ = [
    "FAULT_KINDS",
    "FaultSpec",
    "main",
    "no_env_vars",
    "params_sha256",
    "pretrain",
    "reference_config",
    "reference_config_buildable",
]

FAULT_KINDS = ("kill", "hang", "raise", "sigterm", "slow", "nan", "nan_persistent")
_LOSS_FAULTS = ("nan", "nan_persistent")
FAULT_MARKER = "nrp_fault_injected"
TRACKER_FILE = "latest_checkpointed_iteration.txt"
FINAL_PARAMS = "final_params.pt"
_CKPT_RE = re.compile(r"^iter_(\d{7,})\.pt$")
_CKPT_FORMAT = "nrp-reference-workload/1"

# The toy model and data: y = x @ W_true^T + b_true + noise, fitted by one Linear layer.
_IN_FEATURES = 16
_OUT_FEATURES = 4
_ROWS_PER_RANK = 32


# ----------------------------------------------------------------------------------------------------------
# Configuration
# ----------------------------------------------------------------------------------------------------------
def _reference_kwargs(save_dir: str | None) -> dict[str, dict[str, Any]]:
    """Constructor arguments of every sub-config the ConfigContainer constructor requires.

    ``ConfigContainer`` has no defaults for ``train``, ``model``, ``optimizer``, ``scheduler``, ``dataset``,
    ``logger``, ``tokenizer`` and ``checkpoint``; everything else (``rng``, ``ddp``, ``dist``, ...) has one.
    The values are the smallest that pass Megatron Bridge's own ``ConfigContainer.validate()`` on CPU for any
    world size: a 1-layer GPT provider (never instantiated; the workload trains a Linear), a mock dataset
    (never built), a NullTokenizer, constant LR. ``ft``, ``straggler``, ``nvrx_straggler`` and
    ``inprocess_restart`` are left at their default ``None``: the plugins set them.
    """
    return {
        "train": dict(train_iters=20, global_batch_size=8, micro_batch_size=1),
        "model": dict(
            num_layers=1,
            hidden_size=16,
            num_attention_heads=1,
            vocab_size=32,
            seq_length=8,
            make_vocab_size_divisible_by=8,
        ),
        # SGD with momentum, so that resume correctness depends on the optimizer state too.
        "optimizer": dict(
            optimizer="sgd", lr=0.05, sgd_momentum=0.9, weight_decay=0.0, use_distributed_optimizer=False
        ),
        "scheduler": dict(lr_decay_style="constant"),
        # GPTDatasetConfig.finalize() requires these three to be set explicitly.
        "dataset": dict(
            seq_length=8,
            random_seed=1234,
            reset_position_ids=False,
            reset_attention_mask=False,
            eod_mask_loss=False,
        ),
        "logger": dict(log_interval=1),
        "tokenizer": dict(tokenizer_type="NullTokenizer", vocab_size=32),
        "checkpoint": dict(save=save_dir, load=None, save_interval=5),
        "rng": dict(seed=1234),
    }


_CLASSES = {
    "train": TrainingConfig,
    "model": GPTModelProvider,
    "optimizer": OptimizerConfig,
    "scheduler": SchedulerConfig,
    "dataset": MockGPTDatasetConfig,
    "logger": LoggerConfig,
    "tokenizer": TokenizerConfig,
    "checkpoint": CheckpointConfig,
    "rng": RNGConfig,
}


def reference_config(save_dir: str | None = None) -> ConfigContainer:
    """A tiny, valid Megatron Bridge ``ConfigContainer`` for the reference workload.

    Fields the workload uses: ``train.train_iters``, ``train.exit_signal_handler``/``exit_signal``,
    ``checkpoint.save``/``load``/``save_interval``, ``optimizer.lr``/``sgd_momentum``/``weight_decay``
    (``optimizer.optimizer`` "sgd" or "adam" with ``adam_beta1/2``, ``adam_eps``), ``rng.seed``,
    ``dist.distributed_timeout_minutes``, and ``ft`` (Megatron Bridge's fault-tolerance hooks).
    """
    kwargs = _reference_kwargs(save_dir)
    return ConfigContainer(**{name: _CLASSES[name](**kw) for name, kw in kwargs.items()})


def reference_config_buildable(save_dir: str | None = None):
    """The same configuration as a NeMo-Run ``run.Config(ConfigContainer, ...)`` tree.

    Every sub-config is itself a ``run.Config`` of the real Megatron Bridge class, with only primitive
    arguments, so the tree survives NeMo-Run's ``ZlibJSONSerializer`` round trip (``Experiment.add``
    validation) and ``fdl.build`` gives a real ``ConfigContainer``. ``ft``, ``straggler``, ``nvrx_straggler``
    and ``inprocess_restart`` are not set (``None`` when built), for the plugins to fill in.
    """
    import nemo_run as run

    kwargs = _reference_kwargs(save_dir)
    return run.Config(
        ConfigContainer,
        env_vars=run.Config(no_env_vars),
        **{name: run.Config(_CLASSES[name], **kw) for name, kw in kwargs.items()},
    )


def no_env_vars() -> dict[str, str]:
    """Builds ``ConfigContainer.env_vars`` in :func:`reference_config_buildable`: always ``{}``.

    Why it exists (the smallest route found; CPU/test accommodation): NeMo-Run's ``fdl_runner`` deserializes
    the task in a fresh process, and fiddle imports every class the tree names while deserializing - before
    anything of ours has run. The first ``megatron.bridge`` class it imports would fail without Transformer
    Engine (see :mod:`~nemo_resiliency_plugins.testing.te_compat`). fiddle deserializes a Config's arguments
    in signature order, and ``env_vars`` is ``ConfigContainer``'s first field, so this reference to *this*
    module is resolved first; importing this module installs the accommodation, and the Megatron Bridge
    classes that follow import normally. Replacing ``env_vars`` with a plain dict removes that guarantee
    (only on machines without Transformer Engine).
    """
    return {}


# ----------------------------------------------------------------------------------------------------------
# Fault injection
# ----------------------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class FaultSpec:
    """Fault injection settings, from the ``NRP_*`` environment variables."""

    kind: str | None = None
    step: int = 0
    rank: int = 1
    step_time: float = 0.05

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> FaultSpec:
        env = os.environ if env is None else env
        kind = env.get("NRP_FAULT", "").strip().lower() or None
        if kind is not None and kind not in FAULT_KINDS:
            raise ValueError(f"NRP_FAULT={kind!r}: expected one of {', '.join(FAULT_KINDS)}")
        return cls(
            kind=kind,
            step=int(env.get("NRP_FAULT_STEP", "0")),
            rank=int(env.get("NRP_FAULT_RANK", "1")),
            step_time=float(env.get("NRP_STEP_TIME", "0.05")),
        )


class _FaultInjector:
    def __init__(self, spec: FaultSpec, rank: int, world: int, save_dir: str | None) -> None:
        self.spec = spec
        self.rank = rank
        self.active = spec.kind is not None and rank == spec.rank
        self.marker = os.path.join(save_dir, FAULT_MARKER) if save_dir else None
        # Whether an earlier attempt in this save dir already injected (nan_persistent looks at this only).
        self.injected_before = self.marker is not None and os.path.exists(self.marker)
        self._slow_announced = False
        self._loss_fault_done = False
        if spec.kind is not None and not 0 <= spec.rank < world and rank == 0:
            _log(f"NOTE NRP_FAULT={spec.kind} ignored: NRP_FAULT_RANK={spec.rank} not in world of {world}")

    def compute_delay(self, step: int) -> float:
        """Extra sleep inside the compute part of this step (the straggler effect)."""
        if self.active and self.spec.kind == "slow" and step >= self.spec.step:
            if not self._slow_announced:
                self._slow_announced = True
                _log(f"FAULT_INJECTED kind=slow step={step} rank={self.rank}")
            return 3.0 * self.spec.step_time
        return self.spec.step_time

    def maybe_inject(self, step: int) -> None:
        """Called inside the step (between on_training_step_start and on_training_step_end)."""
        kind = self.spec.kind
        if not self.active or kind == "slow" or kind in _LOSS_FAULTS or step != self.spec.step:
            return
        if self.marker is not None:
            if os.path.exists(self.marker):
                return  # already injected by an earlier attempt in this save dir
            with open(self.marker, "w") as f:
                f.write(f"kind={kind} step={step} rank={self.rank} pid={os.getpid()} time={time.time()}\n")
                f.flush()
                os.fsync(f.fileno())
        _log(f"FAULT_INJECTED kind={kind} step={step} rank={self.rank}")
        if kind == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
            time.sleep(60)  # never reached in practice
        elif kind == "hang":
            threading.Event().wait()
        elif kind == "raise":
            raise RuntimeError(f"NRP injected fault at step {step} on rank {self.rank}")
        elif kind == "sigterm":
            os.kill(os.getpid(), signal.SIGTERM)

    def loss_fault(self, step: int) -> bool:
        """Whether to add NaN to this (re-)run's loss (the ``nan`` and ``nan_persistent`` kinds)."""
        kind = self.spec.kind
        if not self.active or kind not in _LOSS_FAULTS or step != self.spec.step:
            return False
        if kind == "nan" and (self._loss_fault_done or (self.marker is not None and os.path.exists(self.marker))):
            return False  # transient: injected once, so the re-run of the step is clean
        self._loss_fault_done = True
        if kind == "nan_persistent" and self.injected_before:
            return False  # reproducible within the attempt that injects it, not after a restart
        if self.marker is not None and not os.path.exists(self.marker):
            with open(self.marker, "w") as f:
                f.write(f"kind={kind} step={step} rank={self.rank} pid={os.getpid()} time={time.time()}\n")
                f.flush()
                os.fsync(f.fileno())
        _log(f"FAULT_INJECTED kind={kind} step={step} rank={self.rank}")
        return True


# ----------------------------------------------------------------------------------------------------------
# Helpers
# ----------------------------------------------------------------------------------------------------------
def _rank_from_env() -> int:
    return int(os.environ.get("RANK", "0"))


def _log(msg: str) -> None:
    rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else _rank_from_env()
    # One write per line, so lines of concurrently printing ranks do not interleave.
    sys.stdout.write(f"[rank{rank}] {msg}\n")
    sys.stdout.flush()


def params_sha256(model: torch.nn.Module) -> str:
    """SHA-256 over the parameter names and raw bytes, in state_dict order."""
    h = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        h.update(name.encode())
        h.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


# ----------------------------------------------------------------------------------------------------------
# GPU mode (NRP_DEVICE=cuda): model and batches on the rank's GPU, NCCL process group
# ----------------------------------------------------------------------------------------------------------
DEVICE_ENV = "NRP_DEVICE"
DEVICES = ("cpu", "cuda")


def device_from_env(env: dict[str, str] | None = None) -> str:
    """``NRP_DEVICE``: ``cpu`` (default: gloo, CPU tensors) or ``cuda`` (NCCL, tensors on the rank's GPU)."""
    env = os.environ if env is None else env
    value = env.get(DEVICE_ENV, "").strip().lower() or "cpu"
    if value not in DEVICES:
        raise ValueError(f"{DEVICE_ENV}={value!r}: expected one of {', '.join(DEVICES)}")
    return value


def backend_for(device: str) -> str:
    """The process-group backend for a device: NCCL for ``cuda`` (one GPU per rank), gloo for ``cpu``."""
    if device not in DEVICES:
        raise ValueError(f"device {device!r}: expected one of {', '.join(DEVICES)}")
    return "nccl" if device == "cuda" else "gloo"


def cuda_device_index(env: dict[str, str] | None = None) -> int:
    """The GPU a rank uses in GPU mode: its ``LOCAL_RANK`` (0 when launched plainly)."""
    env = os.environ if env is None else env
    return int(env.get("LOCAL_RANK", "0"))


def _torch_device() -> torch.device:
    if device_from_env() == "cuda":
        return torch.device("cuda", cuda_device_index())
    return torch.device("cpu")


_SPIN_CYCLES_PER_S: list[float] = []


def _spend_compute_time(seconds: float) -> None:
    """The step's extra compute time: a sleep on CPU; in GPU mode a real GPU kernel that runs that long
    (``torch.cuda._sleep`` spins for a number of GPU clock cycles, calibrated once), so that CUPTI's kernel
    timings, and with them NVRx's GPU scores, see a slowed step as they would see a slow GEMM."""
    if seconds <= 0:
        return
    if device_from_env() != "cuda":
        time.sleep(seconds)
        return
    if not _SPIN_CYCLES_PER_S:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(1_000_000)  # warm-up
        start.record()
        torch.cuda._sleep(20_000_000)
        end.record()
        end.synchronize()
        _SPIN_CYCLES_PER_S.append(20_000_000 / (start.elapsed_time(end) / 1e3))
    torch.cuda._sleep(int(seconds * _SPIN_CYCLES_PER_S[0]))


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _init_process_group(cfg: ConfigContainer, restart_store: Any = None) -> bool:
    """gloo process group from torchrun / ft_launcher env; a private 1-rank group when launched plainly."""
    if dist.is_initialized():
        return False
    backend = backend_for(device_from_env())
    if backend == "nccl":
        torch.cuda.set_device(cuda_device_index())
    if restart_store is not None:  # in-process restart: this iteration's store (see _run_with_inprocess_restart)
        # CPU accommodation: gloo has no working abort (NVRx's AbortTorchDistributed aborts NCCL backends only),
        # so a rank blocked in a collective when its peer fails is released only by this timeout; it bounds
        # the in-process recovery time. dist.distributed_timeout_minutes is the NCCL watchdog on GPUs.
        seconds = float(os.environ.get(IPR_PG_TIMEOUT_ENV, _IPR_PG_TIMEOUT_DEFAULT_S))
        if backend == "nccl":  # GPU mode: NCCL is aborted by NVRx, no gloo accommodation
            seconds = cfg.dist.distributed_timeout_minutes * 60.0
        dist.init_process_group(
            backend,
            store=restart_store,
            rank=int(os.environ["RANK"]),
            world_size=int(os.environ["WORLD_SIZE"]),
            timeout=datetime.timedelta(seconds=seconds),
        )
        return True
    timeout = datetime.timedelta(minutes=cfg.dist.distributed_timeout_minutes)
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ and "MASTER_ADDR" in os.environ:
        attempt_store = _restarted_attempt_store(timeout)
        if attempt_store is not None:
            dist.init_process_group(
                backend,
                store=attempt_store,
                rank=int(os.environ["RANK"]),
                world_size=int(os.environ["WORLD_SIZE"]),
                timeout=timeout,
            )
        else:
            dist.init_process_group(backend, timeout=timeout)
    else:
        dist.init_process_group(
            backend, init_method=f"tcp://127.0.0.1:{_free_port()}", rank=0, world_size=1, timeout=timeout
        )
    return True


def _restarted_attempt_store(timeout: datetime.timedelta) -> Any:
    """After a torchrun restart: the agent's store, with this attempt's own key prefix; otherwise None.

    LAUNCHER ACCOMMODATION (torchrun >= 2.x with its c10d rendezvous, pytorch/pytorch#167288): a restarted
    worker group is told to use the agent's store (``TORCHELASTIC_USE_AGENT_STORE=True``) at the same
    ``MASTER_ADDR:MASTER_PORT`` as the attempt before, and that store still holds the previous attempt's
    process-group keys. A new rank 0 reads its peer's stale address from them and gloo fails with
    "connectFullMesh ... Connection refused" (NCCL hangs on a stale unique id) whenever it gets there before
    the new peer wrote its own - 2 of 3 torchrun restarts in the recovery benchmark. Keys prefixed with the
    restart count are this attempt's only. ft_launcher's restarts do not need it (measured: none failed); the
    prefix is harmless there.
    """
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0)
    if restart == 0 or os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        return None
    store = dist.TCPStore(
        os.environ["MASTER_ADDR"],
        int(os.environ["MASTER_PORT"]),
        int(os.environ["WORLD_SIZE"]),
        is_master=False,
        timeout=timeout,
    )
    return dist.PrefixStore(f"nrp/attempt_{restart}", store)


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


def _ft_enabled(cfg: ConfigContainer) -> bool:
    # Same test as Megatron Bridge's setup(): a plain dict here (the `+ft.x=...` trap) fails like a real run.
    return bool(cfg.ft and cfg.ft.enable_ft_package)


@contextlib.contextmanager
def _simulated_fault_device_on_cpu():
    # CPU accommodation: megatron.bridge.training.fault_tolerance.maybe_setup_simulated_fault creates its
    # one-element rank broadcast tensor on torch.cuda.current_device(), which raises on a host without
    # CUDA. With the gloo backend that tensor belongs on the CPU, so for the duration of that one call only
    # current_device() answers "cpu"; everything else in the function (rank choice, broadcast, fault thread)
    # is Megatron Bridge's own code.
    if torch.cuda.is_available():
        yield
        return
    original = torch.cuda.current_device
    torch.cuda.current_device = lambda: "cpu"  # type: ignore[assignment]
    try:
        yield
    finally:
        torch.cuda.current_device = original  # type: ignore[assignment]


@contextlib.contextmanager
def _cuda_calls_on_cpu():
    # CPU accommodation (straggler detection and re-run state machine; see the module docstring): NVRx's
    # Detector.generate_report calls torch.cuda.synchronize(), its ReportIntervalTracker and Megatron Bridge's
    # stop-flag broadcast put one-element tensors on torch.cuda.current_device(), and Megatron Core's
    # RerunStateMachine saves/restores torch.cuda's RNG state and names the device in its messages. There is no
    # CUDA here and the process group is gloo: for the duration of those calls only, current_device() answers
    # "cpu", synchronize() has nothing to wait for, and the CUDA RNG state is empty. Nothing is patched on a
    # host with CUDA.
    if torch.cuda.is_available():
        yield
        return
    names = ("current_device", "synchronize", "get_rng_state", "set_rng_state")
    saved = {name: getattr(torch.cuda, name) for name in names}
    torch.cuda.current_device = lambda: "cpu"  # type: ignore[assignment]
    torch.cuda.synchronize = lambda *a, **k: None  # type: ignore[assignment]
    torch.cuda.get_rng_state = lambda *a, **k: torch.empty(0, dtype=torch.uint8)  # type: ignore[assignment]
    torch.cuda.set_rng_state = lambda *a, **k: None  # type: ignore[assignment]
    try:
        yield
    finally:
        for name, fn in saved.items():
            setattr(torch.cuda, name, fn)


def _reduce_any_on_cpu(value):
    # CPU accommodation: Megatron Core's RerunStateMachine._reduce_any, with the flag tensor on the CPU (gloo)
    # instead of device='cuda'. Same semantics: True on every rank if any rank has True.
    if isinstance(value, list):
        flags = torch.tensor(value, dtype=torch.int32)
        dist.all_reduce(flags)
        return tuple(x > 0 for x in flags.tolist())
    flag = torch.tensor([value], dtype=torch.int32)
    dist.all_reduce(flag)
    return flag.item() > 0


@dataclasses.dataclass(frozen=True)
class _KernelStats:
    """The fields NVRx reads from its CUPTI extension's per-kernel statistics."""

    min: float
    max: float
    median: float
    avg: float
    stddev: float
    num_calls: int


class _CpuKernelClock:
    """CPU accommodation: a stand-in for NVRx's ``CuptiManager`` (same methods), used only without CUDA.

    CUPTI records the duration of every CUDA kernel launched while profiling is on (inside the train step that
    Megatron Bridge's manager wraps). Here the step's compute part is timed instead, by :func:`_cpu_kernel`,
    and reported as one kernel named ``cpu_compute``; the gradient all-reduce is left out, as NVRx leaves out
    NCCL kernels (a fast rank waiting for a slow one in a collective is not slow itself). NVRx's
    ``ReportGenerator`` turns these statistics into the GPU relative/individual scores exactly as it does
    CUPTI's, and Megatron Bridge compares them with its thresholds.
    """

    active: _CpuKernelClock | None = None

    def __init__(self, bufferSize=1_000_000, numBuffers=8, statsMaxLenPerKernel=4096):  # noqa: N803 (NVRx's names)
        self.max_len = statsMaxLenPerKernel
        self.started_cnt = 0
        self.is_initialized = False
        self.times: dict[str, list[float]] = {}
        _CpuKernelClock.active = self

    def initialize(self):
        self.is_initialized = True

    def shutdown(self):
        self.is_initialized = False
        self.started_cnt = 0
        if _CpuKernelClock.active is self:
            _CpuKernelClock.active = None

    def start_profiling(self):
        self.started_cnt += 1

    def stop_profiling(self):
        if self.started_cnt == 0:
            raise RuntimeError("No active profiling run.")
        self.started_cnt -= 1

    def record(self, name: str, elapsed_ms: float) -> None:
        if self.started_cnt > 0:
            times = self.times.setdefault(name, [])
            times.append(elapsed_ms)
            del times[: -self.max_len]

    def get_results(self):
        results = {}
        for name, times in self.times.items():
            t = torch.tensor(times, dtype=torch.float64)
            results[name] = _KernelStats(
                min=t.min().item(),
                max=t.max().item(),
                median=t.median().item(),
                avg=t.mean().item(),
                stddev=t.std().item() if len(times) > 1 else float("nan"),
                num_calls=len(times),
            )
        return results

    def reset_results(self):
        self.times = {}


@contextlib.contextmanager
def _cpu_kernel(name: str = "cpu_compute"):
    """Times the compute part of a step for :class:`_CpuKernelClock` (a no-op when it is not in use)."""
    start = time.perf_counter()
    try:
        yield
    finally:
        clock = _CpuKernelClock.active
        if clock is not None:
            clock.record(name, (time.perf_counter() - start) * 1e3)


@contextlib.contextmanager
def _cupti_stand_in():
    # CPU accommodation: NVRx's Detector.initialize() builds a CuptiManager, whose extension module cannot load
    # on this host (it needs GLIBCXX_3.4.32) and has no GPU to profile anyway; for the duration of that call it
    # builds a _CpuKernelClock instead. Nothing is replaced on a host with CUDA.
    if torch.cuda.is_available():
        yield
        return
    module = sys.modules[mb_nvrx_straggler.straggler.Detector.__module__]
    original = module.CuptiManager
    module.CuptiManager = _CpuKernelClock
    try:
        yield
    finally:
        module.CuptiManager = original


def _route_logger(name: str, rank: int) -> None:
    """Print a library logger's INFO+ records on stdout, prefixed like :func:`_log` (once per logger)."""
    lib_logger = logging.getLogger(name)
    if any(getattr(h, "_nrp_route", False) for h in lib_logger.handlers):
        return
    handler = logging.StreamHandler(sys.stdout)
    handler._nrp_route = True  # type: ignore[attr-defined]
    handler.setFormatter(logging.Formatter(f"[rank{rank}] %(name)s %(levelname)s: %(message)s"))
    lib_logger.addHandler(handler)
    lib_logger.setLevel(logging.INFO)
    lib_logger.propagate = False


def _build_optimizer(cfg: ConfigContainer, params) -> torch.optim.Optimizer:
    o = cfg.optimizer
    if o.optimizer == "sgd":
        return torch.optim.SGD(params, lr=o.lr, momentum=o.sgd_momentum, weight_decay=o.weight_decay)
    if o.optimizer == "adam":
        return torch.optim.Adam(
            params, lr=o.lr, betas=(o.adam_beta1, o.adam_beta2), eps=o.adam_eps, weight_decay=o.weight_decay
        )
    raise ValueError(f"reference workload supports optimizer.optimizer in ('sgd', 'adam'), got {o.optimizer!r}")


def _atomic_write_bytes(path: str, data: bytes) -> None:
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _atomic_torch_save(obj: Any, path: str) -> None:
    buf = io.BytesIO()
    torch.save(obj, buf)
    _atomic_write_bytes(path, buf.getvalue())


def _newest_checkpoint(directory: str | None) -> str | None:
    if not directory or not os.path.isdir(directory):
        return None
    best: tuple[int, str] | None = None
    for name in os.listdir(directory):
        m = _CKPT_RE.match(name)
        if m and (best is None or int(m.group(1)) > best[0]):
            best = (int(m.group(1)), os.path.join(directory, name))
    return best[1] if best else None


# ----------------------------------------------------------------------------------------------------------
# Training
# ----------------------------------------------------------------------------------------------------------
class _Trainer:
    def __init__(self, cfg: ConfigContainer, state: GlobalState) -> None:
        self.cfg = cfg
        self.state = state
        self.rank = dist.get_rank()
        self.world = dist.get_world_size()
        self.save_dir = cfg.checkpoint.save
        seed = cfg.rng.seed
        # Identical initial weights on every rank; a target function shared by all ranks.
        torch.manual_seed(seed)
        self.model = torch.nn.Linear(_IN_FEATURES, _OUT_FEATURES).to(_torch_device())  # GPU mode: on the GPU
        target = torch.Generator().manual_seed(seed + 1)
        self.w_true = torch.randn(_OUT_FEATURES, _IN_FEATURES, generator=target)
        self.b_true = torch.randn(_OUT_FEATURES, generator=target)
        self.optimizer = _build_optimizer(cfg, self.model.parameters())
        # Per-rank deterministic data stream; its position is part of the checkpoint.
        self.data_gen = torch.Generator().manual_seed(seed * 1000 + 17 + self.rank)
        # Batches are drawn lazily, one per next(); Megatron Core's RerunDataIterator replays a step's batch
        # when the re-run state machine re-runs the step.
        self.data_iterator = RerunDataIterator(self._batches())
        torch.manual_seed(seed * 1000 + 29 + self.rank)
        self.last_saved_step = -1

    def _batches(self):
        while True:
            x = torch.randn(_ROWS_PER_RANK, _IN_FEATURES, generator=self.data_gen)
            noise = 0.1 * torch.randn(_ROWS_PER_RANK, _OUT_FEATURES, generator=self.data_gen)
            y = x @ self.w_true.T + self.b_true + noise  # drawn on the CPU: the same data in both modes
            yield x.to(_torch_device()), y.to(_torch_device())

    # -- checkpointing -------------------------------------------------------------------------------------
    def save_checkpoint(self) -> None:
        step = self.state.train_state.step
        fault_tolerance.on_checkpointing_start(self.state)
        rng = {"data": self.data_gen.get_state(), "torch": torch.get_rng_state()}
        gathered = [None] * self.world if self.rank == 0 else None
        dist.gather_object(rng, gathered, dst=0)
        if self.rank == 0:
            os.makedirs(self.save_dir, exist_ok=True)
            payload = {
                "format": _CKPT_FORMAT,
                "step": step,
                "world_size": self.world,
                "train_state": self.state.train_state.state_dict(),
                "model": self.model.state_dict(),
                "optimizer": self.optimizer.state_dict(),
                "rng": gathered,
            }
            _atomic_torch_save(payload, os.path.join(self.save_dir, f"iter_{step:07d}.pt"))
            _atomic_write_bytes(os.path.join(self.save_dir, TRACKER_FILE), f"{step}\n".encode())
        dist.barrier()
        fault_tolerance.on_checkpointing_end(is_async_finalization=False, global_state=self.state)
        self.last_saved_step = step
        if self.rank == 0:
            _log(f"CHECKPOINT saved step={step}")

    def maybe_resume(self) -> None:
        load_dir = self.cfg.checkpoint.load or self.cfg.checkpoint.save
        choice = [_newest_checkpoint(load_dir) if self.rank == 0 else None]
        dist.broadcast_object_list(choice, src=0)
        path = choice[0]
        if path is None:
            _log("STARTING from scratch")
            return
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
        if ckpt.get("format") != _CKPT_FORMAT:
            raise RuntimeError(f"{path}: not a reference-workload checkpoint")
        if ckpt["world_size"] != self.world:
            raise RuntimeError(
                f"{path} was written by {ckpt['world_size']} ranks; this run has {self.world} "
                "(bit-exact resume needs the same world size)"
            )
        self.model.load_state_dict(ckpt["model"])
        self.optimizer.load_state_dict(ckpt["optimizer"])
        self.state.train_state.load_state_dict(ckpt["train_state"])
        mine = ckpt["rng"][self.rank]
        self.data_gen.set_state(mine["data"])
        torch.set_rng_state(mine["torch"])
        self.last_saved_step = self.state.train_state.step
        fault_tolerance.on_checkpoint_loaded(is_local_chkpt=False, global_state=self.state)
        _log(f"RESUMED from step {self.state.train_state.step} ({os.path.basename(path)})")

    # -- one iteration ---------------------------------------------------------------------------------------
    def train_step(self, injector: _FaultInjector) -> tuple[float, tuple[bool, int] | None]:
        """One iteration, shaped like Megatron Bridge's ``train_step``.

        Returns the loss and, when Megatron Core's re-run state machine says the job must stop,
        ``(should_checkpoint, exit_code)`` (the optimizer step is then not taken).
        """
        step = self.state.train_state.step
        injector.maybe_inject(step)
        rsm_cfg = self.cfg.rerun_state_machine
        rerun_state_machine = get_rerun_state_machine()
        loss_value = float("nan")
        with _cuda_calls_on_cpu():
            while rerun_state_machine.should_run_forward_backward(self.data_iterator):
                self.optimizer.zero_grad(set_to_none=False)
                with _cpu_kernel():
                    x, y = next(self.data_iterator)
                    output = self.model(x)
                    if injector.loss_fault(step):
                        # As a fault in the forward pass would: the NaN reaches the loss and the gradients.
                        output = output + float("nan")
                    squared_errors = (output - y).pow(2)
                    # Megatron Bridge's loss function: validates the loss with the re-run state machine.
                    loss_sum, num_elements, _ = masked_next_token_loss(
                        torch.ones_like(squared_errors),
                        squared_errors,
                        check_for_nan_in_loss=rsm_cfg.check_for_nan_in_loss,
                        check_for_spiky_loss=rsm_cfg.check_for_spiky_loss,
                    )
                    loss = loss_sum / num_elements
                    loss.backward()
                    delay = injector.compute_delay(step)
                    _spend_compute_time(delay)
                for p in self.model.parameters():  # data-parallel gradient averaging by hand
                    dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)
                    p.grad.div_(self.world)
                loss_value = float(loss.detach())
            should_checkpoint, should_exit, exit_code = rerun_state_machine.should_checkpoint_and_exit()
        if should_exit:
            return loss_value, (should_checkpoint, exit_code)
        self.optimizer.step()
        return loss_value, None


def pretrain(config: ConfigContainer) -> None:
    """Run the reference training loop with an already-built ``ConfigContainer``.

    Mirrors the order of Megatron Bridge's own ``pretrain``: ``runtime_config_update`` (incl. ``validate()``),
    ``GlobalState`` with the config, process group, re-run state machine (``init_rerun_state``),
    fault-tolerance ``setup`` (+ simulated fault), checkpoint load, NVRx straggler manager set-up, the loop with
    FT step/checkpointing hooks, the re-run state machine's exit decision, the exit-signal check and the
    straggler check, straggler manager and FT ``shutdown``.
    """
    torch.set_num_threads(1)  # determinism and no oversubscription on small CPU hosts
    # Everything imported so far lives as long as the process: frozen, the collector never walks it again, and
    # the interpreter's exit does not either (measured: 4-5 s -> 0.6 s from the last line to the process's end
    # with Megatron Bridge imported; the launcher waits for that on every rank at the end of a job).
    gc.freeze()
    cfg = config
    _log(
        f"START rank={_rank_from_env()} world={os.environ.get('WORLD_SIZE', '1')} "
        f"restart={os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}"
    )
    if _rank_from_env() == 0:
        _log("CONFIG " + json.dumps(config_summary(cfg), sort_keys=True))

    runtime_config_update(cfg)
    state = GlobalState()
    state.cfg = cfg  # also installs MB's DistributedSignalHandler when train.exit_signal_handler is set
    if _inprocess_restart_enabled(cfg):  # Megatron Bridge's wrapper calls _train_once; see "In-process restart"
        _run_with_inprocess_restart(cfg, state)
        return
    _train_once(cfg, state)


def _train_once(cfg: ConfigContainer, state: GlobalState, restart_store: Any = None) -> None:
    """The training loop of :func:`pretrain`; in-process restart runs it once per restart iteration."""
    created_pg = _init_process_group(cfg, restart_store)
    # Megatron Bridge's initialize_megatron calls init_rerun_state once the process groups exist.
    _route_logger("megatron.core.rerun_state_machine", dist.get_rank())
    init_rerun_state(cfg.rerun_state_machine)
    rerun_state_machine = get_rerun_state_machine()
    if not torch.cuda.is_available():
        rerun_state_machine._reduce_any = _reduce_any_on_cpu  # CPU accommodation, see _reduce_any_on_cpu
    ft_on = _ft_enabled(cfg)
    injector = None
    try:
        if ft_on:
            fault_tolerance.setup(cfg, state)
            with _simulated_fault_device_on_cpu():
                fault_tolerance.maybe_setup_simulated_fault(cfg.ft)

        trainer = _Trainer(cfg, state)
        injector = _FaultInjector(FaultSpec.from_env(), trainer.rank, trainer.world, trainer.save_dir)
        if trainer.save_dir and trainer.rank == 0:
            os.makedirs(trainer.save_dir, exist_ok=True)
        trainer.maybe_resume()
        # Megatron Bridge's train(): the state machine continues from the loaded iteration.
        if rerun_state_machine.current_iteration != state.train_state.step:
            rerun_state_machine.current_iteration = state.train_state.step
        train_step = _setup_nvrx_straggler(state, trainer)
        dist.barrier()

        train_iters = cfg.train.train_iters
        save_interval = cfg.checkpoint.save_interval
        exited_on_signal = False
        loop_start = time.monotonic()
        step_seconds: list[float] = []  # iterations without a checkpoint, FT hooks included (STEP_TIMES)
        while state.train_state.step < train_iters:
            iteration_start = time.perf_counter()
            fault_tolerance.on_training_step_start(state)
            _, rerun_exit = train_step(injector)
            fault_tolerance.on_training_step_end(state)
            if rerun_exit is not None:
                # Megatron Bridge's train(): checkpoint if asked, leave the loop, shut down, sys.exit(exit_code).
                should_checkpoint, exit_code = rerun_exit
                if should_checkpoint and trainer.save_dir:
                    trainer.save_checkpoint()
                _log(f"EXIT rerun_state_machine exit_code={exit_code} step={state.train_state.step}")
                mb_nvrx_straggler.safe_shutdown_nvrx_straggler_manager(state.nvrx_straggler_manager)
                if ft_on:
                    fault_tolerance.shutdown(state)
                sys.exit(exit_code)
            state.train_state.step += 1
            state.train_state.consumed_train_samples += _ROWS_PER_RANK * trainer.world

            # Like Megatron Bridge's checkpoint_and_decide_exit: signal first, then the regular interval.
            if cfg.train.exit_signal_handler and any(state.signal_handler.signals_received()):
                if trainer.save_dir:
                    trainer.save_checkpoint()
                _log(f"EXIT on signal step={state.train_state.step}")
                exited_on_signal = True
                break
            if trainer.save_dir and save_interval and state.train_state.step % save_interval == 0:
                trainer.save_checkpoint()
            if trainer.last_saved_step != state.train_state.step:
                step_seconds.append(time.perf_counter() - iteration_start)
            # ... and last, NVRx straggler detection (collective: every rank calls it every iteration).
            if _check_nvrx_straggler(state, trainer.rank, time.monotonic() - loop_start):
                if trainer.save_dir and trainer.last_saved_step != state.train_state.step:
                    trainer.save_checkpoint()
                dist.barrier()
                if trainer.rank == 0:
                    _log("Exiting program due to straggler detection.")
                _log(f"EXIT on straggler step={state.train_state.step}")
                exited_on_signal = True
                break

        mb_nvrx_straggler.safe_shutdown_nvrx_straggler_manager(state.nvrx_straggler_manager)
        if not exited_on_signal:
            if trainer.save_dir and trainer.last_saved_step != state.train_state.step:
                trainer.save_checkpoint()
            if trainer.rank == 0:
                if trainer.save_dir:
                    _atomic_torch_save(trainer.model.state_dict(), os.path.join(trainer.save_dir, FINAL_PARAMS))
                _log(f"FINISHED step={state.train_state.step} params_sha256={params_sha256(trainer.model)}")
        if trainer.rank == 0 and step_seconds:
            _log(_step_times_line(step_seconds))
        if ft_on:
            fault_tolerance.shutdown(state)
        dist.barrier()
    finally:
        if state._signal_handler is not None:
            state._signal_handler.release()
        # NVRx's Detector is process-global: shut it down on every way out, so that a later pretrain() in the
        # same process (in-process restart) can initialise it again. A no-op when it is not running.
        mb_nvrx_straggler.safe_shutdown_nvrx_straggler_manager(state._nvrx_straggler_manager)
        if created_pg and dist.is_initialized():
            dist.destroy_process_group()
        destroy_rerun_state_machine()


def _step_times_line(seconds: list[float]) -> str:
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


def _setup_nvrx_straggler(state: GlobalState, trainer: _Trainer):
    """Megatron Bridge's train(): initialise the NVRx manager and wrap the train step; a failure disables it."""
    manager = state.nvrx_straggler_manager  # Megatron Bridge builds it when cfg.nvrx_straggler is set
    if manager is None:
        return trainer.train_step
    _route_logger(manager.config.logger_name, trainer.rank)
    try:
        with _cupti_stand_in():
            manager.initialize()
        return manager.wrap_train_step_function(trainer.train_step)
    except Exception as e:  # what Megatron Bridge does: report, then train on without detection
        if trainer.rank == 0:
            _log(f"Failed to initialize NVRx straggler detection: {e}")
        state._nvrx_straggler_manager = None
        return trainer.train_step


def _check_nvrx_straggler(state: GlobalState, rank: int, elapsed_s: float) -> bool:
    """Megatron Bridge's ``check_nvrx_straggler_detection``; True when the job should stop."""
    manager = state.nvrx_straggler_manager
    if manager is None:
        return False
    with _cuda_calls_on_cpu():
        stop = mb_nvrx_straggler.check_nvrx_straggler_detection(manager)
    if rank == 0 and manager.initialized and mb_nvrx_straggler.straggler.Detector.is_interval_elapsed():
        _log(f"STRAGGLER_REPORT step={state.train_state.step} elapsed_s={elapsed_s:.2f}")
    return stop


# ----------------------------------------------------------------------------------------------------------
# In-process restart
# ----------------------------------------------------------------------------------------------------------
IPR_PG_TIMEOUT_ENV = "NRP_IPR_PG_TIMEOUT"
_IPR_PG_TIMEOUT_DEFAULT_S = 10.0


def _inprocess_restart_enabled(cfg: ConfigContainer) -> bool:
    # Same test as Megatron Bridge's pretrain(); a plain dict here (the override trap) fails as it would there.
    return bool(cfg.inprocess_restart and cfg.inprocess_restart.enabled)


def _run_with_inprocess_restart(cfg: ConfigContainer, state: GlobalState) -> None:
    """Megatron Bridge's ``pretrain`` with in-process restart: wrap the loop with its own
    ``maybe_wrap_for_inprocess_restart`` and call the result with the coordination store it returns.

    After a fault on any rank, NVRx's wrapper aborts the process group, runs Megatron Bridge's finalize
    (``destroy_global_state`` + ``GlobalState.reset_for_restart``), waits for every rank at its barrier and
    calls :func:`_train_once` again in the same process, which resumes from the last checkpoint.
    """
    import itertools

    from megatron.bridge.training.inprocess_restart import maybe_wrap_for_inprocess_restart

    if dist.is_initialized():  # Megatron Bridge refuses this too: the wrapper owns the process group
        raise RuntimeError("in-process restart needs to create the process group itself")
    calls = itertools.count()

    def train_fn(state: GlobalState, store: Any = None, inprocess_call_wrapper: Any = None) -> None:
        # Megatron Bridge 0.6.2's adapter hands inprocess_call_wrapper=None (NVRx injects its CallWrapper only
        # into annotated parameters, and the adapter has none). Every rank enters once per NVRx iteration, so
        # counting entries gives the same iteration number on every rank, for the per-iteration store prefix.
        iteration = inprocess_call_wrapper.iteration if inprocess_call_wrapper is not None else next(calls)
        _log(f"INPROCESS iteration={iteration} pid={os.getpid()} time={time.time():.3f}")
        _train_once(cfg, state, restart_store=dist.PrefixStore(str(iteration), store))

    with _inprocess_wrapper_construction_on_cpu():
        wrapped, store = maybe_wrap_for_inprocess_restart(train_fn, cfg.inprocess_restart, state)
    wrapped(state, store=store)
    _log(f"INPROCESS completed pid={os.getpid()} iterations={next(calls)}")


@contextlib.contextmanager
def _inprocess_wrapper_construction_on_cpu():
    """While Megatron Bridge builds its in-process wrapper on a host without CUDA (construction only)."""
    if torch.cuda.is_available():
        yield
        return
    import nvidia_resiliency_ext.inprocess as inprocess

    # CPU accommodation: NVRx's inprocess.Wrapper appends NVML-based GPU/NVLink/NIC health checks whenever
    # LOCAL_RANK is set; without NVML they raise NVMLError_LibraryNotFound at the first restart and the job
    # dies (ft-cpu.md section 5). LOCAL_RANK is hidden while the wrapper is constructed, and only then.
    # Megatron Bridge's own health check (CudaHealthCheck, which checks nothing without CUDA, and FaultCounter)
    # is kept.
    saved = os.environ.pop("LOCAL_RANK", None)
    _CpuThreadedFinalize = _cpu_threaded_finalize_class()
    # CPU accommodation: NVRx 0.7's ThreadedFinalize raises "CUDA is not available" before running its
    # function (it binds the finalize thread to the rank's GPU). Megatron Bridge builds its finalize steps
    # (destroy_global_state + GlobalState.reset_for_restart, torch.cuda.empty_cache) from
    # inprocess.finalize.ThreadedFinalize, so during construction that name is _CpuThreadedFinalize: the same
    # functions, in a thread, with the same timeout, minus the GPU binding.
    original_finalize = inprocess.finalize.ThreadedFinalize
    inprocess.finalize.ThreadedFinalize = _CpuThreadedFinalize
    try:
        yield
    finally:
        inprocess.finalize.ThreadedFinalize = original_finalize
        if saved is not None:
            os.environ["LOCAL_RANK"] = saved


def _cpu_threaded_finalize_class():
    import nvidia_resiliency_ext.inprocess as inprocess

    class CpuThreadedFinalize(inprocess.finalize.ThreadedFinalize):
        """NVRx's ThreadedFinalize without the CUDA device binding (see _inprocess_wrapper_construction_on_cpu)."""

        def __call__(self, state):
            thread = threading.Thread(
                target=self.fn,
                args=self.args,
                kwargs=self.kwargs,
                name=f"CpuThreadedFinalize-{state.rank}",
                daemon=True,
            )
            thread.start()
            thread.join(self.timeout.total_seconds())
            if thread.is_alive():
                raise inprocess.exception.TimeoutError
            return state

    return CpuThreadedFinalize


def main(argv: list[str] | None = None) -> None:
    """Script entry: Megatron Bridge's override applier on :func:`reference_config`, then :func:`pretrain`."""
    from megatron.bridge.training.utils.omegaconf_utils import process_config_with_overrides

    overrides = list(sys.argv[1:] if argv is None else argv)
    cfg = reference_config(save_dir=os.environ.get("NRP_SAVE_DIR") or None)
    cfg = process_config_with_overrides(cfg, cli_overrides=overrides or None)
    pretrain(cfg)


if __name__ == "__main__":
    main()
