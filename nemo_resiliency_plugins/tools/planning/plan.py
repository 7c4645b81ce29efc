"""``plan``: put the failure model, the recovery model, the optima and the simulation together.

One call gives what a user needs before a large run: the settings to use, the goodput each mechanism set
will get (closed form and simulated), and which of the user's settings cost far more than they should.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from nemo_resiliency_plugins.tools.planning.failures import FailureModel
from nemo_resiliency_plugins.tools.planning.mechanisms import megatron_bridge_defaults, recommended
from nemo_resiliency_plugins.tools.planning.optimum import (
    optimal_local_interval,
    optimal_persistent_interval,
    young_interval,
)
from nemo_resiliency_plugins.tools.planning.recovery import (
    MechanismSet,
    RunParams,
    fault_costs,
    goodput_closed_form,
    hang_detect_s,
)
from nemo_resiliency_plugins.tools.planning.simulate import MAX_EXPECTED_FAULTS, simulate

SWEEP_POINTS = 21  # save intervals per mechanism set for the plot and the simulated optimum
REPLICAS = 100  # simulated runs per interval; the standard error is printed with each figure
FAR_FACTOR = 3.0  # a setting whose cost is this many times the recommended one is flagged


@dataclass(frozen=True)
class SetResult:
    """One mechanism set's predicted goodput at the interval it is evaluated at, and its sweep."""

    mechanism: MechanismSet
    interval_s: float
    closed_form: float
    simulated: float
    simulated_stderr: float
    sweep_intervals_s: list[float]
    sweep_simulated: list[float]
    sweep_closed_form: list[float]

    def best(self) -> tuple[float, float]:
        i = int(np.argmax(self.sweep_simulated))
        return self.sweep_intervals_s[i], self.sweep_simulated[i]


@dataclass(frozen=True)
class Flag:
    setting: str
    yours: str
    recommended: str
    why: str


@dataclass
class PlanReport:
    params: RunParams
    failures: FailureModel
    faults_expected: dict[str, float]
    mtbf_s: float
    young_s: float
    daly_s: float
    simulated_best_s: float
    local_interval_s: float | None
    recommendation: dict[str, Any]
    sets: list[SetResult]
    flags: list[Flag]
    plugins_from: str
    stated_defaults: list[str]
    wall_s: float = 0.0
    seed: int = 0
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "params": dataclasses.asdict(self.params),
            "failure_model": {
                "name": self.failures.name,
                "per_gpu_hour": dict(self.failures.per_gpu_hour),
                "source": self.failures.source,
                "assumptions": list(self.failures.assumptions),
            },
            "faults_expected": self.faults_expected,
            "mtbf_s": self.mtbf_s,
            "save_interval": {
                "young_s": self.young_s,
                "daly_s": self.daly_s,
                "simulated_best_s": self.simulated_best_s,
                "local_s": self.local_interval_s,
            },
            "recommendation": self.recommendation,
            "sets": [
                {
                    "name": s.mechanism.name,
                    "interval_s": s.interval_s,
                    "goodput_closed_form": s.closed_form,
                    "goodput_simulated": s.simulated,
                    "goodput_simulated_stderr": s.simulated_stderr,
                    "best_interval_s": s.best()[0],
                    "best_goodput_simulated": s.best()[1],
                    "hang_detect_s": hang_detect_s(s.mechanism),
                    "notes": list(s.mechanism.notes),
                    "sweep": {
                        "interval_s": s.sweep_intervals_s,
                        "simulated": s.sweep_simulated,
                        "closed_form": s.sweep_closed_form,
                    },
                }
                for s in self.sets
            ],
            "flags": [dataclasses.asdict(f) for f in self.flags],
            "plugins_from": self.plugins_from,
            "stated_defaults": self.stated_defaults,
            "notes": self.notes,
            "seed": self.seed,
            "wall_s": self.wall_s,
        }


