"""``nemo-resiliency report``: what happened to a job that ran, read from the files it left in its job directory.

Why: after a real run the answers to "which faults, detected by what, how fast, what did each cost" are scattered
over NVRx's launcher log (its timestamped ``Cycle: N Event: ...`` profiling lines, section timeouts, the exit code
torch's elastic agent saw), the ranks' lines (checkpoints saved and loaded) and, on Slurm, the requeue guard's
lines in the batch log. This module puts them in one table: one row per launcher cycle (an in-job restart starts
a new cycle) of every Slurm attempt (a requeue starts a new attempt).

What it reads, and from where (nothing else, no server):

* the attempts' launcher logs: NeMo-Run's Slurm ``log-<job>_<SLURM_RESTART_COUNT>.out`` (one per attempt), a
  LocalExecutor job's ``combined.log``, a DockerExecutor job's ``log_<container>.out``;
* the requeue guard's own lines (``nemo-resiliency-plugins: ...``) in the Slurm batch log ``sbatch_*.out``.
* with ``FaultTolerancePlugin(diagnostics=True)``: the ranks' stack dumps in those logs (:mod:`.report_stacks`) and
  PyTorch's flight-recorder dumps in the job directory (:mod:`.report_flight`).

A worker's exit is named by its global rank where NVRx's events say which launcher (node) logged it (its group rank
times the ranks per node plus the local rank torch's launcher gives). Which rank a detection names is the rank
whose monitor fired: for a hang inside a collective that is a rank
*blocked* by the hung one, not necessarily the hung one (the report says "detected on", not "fault on").
Goodput is measured from Megatron Bridge's own training_log lines (``[time] iteration N/M | ... elapsed time per
iteration (ms): t |``, every ``logger.log_interval`` iterations): which iterations each cycle reached, which the next
cycle had to train again (after the last checkpoint), and how long an iteration took. Without those lines the
report says it cannot measure goodput rather than guess.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
from pathlib import Path
from typing import Any, NamedTuple

from nemo_resiliency_plugins.tools.report_flight import flight_report
from nemo_resiliency_plugins.tools.report_lines import GLOG as _GLOG
from nemo_resiliency_plugins.tools.report_lines import is_launcher_line
from nemo_resiliency_plugins.tools.report_nodes import place_all
from nemo_resiliency_plugins.tools.report_stacks import is_dump_line, rank_stacks

__all__ = [
    "AttemptReport",
    "CycleRow",
    "JobReport",
    "LauncherVerdict",
    "is_launcher_line",
    "launcher_verdict",
    "print_reports",
    "report_experiment",
    "report_job",
]

_STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) ")  # NVRx's logging lines
# launcher.py main() (NVRx 0.7): the no-restart verdict and the agent's exit code (log_lines.sh: NRP_RE_NO_RESTART,
# NRP_RE_EXIT_ZERO, NRP_RE_EXIT_NONZERO)
_NO_RESTART = re.compile(r"NVRx decided the job must not be restarted \(([A-Za-z_]+)\)")
_AGENT_EXIT = re.compile(r"exit code = (\d+)")
_RESTART = re.compile(r"\brestart_count=(\d+)\b")
_EVENT = re.compile(r"Cycle: (\d+) Event: (\w+) Node: (\S+) Rank: (\S+) Time: (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+)")
_EXITCODE = re.compile(r"failed \(exitcode: (-?\d+)\) local_rank: (\d+)")
_SRUN_TASK = re.compile(r"(\d+): ")  # match: srun's --label prefix, where the step's output carries one
# A rank's own output saying a peer's connection went away (gloo's TCP pair; NCCL's remote error): a rank that exits
# after it failed because another one did.
_PEER_LOST = re.compile(
    r"(?:(\d+): )?\[default(\d+)\]:.*"
    r"(?:Connection (?:closed|reset) by peer|remote process exited or there was a network)"
)
# NVRx's launcher when it gives up: every failure of the last poll (torch's agent logged only the first)
_ALL_FAILURES = re.compile(r"Some rank\(s\) exited with non-zero exit code: ")
_FAILURE = re.compile(r"\d+: ProcessFailure\(local_rank=(\d+), pid=\d+, exitcode=(-?\d+)")
_NPROC = re.compile(r"\s*nproc_per_node\s*:\s*(\d+)\s*")  # fullmatch: the launch config torch's agent prints
_SECTION = re.compile(r"Section '(\w+)' has been open for ([0-9.]+) seconds(?:\. Timeout is ([0-9.]+) seconds)?")
_OUT_OF_SECTION = re.compile(r"Was out of section for ([0-9.]+) seconds")
_HEARTBEAT = re.compile(r"Did not get (initial|subsequent) heartbeat")
_MONITOR_RANK = re.compile(r"\[workload:\S*?\((\d+)\)")
_INJECTED = re.compile(r"FAULT_INJECTED kind=(\w+) step=(\d+) rank=(\d+)")  # the reference workload only
_RESUMED = re.compile(r"RESUMED from step (\d+)|successfully loaded checkpoint from .* at iteration (\d+)")
_SAVED = re.compile(r"CHECKPOINT saved step=(\d+)|successfully saved checkpoint from iteration\s+(\d+)")
_FINISHED = re.compile(r"FINISHED step=(\d+)")
_INPROCESS = re.compile(r"INPROCESS iteration=([1-9]\d*)")
_GUARD = re.compile(r"nemo-resiliency-plugins: (.+)")  # fullmatch: one whole line
# Megatron Bridge's straggler detection (training/nvrx_straggler.py, rank 0): NVRx's StragglerId set in its warning,
# and the line it logs before training stops when stop_if_detected is on.
_STRAGGLERS = re.compile(r"STRAGGLER DETECTION WARNING: Some GPUs (have worse relative|performance dropped)")
_STRAGGLER_ID = re.compile(r"StragglerId\(rank=(\d+), node='([^']*)'\)")
_STRAGGLER_STOP = re.compile(r"Detected stragglers\. Training should be stopped\.")
_STRAGGLER_STOPPED = "straggler detection (training stopped)"
# Megatron Bridge's exit handler after the save at a signal (training/train.py, barrier_and_log on rank 0)
_SIGNAL_EXIT = re.compile(r"\[exiting program after receiving SIGTERM\.\] datetime: (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)")
SIGNAL_EXITED = "SIGTERM to the ranks (saved, exited)"
#: Added to "rank exited with code N" when that rank had logged a peer's lost connection (CycleRow.exit_after_peer).
PEER_NOTE = " after a peer's connection closed (another rank failed first; torch's agent named only this one)"
# Megatron Bridge's training_log line (every logger.log_interval iterations, on the last rank); the reference workload
# prints the same line.
_ITERATION = re.compile(
    r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\] iteration\s+(\d+)/\s*\d+ \|.*?"
    r"elapsed time per iteration \(ms\): ([0-9.]+) \|"
)
_SLURM_LOG = re.compile(r"log-.*_(\d+)\.out")  # fullmatch: one whole file name


_ALLOWED = (
    "an experiment directory NeMo-Run saved for a job that ran ($NEMORUN_HOME/experiments/<title>/<id>, with a "
    "_CONFIG file), or one Slurm or Docker job's folder in it"
)


def _not_a_job(path: Path, detail: str) -> Exception:
    """The one error every bad directory gets: what was given, what is allowed, what was wrong with it."""
    from nemo_resiliency_plugins.errors import ResiliencyConfigError

    return ResiliencyConfigError("nemo-resiliency report", "EXPERIMENT_DIR", str(path), _ALLOWED, detail=detail)


@dataclasses.dataclass(kw_only=True)
class CycleRow:
    """One launcher cycle: the workers' start up to the fault that ended it (or the end of the run)."""

    attempt: int
    cycle: int
    started: str | None = None  # NVRx's worker_start_completed time (in the log's own local time, as every time here)
    resumed_from: int | None = None
    checkpoints: list[int] = dataclasses.field(default_factory=list)
    inprocess_restarts: int = 0
    injected: list[str] = dataclasses.field(default_factory=list)  # the reference workload's markers only
    detected_by: str | None = None
    detected_on_rank: int | None = None
    detected_at: str | None = None
    open_s: float | None = None  # NVRx's own figure: how long the section was open when it fired
    # The exit that ended the cycle (negative: killed by that signal): what torch's elastic agent saw first, or the
    # rank that failed first where the one it saw had only lost its connection to it (see exit_after_peer)
    exit_code: int | None = None
    # The rank torch's agent named had itself logged that a peer's connection closed: it failed because another rank
    # did. torch's agent names one failure per poll, the earliest by whole-second time stamps, ties to the lowest
    # local rank; when the failed rank and the ones it took down are seen in one poll, the failed one goes unnamed.
    exit_after_peer: bool = False
    exits: list[str] = dataclasses.field(default_factory=list)  # every worker exit it reported, in order
    restart_s: float | None = None  # detection -> the next cycle's workers started (launcher clock)
    finished_step: int | None = None
    last_iteration: int | None = None  # the last iteration Megatron Bridge's training_log reported in this cycle
    iteration_ms: float | None = None  # its average time per iteration over the cycle's training_log lines
    # Iterations this cycle trained twice: after an in-process restart it resumes from a checkpoint older than
    # the iteration it had reached, inside the same cycle.
    recomputed_inside: int = 0
    resumed_from_first: int | None = None  # where the cycle's workers began (resumed_from is the latest resume)
    # Megatron Bridge's straggler reports in this cycle, "rank R on node N (relative|individual)", first seen first
    stragglers: list[str] = dataclasses.field(default_factory=list)
    # The cycle's first and last training_log lines' times (whole seconds: Megatron Bridge's format)
    first_iteration_at: str | None = None
    last_iteration_at: str | None = None
    # FaultTolerancePlugin(diagnostics=True): where each rank the monitor stopped was (tools/report_stacks.py), and
    # the ranks that were not in a collective: in a hang inside a collective, the ones the others waited for.
    stacks: list[str] = dataclasses.field(default_factory=list)
    outside_collective: list[str] = dataclasses.field(default_factory=list)
    outside_ranks: list[int] = dataclasses.field(default_factory=list)  # their global ranks, where the log has them
    # Slurm only (tools/report_nodes.py): the node the fault was on, and how the node itself failed where it did
    # ("lost (srun: ...)", "went silent (...)"); None for a rank's own fault, which ``node`` then places
    node: str | None = None
    node_fault: str | None = None


