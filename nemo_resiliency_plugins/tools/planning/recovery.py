"""The recovery model: what one fault of each class costs a run, for a given set of mechanisms.

A fault costs wall time in four parts: *detection* (until something notices: at once for a dead process,
a section timeout for a hang, nothing at all without one), *restart* (new processes, or a new allocation
when a node is gone), *checkpoint load*, and *redo* (the training since the last checkpoint that survived
the fault: a local checkpoint survives a dead process but not a lost node; an async save is usable only once
it has finished writing). The closed form here adds these up per class, first order in the fault rate; the
simulation (``simulate.py``) plays the same rules out fault by fault.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from nemo_resiliency_plugins.errors import ResiliencyConfigError
from nemo_resiliency_plugins.tools.planning.failures import FAULT_CLASSES, FailureModel

# Stated defaults for what the user did not measure (each printed in the report when used).
DEFAULT_RESTART_S = 300.0  # launcher restart to the first step: process start, NCCL init, data loader
DEFAULT_REQUEUE_S = 900.0  # a failed job back in the queue, rendezvous timeout included
DEFAULT_HUMAN_S = 3600.0  # a person noticing a FAILED job and resubmitting it
DEFAULT_SDC_ROLLBACK_S = 3600.0  # training redone when a person finds corrupted numbers later (no check)
NCCL_TIMEOUT_S = 600.0  # Megatron Bridge's dist.distributed_timeout_minutes default (10): a hang's last resort
NVRX_SAFETY_FACTOR = 5.0  # NVRx TimeoutsCalc: computed timeout = 5 x the longest observed section time
# A lost node replaced by a spare inside the job (FaultTolerancePlugin.spare_nodes) costs this many in-place
# restarts: measured by benchmarks/spare_nodes/run.py on the 4-node local Slurm (2026-12-07, 2 runs each): the kill
# -> the first iteration after the resume took 11.7 s with a spare vs 10.0 s when only the node's ranks were
# restarted on the same nodes (the spare's launcher joins a new rendezvous round; its ranks start and load as any).
SPARE_VS_IN_PLACE = 1.17


def _check(owner: str, name: str, value: float | None, *, minimum: float = 0.0, strict: bool = True) -> None:
    if value is None:
        return
    bad = isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value)
    if bad or (value <= minimum if strict else value < minimum):
        raise ResiliencyConfigError(owner, name, value, f"a finite number {'>' if strict else '>='} {minimum:g}")


@dataclass(frozen=True, kw_only=True)
class RunParams:
    """What the user knows about the run (seconds unless named otherwise)."""

    gpus: int
    step_time_s: float
    save_time_s: float
    days: float = 30.0
    async_save: bool = False
    async_blocking_s: float | None = None  # the part of an async save training waits for (default: one step)
    local_save_time_s: float | None = None  # None: no local checkpoints
    restart_s: float = DEFAULT_RESTART_S
    load_s: float | None = None  # checkpoint load; default: the save time (same bytes, same file system)
    requeue_s: float = DEFAULT_REQUEUE_S
    human_s: float = DEFAULT_HUMAN_S
    sdc_rollback_s: float = DEFAULT_SDC_ROLLBACK_S
    gpus_per_node: int = 8

    def __post_init__(self) -> None:
        if isinstance(self.gpus, bool) or not isinstance(self.gpus, int) or self.gpus < 1:
            raise ResiliencyConfigError("plan", "gpus", self.gpus, "a whole number >= 1")
        for name in ("step_time_s", "save_time_s", "days", "restart_s"):
            _check("plan", name, getattr(self, name))
        for name in ("async_blocking_s", "local_save_time_s", "load_s", "requeue_s", "human_s", "sdc_rollback_s"):
            _check("plan", name, getattr(self, name), strict=False)
        if isinstance(self.gpus_per_node, bool) or not isinstance(self.gpus_per_node, int) or self.gpus_per_node < 1:
            raise ResiliencyConfigError("plan", "gpus_per_node", self.gpus_per_node, "a whole number >= 1")

    @property
    def wall_s(self) -> float:
        return self.days * 86400.0

    @property
    def load_time_s(self) -> float:
        return self.save_time_s if self.load_s is None else self.load_s

    @property
    def blocking_save_s(self) -> float:
        """Training time lost to one persistent save: all of it, or the blocking part of an async save."""
        if not self.async_save:
            return self.save_time_s
        return self.step_time_s if self.async_blocking_s is None else min(self.async_blocking_s, self.save_time_s)

    @property
    def save_lag_s(self) -> float:
        """How long after a save starts it becomes usable for recovery (an async save writes in the background)."""
        return self.save_time_s if self.async_save else 0.0


@dataclass(frozen=True, kw_only=True)
class MechanismSet:
    """The resiliency mechanisms a run has, reduced to what the cost model needs.

    ``step_timeout_s=None`` means hangs are not caught by a section timeout (the NCCL watchdog or a heartbeat
    cap is then the last resort). ``attempt_cap_s`` is Megatron Bridge's plugin with heartbeat timeouts only:
    no heartbeat ever arrives, so every attempt is killed this long after it starts. ``crash_at_first_save``
    is ``calc_ft_timeouts`` without declared sections (``KeyError: 'step'`` after the first save).
    """

    name: str
    step_timeout_s: float | None
    check_interval_s: float = 5.0
    in_job_restarts: int = 3
    job_retries: int = 2
    preemption_handled: bool = False
    sdc_check: bool = False
    warm_reserve_nodes: int = 0
    local_checkpoints: bool = False
    attempt_cap_s: float | None = None
    crash_at_first_save: bool = False
    launcher_restarts: bool = True  # False: no ft_launcher, every fault ends the job (retries only)
    checkpointing_timeout_s: float | None = None  # the 'checkpointing' section timeout, if any
    saves_complete: bool = True  # False: a timeout kills every save (nothing is ever kept)
    #: InProcessRestartPlugin.soft_timeout, if any: not longer than a save, NVRx interrupts every save
    inprocess_soft_timeout_s: float | None = None
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _check(self.name, "step_timeout_s", self.step_timeout_s)
        _check(self.name, "check_interval_s", self.check_interval_s, strict=False)
        _check(self.name, "attempt_cap_s", self.attempt_cap_s)
        for name in ("in_job_restarts", "job_retries", "warm_reserve_nodes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ResiliencyConfigError(self.name, name, value, "a whole number >= 0")

    @property
    def restart_pool(self) -> int:
        """Faults a job survives before a person must resubmit it: (in-job restarts + 1) x (retries + 1)."""
        in_job = self.in_job_restarts if self.launcher_restarts else 0
        return (in_job + 1) * (self.job_retries + 1)


@dataclass(frozen=True)
class FaultCost:
    """One fault's cost in wall seconds, without the redo (which depends on the save interval)."""

    detect_s: float
    restart_s: float
    redo_from: str  # "persistent", "local" or "none" (the fault loses no training)
    uses_budget: bool  # consumes one restart of the pool


