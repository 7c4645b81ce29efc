"""``nemo-resiliency report``: what happened to a job that ran, read from the files it left in its job directory.

Why: after a real run the answers to "which faults, detected by what, how fast, what did each cost" are scattered
over NVRx's launcher log, the ranks' lines and, on Slurm, the requeue guard's lines in the batch log. The report
puts them in one table: one row per launcher cycle (an in-job restart starts a new cycle) of every Slurm attempt (a
requeue starts a new attempt).

The package, one concern a module: :mod:`.model` (attempt, cycle, fault, node: the data), :mod:`.files` (which
files, read safely), :mod:`.parse` (a launcher log's lines), :mod:`.stamps` (their clock), :mod:`.nodes` (Slurm's
batch log: which node), :mod:`.stacks` and :mod:`.flight` (diagnostics), :mod:`.printing` and :mod:`.timeline`
(output), :mod:`.plan` (the report against the saved plugins). Every line's pattern is in
:mod:`nemo_resiliency_plugins.job.log_lines`.
"""

from __future__ import annotations

from typing import Any

from nemo_resiliency_plugins.tools.report.files import report_experiment, report_job
from nemo_resiliency_plugins.tools.report.model import PEER_NOTE, SIGNAL_EXITED, AttemptReport, CycleRow, JobReport
from nemo_resiliency_plugins.tools.report.parse import LauncherVerdict, launcher_verdict, parse_attempt
from nemo_resiliency_plugins.tools.report.stamps import launcher_stamp

__all__ = [
    "PEER_NOTE",
    "SIGNAL_EXITED",
    "AttemptReport",
    "CycleRow",
    "JobReport",
    "LauncherVerdict",
    "launcher_stamp",
    "launcher_verdict",
    "parse_attempt",
    "print_reports",
    "report_experiment",
    "report_job",
]


def print_reports(console: Any, reports: list[JobReport]) -> None:
    """The tables ``nemo-resiliency report`` prints (rich console): :mod:`.printing`."""
    from nemo_resiliency_plugins.tools.report.printing import print_reports as _print

    _print(console, reports)