@dataclasses.dataclass(kw_only=True)
class AttemptReport:
    attempt: int
    log: str
    first: str | None
    last: str | None
    wall_s: float | None
    cycles: list[CycleRow]
    # Whether a launcher (NVRx's or torch's logging) stamped the log: without one (a plain interpreter) the only
    # time stamps are the training_log lines, so the wall time misses start-up and goodput cannot be measured.
    launcher_stamped: bool = False


@dataclasses.dataclass(kw_only=True)
class JobReport:
    job_dir: str
    attempts: list[AttemptReport]
    guard: list[str]  # the Slurm requeue guard's lines, in order
    # FaultTolerancePlugin(diagnostics=True): the flight recorder's dumps (tools/report_flight.py): each rank's newest
    # collective per process group, then "never entered: rank R ..." for the ranks the others waited for
    flight: list[str] = dataclasses.field(default_factory=list)
    flight_behind: list[str] = dataclasses.field(default_factory=list)

    @property
    def rows(self) -> list[CycleRow]:
        return [row for attempt in self.attempts for row in attempt.cycles]

    @property
    def requeues(self) -> int:
        return max(0, len(self.attempts) - 1)

    @property
    def restarts(self) -> int:
        return sum(max(0, len(a.cycles) - 1) for a in self.attempts)

    @property
    def finished(self) -> bool:
        return any(row.finished_step is not None for row in self.rows)

    @property
    def wall_s(self) -> float | None:
        """The launchers' wall time over all attempts; None when an attempt's could not be measured (its log has no
        launcher time stamps)."""
        walls = [a.wall_s for a in self.attempts]
        return None if not walls or None in walls else sum(walls)

    def iterations(self) -> tuple[int, int] | None:
        """(kept, recomputed): the iterations the final model holds, and those trained again because a fault came
        after the last checkpoint (inside a cycle after an in-process restart, or by the next cycle or attempt,
        which resumed from an older iteration than the last one reported). The recomputed count is a lower bound:
        iterations after the last training_log line seen are not counted (``logger.log_interval`` > 1, or the last
        rank, which prints the line, lost with its node). None without training_log lines."""
        rows = self.rows
        if not any(row.last_iteration is not None for row in rows):
            return None
        recomputed = sum(row.recomputed_inside for row in rows)
        reached = 0
        for row in rows:
            recomputed += max(0, reached - (row.resumed_from_first or 0))
            if row.last_iteration is not None:
                reached = row.last_iteration
        return reached, recomputed

    def goodput(self) -> float | None:
        """The share of the launchers' wall time (every attempt, first log line to last; time queued between
        Slurm attempts not counted) spent on the iterations the final model keeps, at the measured time per
        iteration. Start-up, detection, restarts, saves outside an iteration and recomputed iterations are the
        rest. None without training_log lines, or when an attempt's log has no launcher time stamps (a plain
        interpreter: its start-up cannot be timed, and the training_log lines alone would overstate goodput)."""
        counts, wall = self.iterations(), self.wall_s
        known = [row.iteration_ms for row in self.rows if row.iteration_ms is not None]
        if counts is None or not wall or not known:
            return None
        productive_s = counts[0] * (sum(known) / len(known)) / 1000.0
        return round(min(1.0, productive_s / wall), 4)

    def to_json(self) -> dict[str, Any]:
        return {
            "job_dir": self.job_dir,
            "attempts": [dataclasses.asdict(a) for a in self.attempts],
            "requeues": self.requeues,
            "in_job_restarts": self.restarts,
            "finished": self.finished,
            "guard": self.guard,
            "flight_recorder": self.flight,
            "flight_recorder_behind": self.flight_behind,
            "iterations_kept_recomputed": self.iterations(),
            "goodput": self.goodput(),
            "goodput_note": _GOODPUT_NOTE,
        }