def hang_detect_s(mech: MechanismSet) -> float:
    """Expected time from a hang to the kill: the step timeout plus half a check interval, else the watchdog."""
    if mech.step_timeout_s is None:
        return NCCL_TIMEOUT_S
    return mech.step_timeout_s + mech.check_interval_s / 2.0


def fault_costs(params: RunParams, mech: MechanismSet) -> dict[str, FaultCost]:
    """Per fault class: detection, restart (launcher, spare node, or requeue) and which checkpoint is redone from."""
    in_place = params.restart_s + params.load_time_s
    requeue = params.requeue_s + in_place
    restart = in_place if mech.launcher_restarts else requeue
    local = "local" if mech.local_checkpoints else "persistent"
    spare = mech.warm_reserve_nodes > 0 and mech.launcher_restarts
    node_restart = SPARE_VS_IN_PLACE * in_place if spare else requeue
    costs = {
        "dead_process": FaultCost(mech.check_interval_s / 2.0, restart, local, True),
        "hang": FaultCost(hang_detect_s(mech), restart, local, True),
        # The survivors block in a collective with the dead node: found like a hang, and only the persistent
        # checkpoint is left (the lost node's local copy is gone).
        "node_loss": FaultCost(hang_detect_s(mech), node_restart, "persistent", True),
        "preemption": (
            FaultCost(params.save_time_s, requeue, "none", False)
            if mech.preemption_handled
            else FaultCost(0.0, requeue, "persistent", True)
        ),
        "silent_corruption": (
            FaultCost(params.step_time_s, restart, local, True)
            if mech.sdc_check
            else FaultCost(params.sdc_rollback_s, restart, "persistent", True)
        ),
    }
    assert set(costs) == set(FAULT_CLASSES)
    return costs


def training_rate(params: RunParams, persistent_s: float, local_s: float | None) -> float:
    """Useful training per wall second while training: 1 / (1 + blocking save time per training second)."""
    overhead = params.blocking_save_s / persistent_s
    if local_s is not None and params.local_save_time_s is not None:
        overhead += params.local_save_time_s / local_s
    return 1.0 / (1.0 + overhead)


