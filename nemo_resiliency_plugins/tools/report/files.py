"""Which files of a job directory the report reads, and reading them safely.

What it reads, and from where (nothing else, no server, no code from the directory):

* the attempts' launcher logs: NeMo-Run's Slurm ``log-<job>_<SLURM_RESTART_COUNT>.out`` (one per attempt), a
  LocalExecutor job's ``combined.log``, a DockerExecutor job's ``log_<container>.out``;
* the requeue guard's own lines (``nemo-resiliency-plugins: ...``) in the Slurm batch log ``sbatch_*.out``;
* with ``FaultTolerancePlugin(diagnostics=True)``: the ranks' stack dumps in those logs (:mod:`.stacks`) and
  PyTorch's flight-recorder dumps in the job directory (:mod:`.flight`).

A directory may be anyone's (a colleague's job, a bug report): only regular files are opened (``os.stat`` first:
opening a FIFO named like a log would block for ever, a directory would fail), and anything else named like a log
is one line in the report's ``skipped``.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

from nemo_resiliency_plugins.job import log_lines as ll
from nemo_resiliency_plugins.tools.report.flight import flight_report
from nemo_resiliency_plugins.tools.report.model import JobReport
from nemo_resiliency_plugins.tools.report.nodes import place_all
from nemo_resiliency_plugins.tools.report.parse import parse_attempt

__all__ = ["is_regular", "read_text", "report_experiment", "report_job"]

_SLURM_LOG = re.compile(r"log-.*_(\d{1,9})\.out")  # fullmatch: NeMo-Run's file name for one Slurm attempt's log

_ALLOWED = (
    "an experiment directory NeMo-Run saved for a job that ran ($NEMORUN_HOME/experiments/<title>/<id>, with a "
    "_CONFIG file), or one Slurm or Docker job's folder in it"
)


def _not_a_job(path: Path, detail: str) -> Exception:
    """The one error every bad directory gets: what was given, what is allowed, what was wrong with it."""
    from nemo_resiliency_plugins.errors import ResiliencyConfigError

    return ResiliencyConfigError("nemo-resiliency report", "EXPERIMENT_DIR", str(path), _ALLOWED, detail=detail)


def is_regular(path: Path) -> bool:
    """Whether ``path`` is a regular file (following a link), checked without opening it."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except (OSError, ValueError):
        return False


def _kind(path: Path) -> str:
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError) as exc:
        return f"unreadable ({type(exc).__name__})"
    return "a directory" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else "not a regular file"


def read_text(path: Path, skipped: list[str]) -> str | None:
    """A regular file's text (bad bytes replaced), opened non-blocking; None, with one line in ``skipped``, for
    anything else."""
    if not is_regular(path):
        skipped.append(f"{path.name}: skipped, {_kind(path)} (only regular files are read)")
        return None
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        with os.fdopen(fd, "rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):  # replaced between the two looks
                skipped.append(f"{path.name}: skipped, not a regular file")
                return None
            return handle.read().decode(errors="replace")
    except OSError as exc:
        skipped.append(f"{path.name}: skipped, unreadable ({exc.strerror or type(exc).__name__})")
        return None


def _attempt_logs(job_dir: Path) -> list[tuple[int, Path]]:
    slurm = [(int(m.group(1)), p) for p in job_dir.glob("log-*.out") if (m := _SLURM_LOG.fullmatch(p.name))]
    if slurm:
        return sorted(slurm)
    local = sorted(job_dir.glob("**/combined.log"))
    docker = sorted(job_dir.glob("log_*.out"))
    return [(0, p) for p in (local or docker)[:1]]


def report_job(job_dir: str | Path) -> JobReport:
    """The report of one job directory (a task's folder in a saved experiment)."""
    job_dir = Path(job_dir)
    logs = _attempt_logs(job_dir)
    if not logs:
        raise _not_a_job(job_dir, "no launcher log in it (log-*_N.out, combined.log or log_*.out)")
    skipped: list[str] = []
    texts: dict[str, str] = {}
    attempts = []
    for attempt, path in logs:
        if (text := read_text(path, skipped)) is not None:
            texts[str(path)] = text
            attempts.append(parse_attempt(text, attempt, str(path)))
    batches = [text for p in sorted(job_dir.glob("sbatch_*.out")) if (text := read_text(p, skipped)) is not None]
    if batches:
        place_all(attempts, "\n".join(batches), texts, skipped)
    guard = [m.group(1) for text in batches for line in text.splitlines() if (m := ll.GUARD.fullmatch(line))]
    flight = flight_report(job_dir)
    return JobReport(
        job_dir=str(job_dir),
        attempts=attempts,
        guard=guard,
        flight=flight.lines() if flight else [],
        flight_behind=flight.behind if flight else [],
        skipped=skipped,
    )


def report_experiment(exp_dir: str | Path) -> list[JobReport]:
    """One report per job of a saved NeMo-Run experiment (or of ``exp_dir`` itself when it is a job's folder)."""
    exp_dir = Path(exp_dir)
    if not exp_dir.is_dir():
        raise _not_a_job(exp_dir, "no such directory")
    if _attempt_logs_here(exp_dir):
        return [report_job(exp_dir)]
    if not (exp_dir / "_CONFIG").exists():  # what NeMo-Run writes into every experiment it saves
        raise _not_a_job(exp_dir, "this directory is not one (no _CONFIG, no job log)")
    jobs = [report_job(d) for d in sorted(p for p in exp_dir.iterdir() if p.is_dir()) if _attempt_logs(d)]
    if not jobs:
        raise _not_a_job(exp_dir, "no job of this experiment left a launcher log: did it run?")
    return jobs


def _attempt_logs_here(path: Path) -> bool:
    return any(_SLURM_LOG.fullmatch(p.name) for p in path.glob("log-*.out")) or any(path.glob("log_*.out"))
