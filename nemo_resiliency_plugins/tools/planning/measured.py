"""What a finished job measured, in the figures ``plan`` needs: step time, save cost, restart to training (and its
phases), detection, the faults by plan's class, and the goodput ``report`` measured.

Why: ``plan`` predicts goodput from numbers a user types; ``report`` measures a job that ran. ``plan --from`` takes
this module's :class:`Measured` of a job as plan's inputs, so the next run's settings come from the job's own
figures. Everything here is read through ``report``'s model (:func:`report_experiment`, :class:`JobReport` and its
rows, their training_log times included) and ``report``'s comparison with plan's cost model (:func:`compare`); the
one kind of line report does not read yet is Megatron Bridge's setup lines (:func:`_setup_marks`, for the restart's
phases). A figure the logs do not give is refused (:class:`ResiliencyConfigError`, one line), never assumed.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
import statistics
from pathlib import Path
from typing import Any

from nemo_resiliency_plugins.errors import ResiliencyConfigError
from nemo_resiliency_plugins.job import log_lines as ll
from nemo_resiliency_plugins.tools.report import JobReport, report_experiment
from nemo_resiliency_plugins.tools.report.files import read_text

# The lines read here are job/log_lines.py's (Megatron Bridge's setup lines, torch's cycle line); this one reads
# report's own wording of a section timeout's detection (CycleRow.detected_by), not a log line.
FIRED_TIMEOUT = re.compile(r"timeout \(open [0-9.]+ s, timeout ([0-9.]+) s\)")

_OWNER = "nemo-resiliency plan --from"
#: The phases of a restart, in order: each ends where the next begins (report's cycle times and the lines above)
PHASES = ("launcher", "imports", "process group", "model build", "checkpoint load", "first step")
_SETUP_PHASE = {
    "after megatron is initialized": "process group",
    "after model, optimizer, and learning rate scheduler are built": "model build",
    "after dataloaders are built": "checkpoint load",
}


@dataclasses.dataclass(kw_only=True)
class RestartPhases:
    """One restart, from the detection to the next cycle's first training_log line, in seconds per phase.

    ``launcher``: the detection to the new workers' start (stopping the old ones, NVRx's GPU memory wait,
    rendezvous, spawn); ``imports``: to Megatron Bridge's GlobalState (the start of "time to initialize megatron");
    ``process group``: to "after megatron is initialized"; ``model build``: to the model/optimizer line;
    ``checkpoint load``: to "after dataloaders are built"; ``first step``: to the first training_log line (as many
    iterations as logger.log_interval). A phase whose lines the log lacks is None and the next one starts from the
    last known boundary. Stamps of whole seconds make each phase good to about 1 s."""

    attempt: int
    cycle: int  # the cycle the fault ended (the restart began cycle + 1)
    span_s: float
    phases: dict[str, float | None]

    def known_sum(self) -> float:
        return sum(v for v in self.phases.values() if v is not None)


@dataclasses.dataclass(kw_only=True)
class Measured:
    """The figures of one job plan needs, each from its logs."""

    job_dir: str
    step_time_s: float
    save_s: float
    restart_s: float  # median over the job's restarts: detection to the next cycle's first training_log line
    faults: dict[str, int]  # plan's fault class -> how many the job had
    detections: list[tuple[str, float | None]]  # (class, measured detection s), in order
    # per fault, in order: the section timeout NVRx logged when it fired (None: not a section timeout)
    fired_timeouts: list[float | None]
    restarts: list[RestartPhases]
    goodput: float
    plugins: list[Any]
    vs_plan: list[Any]  # report's FaultVsPlan rows
    kept: int
    productive_step_s: float  # report's time per kept iteration (its goodput's): the mean of the cycles' means
    recomputed: int
    saves: int
    wall_s: float
    startup_s: float  # each attempt: its first launcher line to its first training_log line
    tail_s: float  # each attempt: its last training_log line to its last launcher line (final save, shutdown)
    steps_between_lines: int  # per cycle, its training_log lines less one, summed (the iterations between them)
    notes: list[str] = dataclasses.field(default_factory=list)


def _fired_timeout(detected_by: str) -> float | None:
    """The timeout in report's wording of a section timeout ("section 'step' timeout (open 5.15 s, timeout 5 s)")."""
    m = FIRED_TIMEOUT.search(detected_by)
    return float(m.group(1)) if m else None


