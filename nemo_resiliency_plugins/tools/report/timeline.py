"""``nemo-resiliency report --timeline``: the job's life as a PNG, one bar per launcher cycle of every attempt, on
the launchers' own clock, coloured by what the time went to (start-up, training, a fault's time until something
detected it, the restart). It draws what :mod:`nemo_resiliency_plugins.tools.report` read, nothing else: a phase
whose ends the logs do not give is left out rather than guessed.
"""

from __future__ import annotations

import datetime as dt
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nemo_resiliency_plugins.tools.report.model import AttemptReport, CycleRow, JobReport

#: phase -> colour, in the order a cycle goes through them
PHASES = {
    "start-up": "lightgray",  # the cycle's workers started (or the attempt's first line) -> first training_log line
    "training": "tab:blue",  # first -> last training_log line of the cycle
    "until detected": "tab:red",  # last training_log line -> the detection that ended the cycle
    "restart": "tab:orange",  # detection -> the next cycle's workers started
    "after training": "gainsboro",  # last training_log line -> the attempt's last line (a cycle nothing ended)
    "running (no training_log lines)": "tab:cyan",  # start -> detection or the attempt's last line
}


def _at(text: str | None) -> dt.datetime | None:
    return dt.datetime.fromisoformat(text) if text else None


def cycle_phases(attempt: AttemptReport, index: int) -> list[tuple[str, dt.datetime, dt.datetime]]:
    """(phase, start, end) of the ``index``-th cycle of ``attempt``, in the log's local time; only the phases both
    of whose ends the logs give."""
    row: CycleRow = attempt.cycles[index]
    later = attempt.cycles[index + 1] if index + 1 < len(attempt.cycles) else None
    previous = attempt.cycles[index - 1] if index > 0 else None
    start = _at(row.started) or (_at(previous.detected_at) if previous else _at(attempt.first))
    first, last = _at(row.first_iteration_at), _at(row.last_iteration_at)
    detected = _at(row.detected_at)
    end = detected or (_at(attempt.last) if later is None else None)
    if first is None:  # no training_log line in the cycle: one bar for all of it
        edges: list[tuple[str, dt.datetime | None, dt.datetime | None]] = [
            ("running (no training_log lines)", start, end)
        ]
    else:
        edges = [("start-up", start, first), ("training", first, last)]
        edges.append(("until detected", last, detected) if detected else ("after training", last, end))
    if detected is not None:
        edges.append(("restart", detected, _at(later.started) if later else None))
    return [(name, a, b) for name, a, b in edges if a is not None and b is not None and b > a]


def write_report_timeline(reports: list[JobReport], path: str | os.PathLike) -> str:
    """A PNG: one panel per job, one bar per cycle (attempt by attempt, time queued between Slurm attempts shown as
    the gap it was), seconds since the job's first log line. Needs matplotlib (``cli`` checks it first)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    rows_per_job = [len(job.rows) for job in reports]
    fig, axes = plt.subplots(
        len(reports), 1, figsize=(11, sum(0.55 * n + 1.6 for n in rows_per_job)), squeeze=False, dpi=110
    )
    for ax, job in zip(axes[:, 0], reports, strict=True):
        origin = min((t for a in job.attempts if (t := _at(a.first)) is not None), default=None)
        labels: list[str] = []
        end_s = 1.0
        for attempt in job.attempts:
            for index, row in enumerate(attempt.cycles):
                y = len(labels)
                labels.append(f"attempt {row.attempt} cycle {row.cycle}")
                if origin is None:
                    continue
                for name, a, b in cycle_phases(attempt, index):
                    start_s, width = (a - origin).total_seconds(), (b - a).total_seconds()
                    ax.broken_barh([(start_s, width)], (y - 0.3, 0.6), color=PHASES[name])
                    end_s = max(end_s, start_s + width)
                ended = row.detected_by or ("finished" if row.finished else "")
                if row.injected:
                    ended = f"{'; '.join(row.injected)} -> {ended or 'not detected'}"
                phases = cycle_phases(attempt, index)
                x = (phases[-1][2] - origin).total_seconds() if phases else 0.0
                ax.text(x + 0.5, y, ended, va="center", fontsize=7, parse_math=False)
        ax.set_yticks(range(len(labels)), labels)
        for tick in ax.get_yticklabels():
            tick.set_parse_math(False)
        ax.invert_yaxis()
        ax.set_xlim(0, end_s * 1.45 + 1)
        ax.set_xlabel("seconds since the job's first log line (launcher clock)")
        goodput = job.goodput()
        measured = "goodput not measured" if goodput is None else f"goodput {goodput:.1%}"
        # Literal text: a folder named "$x$" is not math (matplotlib's mathtext would fail on "$...$" it cannot read).
        ax.set_title(f"{os.path.basename(job.job_dir)}: {measured}", fontsize=9, parse_math=False)
    handles = [Patch(color=color, label=name) for name, color in PHASES.items()]
    fig.legend(handles=handles, fontsize=7, loc="lower center", ncol=len(PHASES))
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    fig.savefig(path)
    plt.close(fig)
    return str(path)


__all__ = ["PHASES", "cycle_phases", "write_report_timeline"]
