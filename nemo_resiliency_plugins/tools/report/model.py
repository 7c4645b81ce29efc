"""The report's data model: a job's attempts (one per Slurm run of the batch script), each attempt's launcher
cycles (an in-job restart starts a new one), the fault that ended a cycle and the node it was on. Parsing is in
:mod:`.parse` (log lines) and :mod:`.nodes` (Slurm's batch log), printing in :mod:`.printing`: this module reads
nothing and prints nothing, so every reader and writer shares one shape.
"""

from __future__ import annotations

import dataclasses
from typing import Any

__all__ = ["PEER_NOTE", "SIGNAL_EXITED", "AttemptReport", "CycleRow", "Fault", "JobReport", "NodeFault"]

SIGNAL_EXITED = "SIGTERM to the ranks (saved, exited)"
#: Added to "rank exited with code N" when that rank had logged a peer's lost connection (CycleRow.exit_after_peer).
PEER_NOTE = " after a peer's connection closed (another rank failed first; torch's agent named only this one)"
STRAGGLER_STOPPED = "straggler detection (training stopped)"


@dataclasses.dataclass(frozen=True, kw_only=True)
class NodeFault:
    """A Slurm node a fault was on, and how the node itself failed where it did (None: a rank's own fault)."""

    node: str
    how: str | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class Fault:
    """What ended a cycle, as the logs tell it: who detected it, on which rank and node, when, and the exit."""

    detected_by: str
    rank: int | None
    at: str | None
    open_s: float | None
    exit_code: int | None
    node: NodeFault | None


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
    # The workload's own FINISHED step=N line (a rank's output): the step figure only, never the verdict
    finished_step: int | None = None
    # The verdict: the launcher said this cycle's worker group finished (torch's agent, in NVRx's launcher too:
    # every worker exited 0), and it was no straggler stop or signal's exit (their workers exit 0 too). A rank may
    # print anything, so a FINISHED line alone never makes a cycle finished; only where no launcher wrote a line in
    # the attempt (a plain interpreter) is the workload's line the only evidence there is.
    finished: bool = False
    last_iteration: int | None = None  # the last iteration Megatron Bridge's training_log reported in this cycle
    iteration_ms: float | None = None  # its average time per iteration over the cycle's training_log lines
    # Each training_log line of the cycle, in log order: (iteration, elapsed ms per iteration since the previous
    # line). plan --from reads step and save times from these (a save lands in the next line's time).
    iteration_times: list[tuple[int, float]] = dataclasses.field(default_factory=list)
    # Iterations this cycle trained twice: after an in-process restart it resumes from a checkpoint older than
    # the iteration it had reached, inside the same cycle.
    recomputed_inside: int = 0
    resumed_from_first: int | None = None  # where the cycle's workers began (resumed_from is the latest resume)
    # Megatron Bridge's straggler reports in this cycle, "rank R on node N (relative|individual)", first seen first
    stragglers: list[str] = dataclasses.field(default_factory=list)
    # The cycle's first and last training_log lines' times (whole seconds: Megatron Bridge's format)
    first_iteration_at: str | None = None
    last_iteration_at: str | None = None
    # FaultTolerancePlugin(diagnostics=True): where each rank the monitor stopped was (tools/report/stacks.py), and
    # the ranks that were not in a collective: in a hang inside a collective, the ones the others waited for.
    stacks: list[str] = dataclasses.field(default_factory=list)
    outside_collective: list[str] = dataclasses.field(default_factory=list)
    outside_ranks: list[int] = dataclasses.field(default_factory=list)  # their global ranks, where the log has them
    # Slurm only (tools/report/nodes.py): the node the fault was on, and how the node itself failed where it did
    # ("lost (srun: ...)", "went silent (...)"); None for a rank's own fault, which ``node`` then places
    node: str | None = None
    node_fault: str | None = None

    def fault(self) -> Fault | None:
        """What ended this cycle, as one value (None: nothing did, e.g. the cycle that finished)."""
        if self.detected_by is None:
            return None
        node = NodeFault(node=self.node, how=self.node_fault) if self.node else None
        return Fault(
            detected_by=self.detected_by,
            rank=self.detected_on_rank,
            at=self.detected_at,
            open_s=self.open_s,
            exit_code=self.exit_code,
            node=node,
        )


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
    # Lines of this log the report could not read (an impossible time stamp, a number too long, a line too long):
    # each one skipped, the count and the first said once (issue 47)
    skipped: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(kw_only=True)
class JobReport:
    job_dir: str
    attempts: list[AttemptReport]
    guard: list[str]  # the Slurm requeue guard's lines, in order
    # FaultTolerancePlugin(diagnostics=True): the flight recorder's dumps (tools/report/flight.py): each rank's newest
    # collective per process group, then "never entered: rank R ..." for the ranks the others waited for
    flight: list[str] = dataclasses.field(default_factory=list)
    flight_behind: list[str] = dataclasses.field(default_factory=list)
    # What the report left out of the job directory and why, one line each (a FIFO or a directory named like a
    # log, a node list larger than a job can hold, an unreadable line): never the end of the report
    skipped: list[str] = dataclasses.field(default_factory=list)

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
        return any(row.finished for row in self.rows)

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
            "skipped": self.skipped + [line for a in self.attempts for line in a.skipped],
        }


_GOODPUT_NOTE = (
    "share of the launchers' wall time (all attempts, queue time not counted) spent on iterations the final model "
    "keeps, from Megatron Bridge's training_log lines (logger.log_interval); null without them or without a "
    "launcher's time stamps (a plain interpreter: start-up cannot be timed)"
)