_GOODPUT_NOTE = (
    "share of the launchers' wall time (all attempts, queue time not counted) spent on iterations the final model "
    "keeps, from Megatron Bridge's training_log lines (logger.log_interval); null without them or without a "
    "launcher's time stamps (a plain interpreter: start-up cannot be timed)"
)


def launcher_stamp(line: str, year: int | None) -> dt.datetime | None:
    """A launcher line's own time stamp (NVRx's, or torch's launcher modules' given ``year``), local time."""
    if m := _STAMP.match(line):
        return dt.datetime.strptime(f"{m.group(1)}.{m.group(2)}", "%Y-%m-%d %H:%M:%S.%f")
    if (m := _GLOG.match(line)) and year is not None:
        return dt.datetime.strptime(f"{year}-{m.group(1)}-{m.group(2)} {m.group(3)}", "%Y-%m-%d %H:%M:%S.%f")
    return None


class LauncherVerdict(NamedTuple):
    """What the launchers' own lines of one step say: the requeue guard's reading on the batch host
    (core/sbatch/step_verdict.sh, spare_nodes.sh), made here from the same lines for the report."""

    no_restart: str | None  # NVRx's reason, when a launcher said the job must not be restarted
    exits: tuple[int, ...]  # each launcher's exit code, in log order