def redo_s(params: RunParams, where: str, persistent_s: float, local_s: float | None) -> float:
    """Expected wall time redone after a fault: half an interval of training (a fault is equally likely
    anywhere in it) plus, for an async save, the time the newest checkpoint was still being written."""
    if where == "none":
        return 0.0
    if where == "local" and local_s is not None and params.local_save_time_s is not None:
        return local_s / 2.0
    return persistent_s / 2.0 + params.save_lag_s


def goodput_closed_form(
    params: RunParams,
    mech: MechanismSet,
    failures: FailureModel,
    persistent_s: float,
    local_s: float | None = None,
) -> float:
    """Useful training / wall time, first order in the fault rate (Young/Daly's approximation):

    ``G = r (1 - sum_c lambda_c L_c) x N / (N + reserve)`` with ``r`` the training rate between faults (save
    stalls), ``lambda_c`` the job's rate of class ``c`` and ``L_c`` its cost: detection + restart + redo +
    the share of a person's resubmission once the restart pool is used up. Megatron Bridge's heartbeat-only
    defaults are a crash loop, not a fault stream: see :func:`attempt_cycle_goodput`. Clamped to [0, 1].
    """
    _check("plan", "persistent save interval", persistent_s)
    _check("plan", "local save interval", local_s)
    if not mech.saves_complete:
        return 0.0
    if mech.attempt_cap_s is not None or mech.crash_at_first_save:
        return attempt_cycle_goodput(params, mech, persistent_s, failures)
    rate = training_rate(params, persistent_s, local_s)
    lam = failures.cluster_rates(params.gpus)
    costs = fault_costs(params, mech)
    human = params.human_s / mech.restart_pool
    lost = 0.0
    for cls, cost in costs.items():
        per_fault = cost.detect_s + cost.restart_s + redo_s(params, cost.redo_from, persistent_s, local_s)
        per_fault += human if cost.uses_budget else 0.0
        lost += lam[cls] * per_fault
    return _clamp(rate / (1.0 + lost) * reserve_factor(params, mech))


def reserve_factor(params: RunParams, mech: MechanismSet) -> float:
    """Spare nodes held warm cost GPU-hours: goodput is counted over every GPU the run holds."""
    spare = mech.warm_reserve_nodes * params.gpus_per_node
    return params.gpus / (params.gpus + spare)


def attempt_cycle_goodput(
    params: RunParams, mech: MechanismSet, persistent_s: float, failures: FailureModel | None = None
) -> float:
    """Goodput of a run whose every attempt ends by itself (Megatron Bridge's heartbeat-only defaults).

    Each attempt: restart + load, then training until the first save completes (after which the timeout
    calculation crashes) or until the initial heartbeat timeout kills it, whichever is first; a save that
    does not complete before the kill keeps nothing. Every attempt uses one restart of the pool, and each
    used-up pool costs a person's resubmission. A random fault (rate ``lambda``) ends an attempt early and
    keeps nothing of it: an attempt of length ``l`` survives with ``s = exp(-lambda l)``, lasts
    ``(1 - s) / lambda`` on average, and a fault adds its detection and its restart's difference from an
    in-place one. ``G = kept x s / ((1 - s) / lambda + (1 - s) E[extra] + H / pool)``.
    """
    start = params.restart_s + params.load_time_s
    if mech.crash_at_first_save:
        length = start + persistent_s + params.save_time_s
        kept = persistent_s
        if mech.attempt_cap_s is not None and length > mech.attempt_cap_s:
            length, kept = mech.attempt_cap_s, 0.0
    else:  # only the heartbeat cap: every save that completes before it counts
        length = mech.attempt_cap_s
        period = persistent_s + params.blocking_save_s
        kept = math.floor(max(0.0, length - start - params.save_lag_s) / period) * persistent_s
    lam = failures.cluster_rates(params.gpus) if failures is not None else {}
    total = sum(lam.values())
    human = params.human_s / mech.restart_pool
    if total <= 0:
        return _clamp(kept / (length + human) * reserve_factor(params, mech))
    survive = math.exp(-total * length)
    costs = fault_costs(params, mech)
    extra = sum(lam[c] / total * (cost.detect_s + cost.restart_s - start) for c, cost in costs.items())
    cycle = (1.0 - survive) / total + (1.0 - survive) * extra + human
    return _clamp(kept * survive / cycle * reserve_factor(params, mech))


def _clamp(value: float) -> float:
    return min(1.0, max(0.0, value))
