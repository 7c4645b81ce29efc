"""``nemo-resiliency report``'s tables and lines on a rich console (the parsing is in :mod:`.report`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nemo_resiliency_plugins.tools.report.model import JobReport

__all__ = ["print_reports"]


def print_reports(console: Any, reports: list[JobReport]) -> None:
    """The tables ``nemo-resiliency report`` prints (rich console)."""
    from rich.markup import escape
    from rich.table import Table

    for job in reports:
        table = Table(title=f"nemo-resiliency report: {job.job_dir}")
        columns = ["attempt", "cycle", "resumed from", "checkpoints", "ended by", "on rank", "restart [s]"]
        on_nodes = any(row.node for row in job.rows)  # a Slurm job's (tools/report/nodes.py)
        if on_nodes:
            columns.insert(6, "node")
        for column in columns:
            table.add_column(column)
        for row in job.rows:
            ended = row.detected_by or ("finished" if row.finished else "-")
            if row.node_fault:  # the node failed (the node column names it): what the launchers saw followed from it
                seen = f"; launchers saw: {ended}" if row.detected_by else ""
                ended = f"node {row.node_fault.split(' (')[0]}{seen}"
            if row.inprocess_restarts:
                ended += f" (after {row.inprocess_restarts} in-process restart(s))"
            cells = [
                str(row.attempt),
                str(row.cycle),
                "-" if row.resumed_from is None else str(row.resumed_from),
                ", ".join(map(str, row.checkpoints)) or "-",
                escape(ended),
                "-" if row.detected_on_rank is None else str(row.detected_on_rank),
                "-" if row.restart_s is None else f"{row.restart_s:.1f}",
            ]
            if on_nodes:
                cells.insert(6, escape(row.node or "-"))
            table.add_row(*cells)
        console.print(table)
        for row in job.rows:
            if row.stragglers:
                console.print(
                    f"attempt {row.attempt} cycle {row.cycle}: stragglers reported: {', '.join(row.stragglers)}",
                    markup=False,
                    highlight=False,
                )
            if row.stacks:
                blamed = (
                    f"; not in a collective (the ones the others waited for): {', '.join(row.outside_collective)}"
                    if row.outside_collective and len(row.outside_collective) < len(row.stacks)
                    else ""
                )
                console.print(
                    f"attempt {row.attempt} cycle {row.cycle}: where the stopped ranks were: "
                    f"{'; '.join(row.stacks)}{blamed}",
                    markup=False,
                    highlight=False,
                )
        counts, goodput = job.iterations(), job.goodput()
        if goodput is None:
            measured = (
                "goodput: not measured (no launcher time stamps in the logs)"
                if counts is not None
                else "goodput: not measured (no Megatron Bridge training_log lines in the logs)"
            )
        else:
            measured = (
                f"goodput {goodput:.1%} (iterations kept {counts[0]}, recomputed after faults at least {counts[1]}; "
                "the rest of the wall time went to start-up, detection, restarts and saves)"
            )
        wall = "launcher wall not measured" if job.wall_s is None else f"launcher wall {job.wall_s:.0f} s"
        console.print(
            f"attempts {len(job.attempts)} (requeues {job.requeues}), in-job restarts {job.restarts}, "
            f"{wall}, {'finished' if job.finished else 'did not finish'}; {measured}",
            markup=False,
        )
        for line in job.guard:
            console.print(f"requeue guard: {line}", markup=False, highlight=False)
        for line in job.flight:
            console.print(f"flight recorder: {line}", markup=False, highlight=False)
        for line in job.skipped + [line for attempt in job.attempts for line in attempt.skipped]:
            console.print(f"skipped: {line}", markup=False, highlight=False)