def launcher_verdict(text: str) -> LauncherVerdict:
    """The no-restart reason and the launchers' exit codes in ``text``, from launcher lines only."""
    reason, exits = None, []
    for line in text.splitlines():
        if not is_launcher_line(line):
            continue
        if reason is None and (m := _NO_RESTART.search(line)):
            reason = m.group(1)
        if m := _AGENT_EXIT.search(line):
            exits.append(int(m.group(1)))
    return LauncherVerdict(reason, tuple(exits))


def _iso(when: dt.datetime | None) -> str | None:
    return when.isoformat(sep=" ", timespec="milliseconds") if when else None


def parse_attempt(text: str, attempt: int = 0, log: str = "") -> AttemptReport:
    """The cycles of one launcher log (several launchers of a multi-node step may share it)."""
    # torch's lines carry no year: NVRx's lines or Megatron Bridge's training_log lines give it.
    year = next(
        (int(m.group(1)[:4]) for line in text.splitlines() if (m := _STAMP.match(line) or _ITERATION.search(line))),
        None,
    )
    rows: dict[int, CycleRow] = {0: CycleRow(attempt=attempt, cycle=0)}
    detected: dict[int, dt.datetime] = {}
    cur, first, last = 0, None, None
    ms: dict[int, list[float]] = {}
    stamped = False
    # Per cycle: the checkpoint a rank said it resumed from since the cycle's last training_log line. Every rank's
    # lines reach the log through its own tail thread, so one rank's resume line may come after the last rank's
    # first iteration after it: an in-process go-back is read from the training_log lines (one rank's, in order).
    resumed_since: dict[int, int] = {}
    first_iteration: dict[int, int] = {}  # per cycle: its first training_log iteration
    went_back: set[int] = set()  # the cycles whose training_log went back (an in-process restart)
    first_straggler: dict[int, int] = {}  # per cycle: the first rank Megatron Bridge reported as a straggler
    utc_offset: dt.timedelta | None = None  # the launcher host's local time minus UTC
    dumps: dict[int, list[str]] = {}  # per cycle: the ranks' stack-dump lines (diagnostics=True)
    peer_lost: dict[int, set[tuple[str | None, int]]] = {}  # per cycle: (srun task, local rank) that lost a peer
    # per cycle: each exit torch's agents logged, in log order: ((srun task, local rank), code, global rank, detected)
    exit_lines: dict[int, list[_Exit]] = {}
    # Several launchers (one per node) may share the log: a worker's global rank is its launcher's group rank (NVRx's
    # events name the launcher as <host>_<pid>_<n> with its Rank) times the ranks per node, plus its local rank.
    group_rank: dict[str, int] = {}  # launcher pid -> its group rank, the latest NVRx event of it said
    nproc: int | None = None
    for line in text.splitlines():
        if is_dump_line(line):  # a rank's stderr, as the lines torch logs before the next cycle's start
            dumps.setdefault(cur, []).append(line)
            continue
        when = launcher_stamp(line, year)
        stamped = stamped or when is not None
        launcher = is_launcher_line(line)  # only a launcher's line says a restart, a failure or a detection
        iteration = _ITERATION.search(line)
        if iteration:
            when = dt.datetime.strptime(iteration.group(1), "%Y-%m-%d %H:%M:%S")
        if when:
            first, last = first or when, when
        if iteration:
            number, before = int(iteration.group(2)), rows[cur].last_iteration
            rows[cur].first_iteration_at = rows[cur].first_iteration_at or _iso(when)
            rows[cur].last_iteration_at = _iso(when)
            if before is not None and number <= before:  # an in-process restart went back to a checkpoint
                back_to = resumed_since.get(cur)
                back_to = back_to if back_to is not None and back_to < number else number - 1
                rows[cur].recomputed_inside += before - back_to
                went_back.add(cur)
            resumed_since.pop(cur, None)
            first_iteration.setdefault(cur, number)
            rows[cur].last_iteration = number
            ms.setdefault(cur, []).append(float(iteration.group(3)))
            continue
        if launcher and (m := _RESTART.search(line)):
            cur = max(cur, int(m.group(1)))
            rows.setdefault(cur, CycleRow(attempt=attempt, cycle=cur))
            continue
        row = rows[cur]
        if m := _NPROC.fullmatch(line):
            nproc = int(m.group(1))
            continue
        if launcher and (m := _EVENT.search(line)):
            parts = m.group(3).rsplit("_", 2)
            if len(parts) == 3 and parts[1].isdigit() and m.group(4).isdigit():
                group_rank[parts[1]] = int(m.group(4))
            # NVRx stamps its events in UTC and its log lines in the host's local time: the line carrying both
            # gives the host's offset, so that a restart time never mixes the two.
            event_time = dt.datetime.strptime(m.group(5), "%Y-%m-%d %H:%M:%S.%f")
            if utc_offset is None and when is not None:
                quarters = round((when - event_time).total_seconds() / 900.0)  # offsets are whole quarter hours
                utc_offset = dt.timedelta(seconds=900 * quarters)
            event_time += utc_offset or dt.timedelta(0)
            if m.group(2) == "worker_start_completed" and int(m.group(1)) == cur and row.started is None:
                row.started = _iso(event_time)
                if cur - 1 in detected:
                    rows[cur - 1].restart_s = round((event_time - detected[cur - 1]).total_seconds(), 3)
            elif m.group(2) == "failure_detected" and cur not in detected:
                detected[cur] = event_time
            continue
        if m := _PEER_LOST.match(line):
            peer_lost.setdefault(cur, set()).add((m.group(1), int(m.group(2))))
            continue
        if launcher and _ALL_FAILURES.search(line) and cur in exit_lines:
            task = _SRUN_TASK.match(line)
            # NVRx's line names no launcher: the global rank is known when one launcher logs here
            known = nproc is not None and len(group_rank) <= 1
            for local, code in _FAILURE.findall(line):
                rank = next(iter(group_rank.values()), 0) * nproc + int(local) if known else None
                exit_lines[cur].append(_Exit((task.group(1) if task else None, int(local)), int(code), rank, False))
            continue
        if launcher and row.detected_by is None and (found := _detection(line)):
            row.detected_by, row.open_s = found
            rank = _MONITOR_RANK.search(line)
            row.detected_on_rank = int(rank.group(1)) if rank else None
            row.detected_at = _iso(when)
            if when and cur not in detected:
                detected[cur] = when
        elif launcher and (m := _EXITCODE.search(line)):
            code = int(m.group(1))
            how = _exit_how(code)
            row.exits.append(f"local rank {m.group(2)} {how}")
            task = _SRUN_TASK.match(line)
            global_rank = _global_rank(line, int(m.group(2)), group_rank, nproc)
            exit_lines.setdefault(cur, []).append(
                _Exit((task.group(1) if task else None, int(m.group(2))), code, global_rank, row.detected_by is None)
            )
            if row.exit_code is None:
                row.exit_code = int(m.group(1))
                if row.detected_by is None:
                    row.detected_by = f"rank {how}"
                    row.detected_on_rank = global_rank
                    row.detected_at = _iso(when)
                    if when and cur not in detected:
                        detected[cur] = when
        elif m := _INJECTED.search(line):
            row.injected.append(f"{m.group(1)} at step {m.group(2)} on rank {m.group(3)}")
        elif m := _RESUMED.search(line):
            row.resumed_from = resumed_since[cur] = int(m.group(1) or m.group(2))
            # The cycle's workers began there if no iteration before it was at or below it (a rank's late line).
            if row.resumed_from_first is None and cur not in went_back:
                if first_iteration.get(cur, row.resumed_from + 1) > row.resumed_from:
                    row.resumed_from_first = row.resumed_from
        elif m := _SAVED.search(line):
            step = int(m.group(1) or m.group(2))
            if step not in row.checkpoints:
                row.checkpoints.append(step)
        elif m := _FINISHED.search(line):
            row.finished_step = int(m.group(1))
        elif m := _INPROCESS.search(line):
            row.inprocess_restarts = max(row.inprocess_restarts, int(m.group(1)))
        elif (m := _STRAGGLERS.search(line)) and line.endswith("}"):  # Megatron Bridge's whole line, not a quote
            kind = "relative" if m.group(1).startswith("have") else "individual"
            for rank, node in _STRAGGLER_ID.findall(line):
                first_straggler.setdefault(cur, int(rank))
                if (found := f"rank {rank} on node {node} ({kind})") not in row.stragglers:
                    row.stragglers.append(found)
        elif (m := _SIGNAL_EXIT.search(line)) and row.detected_by is None:
            row.detected_by = SIGNAL_EXITED
            row.detected_at = _iso(dt.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S"))
        elif _STRAGGLER_STOP.search(line) and row.detected_by is None:
            # Every rank logs it; the cycle ends with a save and exit 0.
            row.detected_by = _STRAGGLER_STOPPED  # the rank: the first one rank 0 reported (after the loop)
            row.detected_at = _iso(when)
    for cycle, when in detected.items():
        rows[cycle].detected_at = rows[cycle].detected_at or _iso(when)
    for cycle, exits in exit_lines.items():  # after the loop: a rank's own lines may follow the agent's exit line
        _name_the_cause(rows[cycle], exits, peer_lost.get(cycle, set()))
    for cycle, rank in first_straggler.items():  # the ranks' stop line may come before rank 0's report in the log
        if rows[cycle].detected_by == _STRAGGLER_STOPPED:
            rows[cycle].detected_on_rank = rank
    for cycle, values in ms.items():
        rows[cycle].iteration_ms = round(sum(values) / len(values), 3)
    for cycle, lines in dumps.items():
        stacks = rank_stacks(lines)
        rows[cycle].stacks = [stack.summary() for stack in stacks]
        outside = [stack for stack in stacks if stack.collective() is None]
        rows[cycle].outside_collective = [stack.label() for stack in outside]
        rows[cycle].outside_ranks = [stack.rank for stack in outside if stack.rank is not None]
    # Without a launcher's stamps, first and last are training_log lines: their span is not the attempt's wall time.
    wall = round((last - first).total_seconds(), 3) if first and last and stamped else None
    cycles = [rows[k] for k in sorted(rows)]
    return AttemptReport(
        attempt=attempt,
        log=log,
        first=_iso(first),
        last=_iso(last),
        wall_s=wall,
        cycles=cycles,
        launcher_stamped=stamped,
    )


class _Exit(NamedTuple):
    """One worker exit torch's agent (or NVRx's final list) logged in a cycle."""

    key: tuple[str | None, int]  # (srun task, local rank): matched against the ranks that logged a lost peer
    code: int
    rank: int | None  # global rank, where known
    detected: bool  # this exit set the row's detected_by


def _exit_how(code: int) -> str:
    return f"killed by signal {-code}" if code < 0 else f"exited with code {code}"


def _name_the_cause(
    row: CycleRow,
    exits: list[_Exit],
    peer_lost: set[tuple[str | None, int]],
) -> None:
    """When the first exit a cycle's log names is a rank that had logged a peer's lost connection, it failed because
    another rank did: a later exit of the cycle that is not such a consequence (another node's launcher logged it, or
    NVRx's list of every failure when it gives up) is named instead; with none (torch's agent names one failure per
    poll, and the poll saw both), the row says so."""
    first, rest = exits[0], exits[1:]
    if first.code < 0 or first.key not in peer_lost:
        return
    # Not SIGTERM: torch's agent stops the other workers with it, and NVRx's list counts them among the failures.
    cause = next((e for e in rest if e.code != -15 and (e.code < 0 or e.key not in peer_lost)), None)
    if cause is None:
        row.exit_after_peer = True
        if first.detected:
            row.detected_by = f"rank {_exit_how(first.code)}{PEER_NOTE}"
        return
    row.exit_code = cause.code
    if first.detected:
        row.detected_by, row.detected_on_rank = f"rank {_exit_how(cause.code)}", cause.rank


def _global_rank(line: str, local_rank: int, group_rank: dict[str, int], nproc: int | None) -> int:
    """The global rank of the worker torch's launcher reports on ``line``: its launcher's group rank (known from NVRx's
    events) times the ranks per node plus its local rank; the local rank where the launcher is not known (torchrun,
    one node: the same number)."""
    glog = _GLOG.match(line)  # group 4: the pid of the launcher that logged it
    if glog is None or nproc is None or glog.group(4) not in group_rank:
        return local_rank
    return group_rank[glog.group(4)] * nproc + local_rank


def _detection(line: str) -> tuple[str, float | None] | None:
    if m := _SECTION.search(line):
        limit = f", timeout {float(m.group(3)):g} s" if m.group(3) else ""
        return f"section '{m.group(1)}' timeout (open {float(m.group(2)):g} s{limit})", float(m.group(2))
    if m := _OUT_OF_SECTION.search(line):
        return f"out-of-section timeout ({float(m.group(1)):g} s)", float(m.group(1))
    if m := _HEARTBEAT.search(line):
        return f"{m.group(1)} heartbeat timeout", None
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
    attempts = [parse_attempt(p.read_text(errors="replace"), attempt, str(p)) for attempt, p in logs]
    place_all(attempts, job_dir)
    guard: list[str] = []
    for batch in sorted(job_dir.glob("sbatch_*.out")):
        for line in batch.read_text(errors="replace").splitlines():
            if m := _GUARD.fullmatch(line):  # the guard's echo; bash's trace of it starts with "+ "
                guard.append(m.group(1))
    flight = flight_report(job_dir)
    return JobReport(
        job_dir=str(job_dir),
        attempts=attempts,
        guard=guard,
        flight=flight.lines() if flight else [],
        flight_behind=flight.behind if flight else [],
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


def print_reports(console: Any, reports: list[JobReport]) -> None:
    """The tables ``nemo-resiliency report`` prints (rich console): :mod:`.report_print`."""
    from nemo_resiliency_plugins.tools.report_print import print_reports as _print

    _print(console, reports)
