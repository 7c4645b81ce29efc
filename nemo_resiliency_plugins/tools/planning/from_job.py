"""``plan --from EXPERIMENT_DIR``: the next run's settings from a finished job's own figures.

Why: the settings that maximise goodput depend on the step time, the save cost and the restart time, which a user
rarely knows before a run and which ``report`` measures after one. This module feeds :mod:`.measured`'s figures to
``plan`` itself (:func:`~nemo_resiliency_plugins.tools.planning.plan.plan`; nothing of its model is restated), turns
its recommendation into a recipe override to paste, and checks the model against the job: the goodput plan's fault
costs give for the job's own fault sequence, beside the one ``report`` measured.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from nemo_resiliency_plugins.tools.planning.failures import FailureModel
from nemo_resiliency_plugins.tools.planning.measured import Measured, phase_lines
from nemo_resiliency_plugins.tools.planning.plan import PlanReport, plan
from nemo_resiliency_plugins.tools.planning.recovery import RunParams

#: Megatron Bridge's training_log and setup lines carry whole seconds: each boundary read from one is good to 1 s
STAMP_RESOLUTION_S = 1.0


@dataclasses.dataclass(kw_only=True)
class JobPrediction:
    """Plan's account of the job that ran: its own faults, each costed by plan's model, and the measured rest."""

    goodput: float
    margin: float  # what the whole-second stamps allow the two figures to differ by
    wall_s: float
    parts: dict[str, float]


def predict_job(m: Measured) -> JobPrediction:
    """The goodput plan's model gives the job's own run: the iterations between each cycle's training_log lines at
    the measured step time, one measured save cost per save, each fault's detection as plan prices it for the job's
    plugins (half a check interval for a dead rank, the step timeout plus half a check interval for a hang:
    report's comparison rows), each restart as measured (to the next cycle's first line), and each attempt's
    start-up and end as measured. Nothing is taken as "the rest of the wall": an error in the step, save or
    detection model shows. The margin: every boundary read from a training_log line is a whole-second stamp (two
    per cycle), and the first iteration of a cycle may be slower than the median step."""
    faults = len(m.vs_plan)
    parts = {
        "start-up (measured)": m.startup_s,
        "training (iterations between lines x step)": m.steps_between_lines * m.step_time_s,
        "saves (count x save cost)": m.saves * m.save_s,
        "detection (plan's model)": sum(_detect_s(m, i) for i in range(faults)),
        "restart to training (measured)": sum(r.restart_measured_s or 0.0 for r in m.vs_plan),
        "end (measured)": m.tail_s,
    }
    wall = sum(parts.values())
    goodput = m.kept * m.productive_step_s / wall  # what report counts as productive, over plan's wall
    margin = goodput * ((2 * faults + 2) * STAMP_RESOLUTION_S) / wall + 5e-5
    return JobPrediction(goodput=round(goodput, 4), margin=round(margin, 4), wall_s=wall, parts=parts)


def _detect_s(m: Measured, index: int) -> float:
    """Plan's detection of the job's fault ``index`` by what detected it, each priced by plan's own functions for
    the job's plugins: a section timeout at the timeout NVRx applied when it fired (plan's ``hang_detect_s``; plan
    assumes calc_ft_timeouts' computed one, which NVRx applies only once it has seen enough steps), a rank's exit as
    plan's dead rank (half a check interval: ``fault_costs``), else report's comparison row. Plan's node-loss class
    assumes the survivors hang; a lost node whose srun step ended is seen by that exit."""
    from nemo_resiliency_plugins.tools.planning.mechanisms import from_plugins
    from nemo_resiliency_plugins.tools.planning.recovery import fault_costs, hang_detect_s

    row, fired = m.vs_plan[index], m.fired_timeouts[index]
    params = RunParams(gpus=1, step_time_s=m.step_time_s, save_time_s=m.save_s)
    mech = from_plugins(m.plugins, params)
    if fired is not None:
        return hang_detect_s(dataclasses.replace(mech, step_timeout_s=fired))
    if row.detected_by.startswith(("rank killed", "rank exited")):
        return fault_costs(params, mech)["dead_process"].detect_s
    return row.detect_plan_s


def next_run(
    m: Measured,
    *,
    gpus: int,
    days: float,
    failures: FailureModel,
    seed: int = 0,
    local_save_time_s: float | None = None,
) -> PlanReport:
    """``plan`` for the next run at ``gpus``, with the job's step time, save cost and restart (the load included:
    the measured restart ends at the first training_log line after the load) and its plugins as "yours"."""
    from nemo_resiliency_plugins.tools.planning.mechanisms import from_plugins

    params = RunParams(
        gpus=gpus,
        step_time_s=m.step_time_s,
        save_time_s=m.save_s,
        days=days,
        restart_s=m.restart_s,
        load_s=0.0,
        local_save_time_s=local_save_time_s,
    )
    yours = from_plugins(m.plugins, params)
    stated = [
        f"measured in {m.job_dir}: step {m.step_time_s:.4g} s (median), save {m.save_s:.4g} s (the step after a "
        f"save, less a step), restart to training {m.restart_s:.4g} s (median of {len(m.vs_plan)}), load included",
    ]
    if local_save_time_s is not None:
        stated.append(f"local save {local_save_time_s:g} s (given, not measured)")
    return plan(
        params,
        failures,
        yours,
        plugins_from=f"the job's saved plugins ({m.job_dir})",
        seed=seed,
        stated_defaults=stated,
    )


def recipe_override(report: PlanReport, recipe: str = "slurm-pretraining") -> tuple[str, dict[str, Any]]:
    """The recommended settings as a ``get_recipe`` call to paste, and the task override for the save interval
    (``checkpoint.save_interval`` is Megatron Bridge's, in iterations; no plugin owns it)."""
    rec = report.recommendation
    timeouts = rec["section_timeouts"]
    ft: dict[str, Any] = {
        "calc_ft_timeouts": False,  # the timeouts below come from this job's measured times
        "section_timeouts": {k: _round(timeouts[k]) for k in ("setup", "step", "checkpointing")},
        "out_of_section_timeout": _round(timeouts["out_of_section"]),
        "workload_check_interval": _round(rec["workload_check_interval"]),
        "num_in_job_restarts": rec["num_in_job_restarts"],
        "num_job_retries_on_failure": rec["num_job_retries_on_failure"],
    }
    if rec["warm_reserve"]["pays_off"]:
        ft["spare_nodes"] = rec["warm_reserve"]["nodes"]
    overrides: dict[str, Any] = {"FaultTolerancePlugin": ft, "PreemptionPlugin": {"preempt_time": rec["preempt_time"]}}
    step = report.params.step_time_s
    config_overrides = {"checkpoint.save_interval": max(1, round(rec["save_interval_s"] / step))}
    if rec.get("local_save_interval_s"):
        config_overrides["non_persistent_save_interval"] = max(1, round(rec["local_save_interval_s"] / step))
    args = ", ".join(f"{name}={value!r}" for name, value in overrides.items())
    return f"get_recipe({recipe!r}, {args})", {"overrides": overrides, "task": config_overrides}


def _round(value: float) -> float:
    """Three significant figures, never rounded below the computed value (a timeout must not shrink)."""
    if value <= 0:
        return value
    digits = 3 - int(math.floor(math.log10(value))) - 1
    scale = 10.0**digits
    return math.ceil(value * scale) / scale


def measured_lines(m: Measured, job: JobPrediction) -> list[str]:
    """What ``plan --from`` read from the job, and plan's account of the job beside report's measured goodput."""
    faults = ", ".join(f"{c.replace('_', ' ')} {n}" for c, n in m.faults.items())
    lines = [
        f"job: {m.job_dir}",
        f"measured: step {m.step_time_s:.4g} s, save {m.save_s:.4g} s ({m.saves} saves), restart to training "
        f"{m.restart_s:.4g} s (median), faults: {faults}",
        "measured detection: "
        + ", ".join(f"{c.replace('_', ' ')} {'-' if d is None else f'{d:g} s'}" for c, d in m.detections),
        f"goodput of this job: measured {m.goodput:.4f} (report), plan's model for its own faults {job.goodput:.4f} "
        f"(+/- {job.margin:.4f}: whole-second log stamps)",
    ]
    return lines + phase_lines(m.restarts)


def print_from_job(console: Any, m: Measured, job: JobPrediction, report: PlanReport) -> None:
    """The text form of ``plan --from``: the job's figures, plan's report for the next run, the override to paste."""
    from nemo_resiliency_plugins.tools.planning.report import print_report

    for line in measured_lines(m, job):
        console.print(line, markup=False, highlight=False)
    print_report(console, report, None)
    call, extra = recipe_override(report)
    console.print("[bold]paste into the experiment script[/bold]")
    console.print(f"  plugins = {call}", markup=False, highlight=False)
    task = " ".join(f"{k}={v}" for k, v in extra["task"].items())
    console.print(f"  task overrides (Megatron Bridge's, iterations): {task}", markup=False, highlight=False)
    if report.recommendation.get("expected_faults", 0) > 0:
        console.print(
            "  and RerunStateMachinePlugin(rerun_mode='validate_results') among the plugins (the recommended set "
            "checks for silent corruption)",
            markup=False,
            highlight=False,
        )
    console.print(
        f"next run, recommended set: {report.sets[2].simulated:.4f} simulated ({report.sets[2].closed_form:.4f} "
        f"closed form); this job measured {m.goodput:.4f} at its own size",
        markup=False,
        highlight=False,
    )


def to_json(m: Measured, job: JobPrediction, report: PlanReport) -> dict[str, Any]:
    call, extra = recipe_override(report)
    return {
        "measured": {
            "job_dir": m.job_dir,
            "step_time_s": m.step_time_s,
            "save_s": m.save_s,
            "saves": m.saves,
            "restart_s": m.restart_s,
            "faults": m.faults,
            "detections": m.detections,
            "goodput": m.goodput,
            "restarts": [dataclasses.asdict(r) for r in m.restarts],
        },
        "job_prediction": dataclasses.asdict(job),
        "plan": report.to_json(),
        "recipe_call": call,
        "recipe_overrides": extra["overrides"],
        "task_overrides": extra["task"],
    }


__all__ = ["JobPrediction", "measured_lines", "next_run", "predict_job", "print_from_job", "recipe_override", "to_json"]
