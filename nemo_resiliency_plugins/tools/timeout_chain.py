"""The timeout hierarchy of a resilient job, checked as one chain.

Each mechanism has its own clock, and they only work in a certain order, which no upstream tool checks:

* FT section timeouts must exceed what the section really takes (a checkpointing timeout below a real save
  kills a healthy job at its first save);
* in-process restart needs ``soft_timeout < hard_timeout < barrier_timeout`` and an NCCL watchdog
  (``dist.distributed_timeout_minutes``) longer than ``hard_timeout``, or NCCL tears the job down first;
* ``preempt_time`` must leave time for one step plus one checkpoint save;
* the launcher's SIGTERM -> SIGKILL grace period must outlast that save, and so must the platform's where it
  stops pods or containers (Kubernetes' ``terminationGracePeriodSeconds``, 30 s by default);
* the Slurm time limit must exceed all of these;
* with AsyncCheckpointPlugin the FT ``checkpointing`` section still has to cover a whole save: it wraps the
  blocking finalisation at exit, and Megatron Bridge does not recompute it while async save is on; and
  ``preempt_time`` too, since the exit waits for the write;
* with LocalCheckpointPlugin the preemption exit must write a persistent checkpoint (Megatron Bridge's exit
  handler does; without it only node-local checkpoints remain), and ``replication_factor`` cannot exceed the
  job's nodes.

Plugins are read by class name and field, so this module works with whichever plugins are installed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# ft_launcher's --term-timeout default (NVRx 0.7.0): SIGTERM forwarded to ranks, SIGKILL after this.
FT_LAUNCHER_TERM_TIMEOUT_S = 1800.0
# torchrun's grace period before SIGKILL (torch.distributed.elastic; pytorch/pytorch#119856).
TORCHRUN_TERM_TIMEOUT_S = 30.0
# Megatron Bridge's DistributedInitConfig.distributed_timeout_minutes default.
MB_DEFAULT_NCCL_TIMEOUT_S = 10 * 60.0


@dataclass
class Link:
    """One comparison in the chain: ``ok`` is None when a number it needs is unknown."""

    name: str
    rule: str
    ok: bool | None
    detail: str

    @property
    def verdict(self) -> str:
        return {True: "pass", False: "FAIL", None: "unknown"}[self.ok]


def _by_class(plugins: list[Any], name: str) -> Any:
    return next((p for p in plugins if type(p).__name__ == name), None)


def slurm_time_limit_s(time: str | None) -> float | None:
    """Seconds in a Slurm ``--time`` value, None when unlimited or unreadable (the plugins report those)."""
    from nemo_resiliency_plugins.core.executor_config import slurm_time_limit_seconds

    try:
        seconds = slurm_time_limit_seconds(time)
    except ValueError:
        return None
    return None if seconds is None else float(seconds)


def timeout_chain(
    plugins: list[Any],
    executor: Any = None,
    *,
    step_time_s: float | None = None,
    save_time_s: float | None = None,
    nccl_timeout_s: float | None = None,
) -> list[Link]:
    """Check every link of the chain the plugins and executor define; unknown numbers give ``ok=None``."""
    links: list[Link] = []
    ft = _by_class(plugins, "FaultTolerancePlugin")
    inproc = _by_class(plugins, "InProcessRestartPlugin")
    preempt = _by_class(plugins, "PreemptionPlugin")
    launcher_grace = FT_LAUNCHER_TERM_TIMEOUT_S if ft is not None else TORCHRUN_TERM_TIMEOUT_S
    limit = slurm_time_limit_s(getattr(executor, "time", None)) if executor is not None else None

    if ft is not None and ft.workload_style == "sections":
        sections = ft.section_timeouts
        step_t, save_t = sections.get("step"), sections.get("checkpointing")
        links.append(_cmp("FT step timeout > one step", step_t, step_time_s, "step timeout", "step time"))
        if _by_class(plugins, "AsyncCheckpointPlugin") is not None:
            # The section also wraps the blocking finalisation at exit, which waits for a whole write, and
            # Megatron Bridge never recomputes it with async save on: it must cover a synchronous-size save.
            link = _cmp("FT checkpointing timeout > one save", save_t, save_time_s, "checkpointing timeout", "save")
            link.name = "FT checkpointing timeout > one whole save (async: exit waits for the write, not recomputed)"
            links.append(link)
        else:
            links.append(
                _cmp("FT checkpointing timeout > one save", save_t, save_time_s, "checkpointing timeout", "save")
            )
        if ft.workload_check_interval and step_t:
            ok = ft.workload_check_interval < step_t
            links.append(
                Link(
                    "rank-monitor check interval < step timeout",
                    "workload_check_interval < section_timeouts['step']",
                    ok,
                    f"{ft.workload_check_interval:g} s vs {step_t:g} s (a hang is seen up to one interval late)",
                )
            )
    if inproc is not None:
        soft, hard, barrier = (getattr(inproc, n, None) for n in ("soft_timeout", "hard_timeout", "barrier_timeout"))
        if None not in (soft, hard, barrier):
            links.append(
                Link(
                    "in-process soft < hard < barrier",
                    "soft_timeout < hard_timeout < barrier_timeout",
                    soft < hard < barrier,
                    f"{soft:g} s < {hard:g} s < {barrier:g} s",
                )
            )
        if soft is not None:
            # NVRx stamps progress only while the main thread runs Python bytecode: a save longer than soft_timeout
            # counts as a hang, and the re-entry saves again (issue 32 item 6, H200: the first save of a process took
            # ~30 s beside other jobs, also the first after each in-process restart).
            links.append(
                _cmp(
                    "in-process soft timeout > longest save (first save of a process included)",
                    soft,
                    save_time_s,
                    "soft_timeout",
                    "save",
                )
            )
        watchdog = nccl_timeout_s or MB_DEFAULT_NCCL_TIMEOUT_S
        if hard is not None:
            links.append(
                Link(
                    "NCCL watchdog > in-process hard timeout",
                    "dist.distributed_timeout_minutes * 60 > hard_timeout",
                    watchdog > hard,
                    f"{watchdog:g} s vs {hard:g} s",
                )
            )
    if preempt is not None:
        need = None if step_time_s is None or save_time_s is None else step_time_s + save_time_s
        links.append(
            _cmp("preempt_time > one step + one save", float(preempt.preempt_time), need, "preempt_time", "step + save")
        )
        links.append(
            _cmp(
                "launcher SIGTERM->SIGKILL grace > one save",
                launcher_grace,
                save_time_s,
                "ft_launcher term timeout" if ft is not None else "torchrun grace",
                "save",
            )
        )
        grace = _platform_grace_s(executor)
        if grace is not None:
            links.append(
                _cmp(
                    "platform SIGTERM->SIGKILL grace > one step + one save",
                    grace,
                    need,
                    "grace period",
                    "step + save",
                )
            )
        if limit is not None:
            links.append(
                Link(
                    "Slurm time limit > preempt_time",
                    "executor.time > preempt_time",
                    limit > preempt.preempt_time,
                    f"{limit:g} s vs {preempt.preempt_time:g} s",
                )
            )
    links.extend(_checkpoint_links(plugins, executor, preempt))
    if limit is not None and ft is not None and ft.workload_style == "sections":
        setup = ft.section_timeouts.get("setup")
        if setup:
            links.append(
                Link(
                    "Slurm time limit > FT setup timeout",
                    "executor.time > section_timeouts['setup']",
                    limit > setup,
                    f"{limit:g} s vs {setup:g} s",
                )
            )
    return links


def _checkpoint_links(plugins: list[Any], executor: Any, preempt: Any) -> list[Link]:
    """Async and local checkpoints against preemption and the job's nodes."""
    links: list[Link] = []
    local = _by_class(plugins, "LocalCheckpointPlugin")
    asynchronous = _by_class(plugins, "AsyncCheckpointPlugin")
    if preempt is not None and (local is not None or asynchronous is not None):
        handler = bool(getattr(preempt, "enable_exit_handler", True))
        what = "a persistent checkpoint (Megatron Bridge's exit path saves with non_persistent_ckpt=False"
        what += ", then blocks until the async write is finalised)" if asynchronous is not None else ")"
        links.append(
            Link(
                "preemption exit leaves a durable checkpoint",
                "PreemptionPlugin.enable_exit_handler and checkpoint.save",
                handler,
                what
                if handler
                else "enable_exit_handler=False: the signal saves nothing and only local checkpoints remain, which a "
                "requeue onto other nodes cannot read",
            )
        )
    if local is not None and getattr(local, "replication", False):
        try:
            nodes = int(executor.nnodes()) if executor is not None else None
        except (AttributeError, NotImplementedError, TypeError, ValueError):
            nodes = None
        factor = local.replication_factor
        links.append(
            Link(
                "replication_factor <= nodes",
                "LocalCheckpointPlugin.replication_factor <= executor.nodes",
                None if nodes is None else factor <= nodes,
                f"{factor} replicas on {nodes if nodes is not None else 'an unknown number of'} nodes"
                + (" (some replicas share the node they protect)" if nodes is not None and factor > nodes else ""),
            )
        )
    return links


def _platform_grace_s(executor: Any) -> float | None:
    """Off Slurm, the seconds a platform waits between SIGTERM and SIGKILL (Kubernetes' 30 s default), when
    the executor exposes it; None on Slurm (``preempt_time`` is the budget there) or when unknown."""
    if executor is None:
        return None
    from nemo_resiliency_plugins.core.executors import for_executor
    from nemo_resiliency_plugins.errors import ResiliencyConfigError

    try:
        rules = for_executor(executor)
    except ResiliencyConfigError:
        return None
    return rules.grace_period_s()


def _cmp(name: str, bound: float | None, actual: float | None, bound_name: str, actual_name: str) -> Link:
    rule = f"{bound_name} > {actual_name}"
    if bound is None:
        return Link(name, rule, None, f"no {bound_name}")
    if actual is None:
        return Link(name, rule, None, f"{bound_name} {bound:g} s; {actual_name} unknown (pass --step-time/--save-time)")
    return Link(name, rule, bound > actual, f"{bound:g} s vs {actual:g} s")
