"""``nemo-resiliency report``, side by side with ``plan``: each fault the job had, what plan's cost model
(:mod:`nemo_resiliency_plugins.tools.planning.recovery`) says such a fault costs with the job's own plugins and
measured time per iteration, and what it cost here.

Plan prices a fault in three parts: detection (half a check interval for a dead rank, the step section timeout plus
half a check interval for a hang, one step for a NaN the re-run check catches, the save for a handled SIGTERM), the
restart to training again (``--restart-time``, 300 s unless given, plus the checkpoint load; a requeue's wait on top
for a preemption) and the training redone (half a save interval; none after a handled SIGTERM).
The same three parts are measured from the logs here:

* detection: the cycle's last training_log line to the detection that ended it (the fault came after that line;
  the line's time has whole seconds, so this can be up to 1 s long);
* restart: the detection to the next cycle's first training_log line (new processes, imports, rendezvous, load);
* redone: the iterations the next cycle trained again (after the last checkpoint) x the measured time per iteration.

A cycle a node's loss ended (on Slurm, where the report names the node: lost, or gone silent) is plan's node loss:
detected like a hang, restarted by a spare node inside the job or by a requeue. A cycle ended by something plan
does not price (a straggler stop, a signal on Slurm) is left out; a part the logs do
not give is None. The plan side is computed by plan's own functions; nothing of its model is restated here.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nemo_resiliency_plugins.tools.report import SIGNAL_EXITED

if TYPE_CHECKING:
    from nemo_resiliency_plugins.tools.report import CycleRow, JobReport

#: Megatron Core's re-run state machine's exit codes (16: re-run to tell a transient fault from a persistent one,
#: 17: a result failed validation): the NaN check caught it
RERUN_EXIT_CODES = (16, 17)


@dataclasses.dataclass(kw_only=True)
class FaultVsPlan:
    attempt: int
    cycle: int
    fault_class: str  # plan's fault class
    detected_by: str
    detect_plan_s: float
    detect_measured_s: float | None
    restart_plan_s: float
    restart_measured_s: float | None
    redo_plan_s: float
    redo_measured_s: float | None


def fault_class(row: CycleRow, rerun_check: bool) -> str | None:
    """Plan's class of the fault that ended a cycle, or None when plan does not price it."""
    detected = row.detected_by or ""
    if row.node_fault:  # a node lost or gone silent (tools/report_nodes.py): whatever the launchers saw followed
        return "node_loss"
    if rerun_check and row.exit_code in RERUN_EXIT_CODES:
        return "silent_corruption"
    if detected == SIGNAL_EXITED:
        return "preemption"
    if detected.startswith(("rank killed", "rank exited")):
        return "dead_process"
    if "timeout" in detected:
        return "hang"
    return None


def _span(start: str | None, end: str | None) -> float | None:
    if not start or not end:
        return None
    return round((dt.datetime.fromisoformat(end) - dt.datetime.fromisoformat(start)).total_seconds(), 3)


def compare(job: JobReport, plugins: list[Any], *, restart_s: float | None = None) -> list[FaultVsPlan]:
    """One row per fault of the job that plan prices, with plan's figures for the job's plugins."""
    from nemo_resiliency_plugins.tools.planning.mechanisms import from_plugins
    from nemo_resiliency_plugins.tools.planning.recovery import DEFAULT_RESTART_S, RunParams, fault_costs, redo_s

    known = [row.iteration_ms for row in job.rows if row.iteration_ms is not None]
    if not known:
        return []
    step_s = sum(known) / len(known) / 1000.0
    interval = _save_interval(job)
    # Only the three parts are compared: no load time on plan's side (the measured restart includes it), a
    # synchronous save (its time then changes none of the three), one GPU (rates play no part in one fault's cost).
    params = RunParams(
        gpus=1,
        step_time_s=step_s,
        save_time_s=step_s,
        load_s=0.0,
        restart_s=DEFAULT_RESTART_S if restart_s is None else restart_s,
    )
    mech = from_plugins(plugins, params)
    costs = fault_costs(params, mech)
    rerun = any(type(p).__name__ == "RerunStateMachinePlugin" for p in plugins)
    rows: list[FaultVsPlan] = []
    for attempt in job.attempts:
        for row, later in zip(attempt.cycles, [*attempt.cycles[1:], None], strict=True):
            cls = fault_class(row, rerun)
            if cls is None:
                continue
            cost = costs[cls]
            redone = None
            if later is not None and row.last_iteration is not None:
                redone = round(max(0, row.last_iteration - (later.resumed_from_first or 0)) * step_s, 3)
            rows.append(
                FaultVsPlan(
                    attempt=row.attempt,
                    cycle=row.cycle,
                    fault_class=cls,
                    detected_by=row.detected_by or "",
                    detect_plan_s=round(cost.detect_s, 3),
                    detect_measured_s=_span(row.last_iteration_at, row.detected_at),
                    restart_plan_s=round(cost.restart_s, 3),
                    restart_measured_s=_span(row.detected_at, later.first_iteration_at) if later else None,
                    redo_plan_s=round(redo_s(params, cost.redo_from, interval * step_s, None), 3) if interval else 0.0,
                    redo_measured_s=redone,
                )
            )
    return rows