def _refuse(job_dir: str, what: str) -> ResiliencyConfigError:
    return ResiliencyConfigError(
        _OWNER,
        "EXPERIMENT_DIR",
        job_dir,
        "a finished job whose logs give its step time, save cost, restart time and faults (training_log lines with "
        "logger.log_interval=1, at least one checkpoint save, one restart, and the saved experiment's plugins)",
        detail=f"its logs lack {what}",
    )


def _when(stamp: str | None) -> dt.datetime | None:
    return dt.datetime.fromisoformat(stamp) if stamp else None


def _iteration_times(job: JobReport) -> list[tuple[int, int, float]]:
    """(cycle index over the job, iteration, ms) of every training_log line, in log order: report's model
    (:attr:`CycleRow.iteration_times`)."""
    return [
        (index * 10_000 + row.cycle, iteration, ms)
        for index, attempt in enumerate(job.attempts)
        for row in attempt.cycles
        for iteration, ms in row.iteration_times
    ]


def steps_between_lines(job: JobReport) -> int:
    """Per cycle, its training_log lines less one, summed: the iterations trained between a cycle's first and last
    line (the first is inside the start-up or the restart that led to it)."""
    per_cycle: dict[int, int] = {}
    for key, _iteration, _ms in _iteration_times(job):
        per_cycle[key] = per_cycle.get(key, 0) + 1
    return sum(n - 1 for n in per_cycle.values())


def _ends(job: JobReport) -> tuple[float, float]:
    """(start-up, tail) summed over the attempts: first launcher line -> first training_log line, last training_log
    line -> last launcher line."""
    startup = tail = 0.0
    for attempt in job.attempts:
        first, last = _when(attempt.first), _when(attempt.last)
        lines = [row for row in attempt.cycles if row.first_iteration_at]
        if first and last and lines:
            startup += (_when(lines[0].first_iteration_at) - first).total_seconds()  # type: ignore[operator]
            tail += (last - _when(lines[-1].last_iteration_at)).total_seconds()  # type: ignore[operator]
    return max(0.0, startup), max(0.0, tail)


def step_and_save(job: JobReport) -> tuple[float, float, int]:
    """(step s, save s, saves seen): the median iteration that neither follows a save nor starts a cycle, and the
    median extra time of the iteration that follows a save (Megatron Bridge's training_log times the interval since
    the last line, so a save made after iteration N lands in N + 1's time)."""
    saved = {(row.attempt, row.cycle, step) for row in job.rows for step in row.checkpoints}
    times = _iteration_times(job)
    plain, after_save = [], []
    previous: tuple[int, int] | None = None
    for key, iteration, ms in times:
        attempt, cycle = divmod(key, 10_000)
        first_of_cycle = previous is None or previous[0] != key
        if first_of_cycle:
            pass
        elif (job.attempts[attempt].attempt, cycle, iteration - 1) in saved:
            after_save.append(ms)
        elif previous is not None and iteration == previous[1] + 1:
            plain.append(ms)
        previous = (key, iteration)
    if not plain:
        raise _refuse(job.job_dir, "training_log lines of consecutive iterations (logger.log_interval=1)")
    step_ms = statistics.median(plain)
    if not after_save:
        raise _refuse(job.job_dir, "a training_log line after a checkpoint save (no save was followed by a step)")
    save_ms = statistics.median(after_save) - step_ms
    if save_ms <= 0:
        raise _refuse(job.job_dir, "a measurable save cost (the steps after saves were no slower than the others)")
    return step_ms / 1e3, save_ms / 1e3, len(after_save)


def restart_phases(job: JobReport) -> list[RestartPhases]:
    """Each restart of the job broken into :data:`PHASES` (see :class:`RestartPhases`)."""
    out: list[RestartPhases] = []
    for attempt in job.attempts:
        marks = _setup_marks(Path(attempt.log))
        for row, later in zip(attempt.cycles, attempt.cycles[1:], strict=False):
            detected, started, first = _when(row.detected_at), _when(later.started), _when(later.first_iteration_at)
            if detected is None or first is None:
                continue
            bounds: list[tuple[str, dt.datetime | None]] = [("launcher", started)]
            mine = marks.get(later.cycle, {})
            bounds.append(("imports", mine.get("imports")))
            bounds += [(name, mine.get(name)) for name in ("process group", "model build", "checkpoint load")]
            bounds.append(("first step", first))
            phases: dict[str, float | None] = {}
            last = detected
            for name, when in bounds:
                if when is None:
                    phases[name] = None
                    continue
                when = max(when, last)  # a whole-second stamp inside the second the previous boundary is in
                phases[name] = round((when - last).total_seconds(), 3)
                last = when
            out.append(
                RestartPhases(
                    attempt=row.attempt,
                    cycle=row.cycle,
                    span_s=round((first - detected).total_seconds(), 3),
                    phases=phases,
                )
            )
    return out


