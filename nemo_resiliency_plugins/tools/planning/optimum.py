"""What to set: save intervals, section timeouts, restart budgets, a warm reserve.

Each recommendation is a formula a person can check by hand; the simulation then confirms the save interval
(the closed forms are first order in the fault rate, the simulation is not).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from nemo_resiliency_plugins.errors import ResiliencyConfigError
from nemo_resiliency_plugins.tools.planning.failures import FailureModel
from nemo_resiliency_plugins.tools.planning.recovery import (
    NVRX_SAFETY_FACTOR,
    MechanismSet,
    RunParams,
    fault_costs,
    goodput_closed_form,
)

# A section timeout is this many times the longest time the section takes when healthy: NVRx's own factor for
# computed timeouts, wide enough for the slow first step after a restart and for save-time jitter.
SAFETY_FACTOR = NVRX_SAFETY_FACTOR
MIN_STEP_TIMEOUT_S = 10.0  # below this, a garbage-collection pause or a slow data-loader batch kills a healthy job
MAX_CHECK_INTERVAL_S = 5.0  # NVRx's default rank-monitor check interval
MIN_RESTARTS = 3  # Megatron Bridge's default: cheap insurance even where few faults are expected
REPAIR_S = 24 * 3600.0  # how long a broken node stays out before it is repaired and returns (assumed)


def young_interval(save_s: float, mtbf_s: float) -> float:
    """Young (1974): the save interval that minimises lost time, ``sqrt(2 delta M)``."""
    _positive("save time", save_s)
    _positive("MTBF", mtbf_s)
    return math.sqrt(2.0 * save_s * mtbf_s)


def daly_interval(save_s: float, mtbf_s: float) -> float:
    """Daly (2006), first-order form with the restart-independent correction: ``sqrt(2 delta M) - delta``
    for ``delta < 2M``, else ``M`` (saving costs more than it saves: save once per MTBF)."""
    _positive("save time", save_s)
    _positive("MTBF", mtbf_s)
    if save_s >= 2.0 * mtbf_s:
        return mtbf_s
    return math.sqrt(2.0 * save_s * mtbf_s) - save_s


def _positive(name: str, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        raise ResiliencyConfigError("plan", name, value, "a finite number > 0")


@dataclass(frozen=True)
class SectionTimeouts:
    setup: float
    step: float
    checkpointing: float
    out_of_section: float
    check_interval: float


def section_timeouts(step_s: float, save_s: float, startup_s: float, safety: float = SAFETY_FACTOR) -> SectionTimeouts:
    """Each timeout ``safety x`` its healthy duration (the step timeout at least ``MIN_STEP_TIMEOUT_S``);
    the check interval a fifth of the step timeout, at most NVRx's 5 s, so it adds little to detection."""
    for name, value in (("step time", step_s), ("save time", save_s), ("start-up time", startup_s)):
        _positive(name, value)
    _positive("safety factor", safety)
    step = max(MIN_STEP_TIMEOUT_S, safety * step_s)
    return SectionTimeouts(
        setup=safety * startup_s,
        step=step,
        checkpointing=safety * save_s,
        out_of_section=max(60.0, safety * step_s),
        check_interval=min(MAX_CHECK_INTERVAL_S, step / 5.0),
    )


def restart_budget(expected_faults: float, job_retries: int = 2) -> int:
    """In-job restarts so that the run's expected faults use up the pool ``(K + 1)(R + 1)`` at most once, and
    never fewer than ``MIN_RESTARTS``.

    A restart budget exists to stop a crash loop, not to ration genuine faults: at Llama 3's rate, 3 restarts
    and 2 retries call a person every 12 faults. The cost of a larger K is bounded: a deterministic crash
    loops K times (K restarts of wasted time) before the job fails.
    """
    return max(MIN_RESTARTS, math.ceil(expected_faults / (job_retries + 1)) - 1)


def reserve_nodes(node_loss_per_s: float, repair_s: float = REPAIR_S) -> int:
    """Spare nodes to cover the nodes that are out for repair at once, 99 % of the time (Poisson quantile;
    its normal approximation, mean + 2.326 sigma, above a mean of 50, where the terms underflow)."""
    mean = node_loss_per_s * repair_s
    if mean <= 0:
        return 0
    if mean > 50:
        return math.ceil(mean + 2.326 * math.sqrt(mean))
    k, term, total = 0, math.exp(-mean), math.exp(-mean)
    while total < 0.99:
        k += 1
        term *= mean / k
        total += term
    return max(1, k)


def expected_faults(params: RunParams, failures: FailureModel, mech: MechanismSet) -> float:
    """Faults over the run that use a restart of the pool."""
    lam = failures.cluster_rates(params.gpus)
    costs = fault_costs(params, mech)
    return sum(lam[c] * params.wall_s for c, cost in costs.items() if cost.uses_budget)


def optimal_local_interval(params: RunParams, failures: FailureModel, mech: MechanismSet) -> float | None:
    """Daly's interval for local checkpoints, against the faults a local checkpoint survives."""
    if params.local_save_time_s is None or params.local_save_time_s <= 0:
        return None
    lam = failures.cluster_rates(params.gpus)
    costs = fault_costs(params, mech)
    rate = sum(lam[c] for c, cost in costs.items() if cost.redo_from == "local")
    if rate <= 0:
        return None
    return daly_interval(params.local_save_time_s, 1.0 / rate)


def optimal_persistent_interval(params: RunParams, failures: FailureModel, mech: MechanismSet) -> float:
    """Daly's interval for persistent saves, against the faults that are redone from them (all of them
    without local checkpoints), with the blocking part of the save as its cost."""
    lam = failures.cluster_rates(params.gpus)
    costs = fault_costs(params, mech)
    rate = sum(lam[c] for c, cost in costs.items() if cost.redo_from == "persistent")
    if rate <= 0:  # every fault is covered elsewhere: save once a day
        return 86400.0
    return daly_interval(max(params.blocking_save_s, 1e-3), 1.0 / rate)


def reserve_pays_off(
    params: RunParams, failures: FailureModel, mech: MechanismSet, interval_s: float, local_s: float | None
) -> tuple[bool, int, float, float]:
    """Whether spare nodes held warm raise goodput counted over every GPU held: (pays, nodes, without, with)."""
    nodes = reserve_nodes(failures.cluster_rates(params.gpus)["node_loss"])
    without = goodput_closed_form(params, _with(mech, warm_reserve_nodes=0), failures, interval_s, local_s)
    if nodes == 0:
        return False, 0, without, without
    with_ = goodput_closed_form(params, _with(mech, warm_reserve_nodes=nodes), failures, interval_s, local_s)
    return with_ > without, nodes, without, with_


def _with(mech: MechanismSet, **changes: object) -> MechanismSet:
    import dataclasses

    return dataclasses.replace(mech, **changes)