def _save_interval(job: JobReport) -> int | None:
    """Iterations between two saves, as the job saved them (the smallest gap between checkpoints of a cycle)."""
    gaps = [b - a for row in job.rows for a, b in zip(row.checkpoints, row.checkpoints[1:], strict=False) if b > a]
    return min(gaps) if gaps else None


def saved_plugins(job_dir: str | Path) -> list[Any] | None:
    """The plugins NeMo-Run saved with the job of ``job_dir`` (its experiment's ``_TASKS``, beside or above it), or
    None when there is no saved experiment to read them from.

    Read as data (:mod:`nemo_resiliency_plugins.tools.saved_plugins`): only this package's own plugin classes are
    rebuilt, from plain field values; nothing the directory names is imported or called (NeMo-Run's loader would
    build whatever its ``_CONFIG``/``_TASKS`` name)."""
    from nemo_resiliency_plugins.tools.saved_plugins import saved_jobs

    job_dir = Path(job_dir)
    exp_dir = next((d for d in (job_dir, job_dir.parent) if (d / "_CONFIG").is_file()), None)
    if exp_dir is None:
        return None
    jobs = saved_jobs(exp_dir)
    if not jobs:
        return None
    if len(jobs) == 1:
        return jobs[0].plugins
    for job in jobs:  # several jobs: the one whose directory this is
        if job.job_dir is not None and Path(job.job_dir).name == job_dir.name:
            return job.plugins
    return None


def print_vs_plan(console: Any, rows: list[FaultVsPlan] | None, *, restart_given: bool) -> None:
    """The side-by-side table under a job's report (nothing when the job had no fault plan prices)."""
    if rows is None:
        console.print("plan comparison: no saved experiment with the job's plugins beside its logs", markup=False)
        return
    if not rows:
        return
    from rich.markup import escape
    from rich.table import Table

    table = Table(title="each fault: plan's model (this job's plugins, its time per iteration) / measured here")
    for column in (
        "attempt",
        "cycle",
        "fault (plan's class)",
        "detection [s]",
        "restart to training [s]",
        "redone [s]",
    ):
        table.add_column(column)

    def pair(plan: float, measured: float | None) -> str:
        return f"{plan:g} / {'-' if measured is None else f'{measured:g}'}"

    for row in rows:
        table.add_row(
            str(row.attempt),
            str(row.cycle),
            escape(f"{row.fault_class}: {row.detected_by}"),
            pair(row.detect_plan_s, row.detect_measured_s),
            pair(row.restart_plan_s, row.restart_measured_s),
            pair(row.redo_plan_s, row.redo_measured_s),
        )
    console.print(table)
    measured = sorted(r.restart_measured_s for r in rows if r.restart_measured_s is not None)
    if measured and not restart_given:
        console.print(
            f"plan's restart is its stated default ({rows[0].restart_plan_s:g} s); this job's median was "
            f"{measured[len(measured) // 2]:g} s: pass `plan --restart-time` your own cluster's figure",
            markup=False,
            highlight=False,
        )


__all__ = ["FaultVsPlan", "compare", "fault_class", "print_vs_plan", "saved_plugins"]