def phase_lines(restarts: list[RestartPhases]) -> list[str]:
    """One line per restart: its span and each phase ("-" where the log has no line for it)."""
    out = []
    for r in restarts:
        parts = ", ".join(f"{k} {'-' if v is None else f'{v:g} s'}" for k, v in r.phases.items())
        out.append(f"restart after cycle {r.cycle} (attempt {r.attempt}), {r.span_s:g} s: {parts}")
    return out


def _setup_marks(log: Path) -> dict[int, dict[str, dt.datetime]]:
    """Per cycle: when each setup line of its first rank was stamped, and the imports' end (the process-group line's
    stamp less "time to initialize megatron")."""
    marks: dict[int, dict[str, dt.datetime]] = {}
    init_s: dict[int, float] = {}
    cycle = 0
    for line in (read_text(log, []) or "").splitlines():
        if ll.is_launcher_line(line) and (m := ll.TORCH_RESTART.search(line)):
            cycle = max(cycle, int(m.group(1)))
        elif m := ll.MB_INIT_SECONDS.search(line):
            init_s.setdefault(cycle, float(m.group(1)))
        elif m := ll.MB_SETUP_STAMP.search(line):
            phase = _SETUP_PHASE[m.group(1)]
            marks.setdefault(cycle, {}).setdefault(phase, dt.datetime.strptime(m.group(2), "%Y-%m-%d %H:%M:%S"))
    for cycle, seconds in init_s.items():
        if (pg := marks.get(cycle, {}).get("process group")) is not None:
            marks[cycle]["imports"] = pg - dt.timedelta(seconds=seconds)
    return marks


def measure(experiment: str | Path, plugins: list[Any] | None = None) -> Measured:
    """The figures of the one job in ``experiment`` (a saved experiment, or a job's folder in it), with the plugins
    NeMo-Run saved with it, or ``plugins`` (the same settings, given) where the saved experiment cannot be loaded."""
    from nemo_resiliency_plugins.tools.report.plan import compare, saved_plugins

    jobs = report_experiment(experiment)
    if len(jobs) != 1:
        raise ResiliencyConfigError(
            _OWNER, "EXPERIMENT_DIR", str(experiment), "an experiment of one job", detail=f"it has {len(jobs)}"
        )
    (job,) = jobs
    plugins = saved_plugins(job.job_dir) or plugins
    if plugins is None:
        raise _refuse(job.job_dir, "a saved experiment NeMo-Run can load with the job's plugins (else pass --plugins)")
    goodput, counts, wall = job.goodput(), job.iterations(), job.wall_s
    if goodput is None or counts is None or wall is None:
        raise _refuse(job.job_dir, "a measured goodput (training_log lines and a launcher's time stamps)")
    step_s, save_s, saves = step_and_save(job)
    rows = compare(job, plugins, restart_s=1.0)  # the measured restart is read from the rows, not plan's
    restarts = [r.restart_measured_s for r in rows if r.restart_measured_s is not None]
    if not restarts:
        raise _refuse(job.job_dir, "a restart (a fault plan prices, followed by training again)")
    faults: dict[str, int] = {}
    for r in rows:
        faults[r.fault_class] = faults.get(r.fault_class, 0) + 1
    startup, tail = _ends(job)
    return Measured(
        job_dir=job.job_dir,
        step_time_s=step_s,
        save_s=save_s,
        restart_s=statistics.median(restarts),
        faults=faults,
        detections=[(r.fault_class, r.detect_measured_s) for r in rows],
        fired_timeouts=[_fired_timeout(r.detected_by) for r in rows],
        restarts=restart_phases(job),
        goodput=goodput,
        plugins=plugins,
        vs_plan=rows,
        kept=counts[0],
        productive_step_s=statistics.mean(r.iteration_ms for r in job.rows if r.iteration_ms is not None) / 1e3,
        recomputed=counts[1],
        saves=saves,
        wall_s=wall,
        startup_s=startup,
        tail_s=tail,
        steps_between_lines=steps_between_lines(job),
    )


__all__ = ["PHASES", "Measured", "RestartPhases", "measure", "phase_lines", "restart_phases", "step_and_save"]