def plan(
    params: RunParams,
    failures: FailureModel,
    yours: MechanismSet,
    *,
    plugins_from: str = "slurm-pretraining",
    save_interval_s: float | None = None,
    replicas: int = REPLICAS,
    seed: int = 0,
    stated_defaults: list[str] | None = None,
) -> PlanReport:
    """Recommend settings for ``params`` and predict goodput for Megatron Bridge's defaults, ``yours`` (from
    ``mechanisms.from_plugins`` or ``our_defaults``) and the recommended set."""
    started = time.perf_counter()
    lam = failures.cluster_rates(params.gpus)
    total = sum(lam.values())
    mtbf = 1.0 / total if total > 0 else math.inf
    base_rec, _ = recommended(params, failures, 3600.0, None)
    local_s = optimal_local_interval(params, failures, base_rec)
    daly = optimal_persistent_interval(params, failures, base_rec)
    young = young_interval(max(params.blocking_save_s, 1e-3), mtbf) if total > 0 else math.inf
    rec, details = recommended(params, failures, daly, local_s)
    mb = megatron_bridge_defaults()
    given = save_interval_s if save_interval_s is not None else daly
    grid = np.unique(np.concatenate([np.geomspace(daly / 10.0, daly * 10.0, SWEEP_POINTS), [daly, given]]))
    sets = []
    horizon = params.wall_s
    for k, (mech, at) in enumerate(((mb, given), (yours, given), (rec, daly))):
        loc = local_s if mech.local_checkpoints else None
        sim = simulate(params, mech, failures, grid, local_s=loc, replicas=replicas, seed=seed + k)
        mean, err = sim.mean(), sim.stderr()
        horizon = min(horizon, sim.horizon_s)
        i = int(np.flatnonzero(grid == at)[0])
        sets.append(
            SetResult(
                mechanism=mech,
                interval_s=float(at),
                closed_form=goodput_closed_form(params, mech, failures, at, loc),
                simulated=float(mean[i]),
                simulated_stderr=float(err[i]),
                sweep_intervals_s=[float(x) for x in grid],
                sweep_simulated=[float(x) for x in mean],
                sweep_closed_form=[goodput_closed_form(params, mech, failures, float(x), loc) for x in grid],
            )
        )
    best = sets[2].best()[0]
    details["save_interval_s"] = daly
    details["local_save_interval_s"] = local_s
    report = PlanReport(
        params=params,
        failures=failures,
        faults_expected={c: r * params.wall_s for c, r in lam.items()},
        mtbf_s=mtbf,
        young_s=young,
        daly_s=daly,
        simulated_best_s=best,
        local_interval_s=local_s,
        recommendation=details,
        sets=sets,
        flags=flags(params, failures, yours, rec, details, save_interval_s, local_s),
        plugins_from=plugins_from,
        stated_defaults=list(stated_defaults or []),
        seed=seed,
    )
    if horizon < params.wall_s:
        report.notes.append(
            f"simulated the first {horizon / 86400:.3g} of {params.days:g} days ({MAX_EXPECTED_FAULTS:,.0f} "
            "expected faults per run): goodput is a rate"
        )
    report.notes.append(
        "Daly's interval counts only the faults redone from a persistent checkpoint (the others restart from a "
        "local one, or lose nothing)"
    )
    report.wall_s = time.perf_counter() - started
    return report


