"""The timeout hierarchy of a resilient job, checked as one chain.

Each mechanism has its own clock, and they only work in a certain order, which no upstream tool checks:

* FT section timeouts must exceed what the section really takes (a checkpointing timeout below a real save
  kills a healthy job at its first save);
* in-process restart needs ``soft_timeout < hard_timeout < barrier_timeout`` and an NCCL watchdog
  (``dist.distributed_timeout_minutes``) longer than ``hard_timeout``, or NCCL tears the job down first;
* ``preempt_time`` must leave time for one step plus one checkpoint save;
* the launcher's SIGTERM -> SIGKILL grace period must outlast that save, and so must the platform's where it
  stops pods or containers (Kubernetes' ``terminationGracePeriodSeconds``, 30 s by default);
* the Slurm time limit must exceed all of these.

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
    from nemo_resiliency_plugins.executor_config import slurm_time_limit_seconds

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
        links.append(_cmp("FT checkpointing timeout > one save", save_t, save_time_s, "checkpointing timeout", "save"))
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


def _platform_grace_s(executor: Any) -> float | None:
    """Off Slurm, the seconds a platform waits between SIGTERM and SIGKILL (Kubernetes' 30 s default), when
    the executor exposes it; None on Slurm (``preempt_time`` is the budget there) or when unknown."""
    if executor is None:
        return None
    from nemo_resiliency_plugins.errors import ResiliencyConfigError
    from nemo_resiliency_plugins.executors import for_executor

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