def flags(
    params: RunParams,
    failures: FailureModel,
    yours: MechanismSet,
    rec: MechanismSet,
    details: dict[str, Any],
    save_interval_s: float | None,
    local_s: float | None,
) -> list[Flag]:
    """The user's settings whose predicted cost is far (``FAR_FACTOR`` x) from the recommended one's."""
    out: list[Flag] = []
    lam = failures.cluster_rates(params.gpus)
    gpu_h = params.gpus / 3600.0
    soft = yours.inprocess_soft_timeout_s
    if soft is not None and soft <= params.save_time_s:
        out.append(
            Flag(
                "InProcessRestartPlugin.soft_timeout",
                f"{soft:g} s",
                f"more than the longest save, a process's first included (> {params.save_time_s:g} s here)",
                "NVRx's progress watchdog sees no progress while a save runs: every save is interrupted as a hang "
                "and the in-process restart loops from the last completed checkpoint, nothing is ever kept",
            )
        )
    checkpointing = yours.checkpointing_timeout_s
    if not yours.saves_complete and checkpointing is not None and checkpointing <= params.save_time_s:
        timeout = yours.checkpointing_timeout_s or 0.0
        out.append(
            Flag(
                "section_timeouts['checkpointing']",
                f"{timeout:g} s",
                f"{details['section_timeouts']['checkpointing']:g} s",
                f"not longer than one save ({params.save_time_s:g} s): every save is killed, nothing is ever kept",
            )
        )
    mine, best = hang_detect_s(yours), hang_detect_s(rec)
    if mine > FAR_FACTOR * best:
        hangs = (lam["hang"] + lam["node_loss"]) * params.wall_s
        what = "no step timeout (the NCCL watchdog)" if yours.step_timeout_s is None else f"{yours.step_timeout_s:g} s"
        out.append(
            Flag(
                "section_timeouts['step']",
                what,
                f"{details['section_timeouts']['step']:g} s",
                f"each hang costs {mine / params.step_time_s:,.0f} steps of the whole cluster "
                f"({mine * gpu_h:,.0f} GPU-hours) instead of {best / params.step_time_s:,.0f}; "
                f"{hangs:,.0f} hangs and lost nodes expected over the run",
            )
        )
    faults = details["expected_faults"]
    people = faults / yours.restart_pool
    if people > 1.0:
        out.append(
            Flag(
                "num_in_job_restarts x num_job_retries_on_failure",
                f"{yours.in_job_restarts} x {yours.job_retries} (a person every {yours.restart_pool} faults)",
                f"{rec.in_job_restarts} x {rec.job_retries}",
                f"{faults:,.0f} faults expected: the job fails for good {people:,.1f} times and waits for a person "
                f"({params.human_s:g} s each, assumed)",
            )
        )
    if not yours.preemption_handled and lam["preemption"] * params.wall_s >= 1.0:
        redo = _redo_wall(params, save_interval_s or details["save_interval_s"])
        n = lam["preemption"] * params.wall_s
        out.append(
            Flag(
                "PreemptionPlugin",
                "absent",
                "PreemptionPlugin (save on the scheduler's signal)",
                f"{n:,.0f} preemptions expected, each redoing {redo:,.0f} s of training ({redo * gpu_h:,.0f} "
                "GPU-hours) that a save on the signal keeps",
            )
        )
    if save_interval_s is not None and yours.saves_complete:
        at_yours = goodput_closed_form(
            params, yours, failures, save_interval_s, local_s if yours.local_checkpoints else None
        )
        at_best = goodput_closed_form(
            params, yours, failures, details["save_interval_s"], local_s if yours.local_checkpoints else None
        )
        ratio = max(save_interval_s / details["save_interval_s"], details["save_interval_s"] / save_interval_s)
        if ratio > FAR_FACTOR or at_best - at_yours > 0.01:
            out.append(
                Flag(
                    "checkpoint.save_interval",
                    f"every {save_interval_s:g} s of training",
                    f"every {details['save_interval_s']:,.0f} s",
                    f"goodput {at_yours:.3f} vs {at_best:.3f} at the recommended interval (closed form)",
                )
            )
    costs = fault_costs(params, yours)
    if not yours.sdc_check and lam["silent_corruption"] * params.wall_s >= 1.0:
        out.append(
            Flag(
                "RerunStateMachinePlugin",
                "absent",
                "rerun_mode='validate_results'",
                f"{lam['silent_corruption'] * params.wall_s:,.1f} silent corruptions expected, each found late "
                f"(assumed {costs['silent_corruption'].detect_s:g} s of training redone)",
            )
        )
    return out


def _redo_wall(params: RunParams, interval_s: float) -> float:
    return interval_s / 2.0 + params.save_lag_s
