"""One launcher log read into the report's model (:mod:`.model`): its launcher cycles, what ended each one.

Why: after a real run the answers to "which faults, detected by what, how fast, what did each cost" are scattered
over NVRx's launcher log (its timestamped ``Cycle: N Event: ...`` profiling lines, section timeouts, the exit code
torch's elastic agent saw) and the ranks' lines (checkpoints saved and loaded). Every line's shape is in
:mod:`nemo_resiliency_plugins.job.log_lines`; this module only decides what each one means.

A worker's exit is named by its global rank where NVRx's events say which launcher (node) logged it (its group rank
times the ranks per node plus the local rank torch's launcher gives). Which rank a detection names is the rank
whose monitor fired: for a hang inside a collective that is a rank
*blocked* by the hung one, not necessarily the hung one (the report says "detected on", not "fault on").
Goodput is measured from Megatron Bridge's own training_log lines (``[time] iteration N/M | ... elapsed time per
iteration (ms): t |``, every ``logger.log_interval`` iterations): which iterations each cycle reached, which the next
cycle had to train again (after the last checkpoint), and how long an iteration took. Without those lines the
report says it cannot measure goodput rather than guess.

A line the reader cannot take (an impossible time stamp, a number longer than any count, a line longer than any
launcher writes) is skipped and counted; the attempt's ``skipped`` says how many and which came first, once.
"""

from __future__ import annotations

import datetime as dt
from typing import NamedTuple

from nemo_resiliency_plugins.job import log_lines as ll
from nemo_resiliency_plugins.tools.report.model import (
    PEER_NOTE,
    SIGNAL_EXITED,
    STRAGGLER_STOPPED,
    AttemptReport,
    CycleRow,
)
from nemo_resiliency_plugins.tools.report.stacks import is_dump_line, rank_stacks
from nemo_resiliency_plugins.tools.report.stamps import LogClock, iso

__all__ = ["MAX_LINE", "LauncherVerdict", "launcher_verdict", "parse_attempt"]

#: The longest line read (characters): every launcher and training_log line is far shorter; a longer one is a
#: rank's own output (or a crafted file), skipped so that no pattern's search runs over megabytes.
MAX_LINE = 65536
#: The most digits a count in a line may have (a rank, a step, an exit code): longer is not a count.
_MAX_DIGITS = 18
_ = (PEER_NOTE, SIGNAL_EXITED)  # re-exported by the package


def _count(text: str) -> int:
    """A count from a log line; ValueError past :data:`_MAX_DIGITS` digits (no job has that many of anything)."""
    if len(text.lstrip("-")) > _MAX_DIGITS:
        raise ValueError(f"a number of {len(text)} digits")
    return int(text)


class _Exit(NamedTuple):
    """One worker exit torch's agent (or NVRx's final list) logged in a cycle."""

    key: tuple[str | None, int]  # (srun task, local rank): matched against the ranks that logged a lost peer
    code: int
    rank: int | None  # global rank, where known
    detected: bool  # this exit set the row's detected_by


def _exit_how(code: int) -> str:
    return f"killed by signal {-code}" if code < 0 else f"exited with code {code}"


def _detection(line: str) -> tuple[str, float | None] | None:
    if m := ll.NVRX_SECTION.search(line):
        limit = f", timeout {float(m.group(3)):g} s" if m.group(3) else ""
        return f"section '{m.group(1)}' timeout (open {float(m.group(2)):g} s{limit})", float(m.group(2))
    if m := ll.NVRX_OUT_OF_SECTION.search(line):
        return f"out-of-section timeout ({float(m.group(1)):g} s)", float(m.group(1))
    if m := ll.NVRX_HEARTBEAT.search(line):
        return f"{m.group(1)} heartbeat timeout", None
    return None


class _Reader:
    """The state of one attempt's log while its lines are read in order (one method per kind of line)."""

    def __init__(self, text: str, attempt: int, log: str) -> None:
        self.attempt, self.log = attempt, log
        self.clock = LogClock(text)
        self.rows: dict[int, CycleRow] = {0: CycleRow(attempt=attempt, cycle=0)}
        self.detected: dict[int, dt.datetime] = {}
        self.cur = 0
        self.first: dt.datetime | None = None
        self.last: dt.datetime | None = None
        self.stamped = False
        # Per cycle: the checkpoint a rank said it resumed from since the cycle's last training_log line. Every
        # rank's lines reach the log through its own tail thread, so one rank's resume line may come after the last
        # rank's first iteration after it: an in-process go-back is read from the training_log lines (one rank's).
        self.resumed_since: dict[int, int] = {}
        self.first_iteration: dict[int, int] = {}  # per cycle: its first training_log iteration
        self.went_back: set[int] = set()  # the cycles whose training_log went back (an in-process restart)
        self.first_straggler: dict[int, int] = {}  # per cycle: the first rank reported as a straggler
        self.utc_offset: dt.timedelta | None = None  # the launcher host's local time minus UTC
        self.dumps: dict[int, list[str]] = {}  # per cycle: the ranks' stack-dump lines (diagnostics=True)
        self.peer_lost: dict[int, set[tuple[str | None, int]]] = {}  # per cycle: (srun task, local rank)
        # per cycle: each exit torch's agents logged, in log order
        self.exit_lines: dict[int, list[_Exit]] = {}
        # Several launchers (one per node) may share the log: a worker's global rank is its launcher's group rank
        # (NVRx's events name the launcher as <host>_<pid>_<n> with its Rank) times the ranks per node, plus its
        # local rank.
        self.group_rank: dict[str, int] = {}  # launcher pid -> its group rank, the latest NVRx event of it said
        self.nproc: int | None = None
        self.bad = 0
        self.first_bad = ""
        self.launched = False  # whether any launcher (NVRx, torch's agent, srun, the guard) wrote a line here

    def read(self, number: int, line: str) -> None:
        """One line; a line it cannot take is counted and skipped, and the report goes on with the next."""
        try:
            if len(line) > MAX_LINE:
                raise ValueError(f"a line of {len(line)} characters")
            self._line(line)
        except (ValueError, OverflowError) as exc:
            self.bad += 1
            self.first_bad = self.first_bad or f"line {number}: {exc}"

    def _line(self, line: str) -> None:
        if is_dump_line(line):  # a rank's stderr, as the lines torch logs before the next cycle's start
            self.dumps.setdefault(self.cur, []).append(line)
            return
        when = self.clock.stamp(line)
        self.stamped = self.stamped or when is not None
        iteration = ll.MB_ITERATION.search(line)
        if iteration:
            when = dt.datetime.strptime(iteration.group(1), "%Y-%m-%d %H:%M:%S")
            self.clock.dated(when)
        if when:
            self.first, self.last = self.first or when, when
        if iteration:
            return self._iteration(iteration, when)
        launcher = ll.is_launcher_line(line)  # only a launcher's line says a restart, a failure or a detection
        self.launched = self.launched or launcher
        if launcher and ll.TORCH_GROUP_FINISHED.search(line):
            self.rows[self.cur].finished = True
            return None
        if launcher and (m := ll.TORCH_RESTART.search(line)):
            self.cur = max(self.cur, _count(m.group(1)))
            self.rows.setdefault(self.cur, CycleRow(attempt=self.attempt, cycle=self.cur))
            return None
        if m := ll.TORCH_NPROC.fullmatch(line):
            self.nproc = _count(m.group(1))
            return None
        if launcher and (m := ll.NVRX_EVENT.search(line)):
            return self._event(m, when)
        if m := ll.TORCH_PEER_LOST.match(line):
            self.peer_lost.setdefault(self.cur, set()).add((m.group(1), _count(m.group(2))))
            return None
        if launcher and ll.NVRX_ALL_FAILURES.search(line) and self.cur in self.exit_lines:
            return self._all_failures(line)
        return self._rank_or_monitor(line, when, launcher)

    def _iteration(self, iteration, when: dt.datetime) -> None:  # noqa: ANN001 - re.Match
        cur, row = self.cur, self.rows[self.cur]
        number, before = _count(iteration.group(2)), row.last_iteration
        row.first_iteration_at = row.first_iteration_at or iso(when)
        row.last_iteration_at = iso(when)
        if before is not None and number <= before:  # an in-process restart went back to a checkpoint
            back_to = self.resumed_since.get(cur)
            back_to = back_to if back_to is not None and back_to < number else number - 1
            row.recomputed_inside += before - back_to
            self.went_back.add(cur)
        self.resumed_since.pop(cur, None)
        self.first_iteration.setdefault(cur, number)
        row.last_iteration = number
        row.iteration_times.append((number, float(iteration.group(3))))

    def _event(self, m, when: dt.datetime | None) -> None:  # noqa: ANN001 - re.Match
        cur, row = self.cur, self.rows[self.cur]
        parts = m.group(3).rsplit("_", 2)
        if len(parts) == 3 and parts[1].isdigit() and m.group(4).isdigit():
            self.group_rank[parts[1]] = _count(m.group(4))
        # NVRx stamps its events in UTC and its log lines in the host's local time: the line carrying both gives
        # the host's offset, so that a restart time never mixes the two.
        event_time = dt.datetime.strptime(m.group(5), "%Y-%m-%d %H:%M:%S.%f")
        if self.utc_offset is None and when is not None:
            quarters = round((when - event_time).total_seconds() / 900.0)  # offsets are whole quarter hours
            self.utc_offset = dt.timedelta(seconds=900 * quarters)
        event_time += self.utc_offset or dt.timedelta(0)
        if m.group(2) == "worker_start_completed" and _count(m.group(1)) == cur and row.started is None:
            row.started = iso(event_time)
            if cur - 1 in self.detected:
                self.rows[cur - 1].restart_s = round((event_time - self.detected[cur - 1]).total_seconds(), 3)
        elif m.group(2) == "failure_detected" and cur not in self.detected:
            self.detected[cur] = event_time

    def _all_failures(self, line: str) -> None:
        task = ll.SRUN_TASK.match(line)
        # NVRx's line names no launcher: the global rank is known when one launcher logs here
        known = self.nproc is not None and len(self.group_rank) <= 1
        for local, code in ll.NVRX_FAILURE.findall(line):
            rank = next(iter(self.group_rank.values()), 0) * self.nproc + _count(local) if known else None
            key = (task.group(1) if task else None, _count(local))
            self.exit_lines[self.cur].append(_Exit(key, _count(code), rank, False))

    def _global_rank(self, line: str, local_rank: int) -> int:
        """The global rank of the worker torch's launcher reports on ``line``: its launcher's group rank (known from
        NVRx's events) times the ranks per node plus its local rank; the local rank where the launcher is not known
        (torchrun, one node: the same number)."""
        glog = ll.TORCH_GLOG.match(line)  # group 4: the pid of the launcher that logged it
        if glog is None or self.nproc is None or glog.group(4) not in self.group_rank:
            return local_rank
        return self.group_rank[glog.group(4)] * self.nproc + local_rank

    def _detect(self, row: CycleRow, how: str, rank: int | None, when: dt.datetime | None) -> None:
        row.detected_by, row.detected_on_rank, row.detected_at = how, rank, iso(when)
        if when and self.cur not in self.detected:
            self.detected[self.cur] = when

    def _exit(self, m, line: str, when: dt.datetime | None) -> None:  # noqa: ANN001 - re.Match
        row = self.rows[self.cur]
        code, local = _count(m.group(1)), _count(m.group(2))
        how = _exit_how(code)
        row.exits.append(f"local rank {local} {how}")
        task = ll.SRUN_TASK.match(line)
        global_rank = self._global_rank(line, local)
        key = (task.group(1) if task else None, local)
        self.exit_lines.setdefault(self.cur, []).append(_Exit(key, code, global_rank, row.detected_by is None))
        if row.exit_code is None:
            row.exit_code = code
            if row.detected_by is None:
                self._detect(row, f"rank {how}", global_rank, when)

    def _rank_or_monitor(self, line: str, when: dt.datetime | None, launcher: bool) -> None:
        row = self.rows[self.cur]
        if launcher and row.detected_by is None and (found := _detection(line)):
            rank = ll.NVRX_MONITOR_RANK.search(line)
            self._detect(row, found[0], _count(rank.group(1)) if rank else None, when)
            row.open_s = found[1]
        elif launcher and (m := ll.TORCH_EXITCODE.search(line)):
            self._exit(m, line, when)
        elif m := ll.WORKLOAD_INJECTED.search(line):
            row.injected.append(f"{m.group(1)} at step {_count(m.group(2))} on rank {_count(m.group(3))}")
        elif m := ll.RESUMED.search(line):
            row.resumed_from = self.resumed_since[self.cur] = _count(m.group(1) or m.group(2))
            # The cycle's workers began there if no iteration before it was at or below it (a rank's late line).
            if row.resumed_from_first is None and self.cur not in self.went_back:
                if self.first_iteration.get(self.cur, row.resumed_from + 1) > row.resumed_from:
                    row.resumed_from_first = row.resumed_from
        elif m := ll.SAVED.search(line):
            if (step := _count(m.group(1) or m.group(2))) not in row.checkpoints:
                row.checkpoints.append(step)
        elif m := ll.WORKLOAD_FINISHED.search(line):
            row.finished_step = _count(m.group(1))
        elif m := ll.WORKLOAD_INPROCESS.search(line):
            row.inprocess_restarts = max(row.inprocess_restarts, _count(m.group(1)))
        else:
            self._straggler_or_signal(line, row, when)

    def _straggler_or_signal(self, line: str, row: CycleRow, when: dt.datetime | None) -> None:
        if (m := ll.MB_STRAGGLERS.search(line)) and line.endswith("}"):  # Megatron Bridge's whole line, not a quote
            kind = "relative" if m.group(1).startswith("have") else "individual"
            for rank, node in ll.MB_STRAGGLER_ID.findall(line):
                self.first_straggler.setdefault(self.cur, _count(rank))
                if (found := f"rank {_count(rank)} on node {node} ({kind})") not in row.stragglers:
                    row.stragglers.append(found)
        elif (m := ll.MB_SIGNAL_EXIT.search(line)) and row.detected_by is None:
            row.detected_by = SIGNAL_EXITED
            row.detected_at = iso(dt.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S"))
        elif ll.MB_STRAGGLER_STOP.search(line) and row.detected_by is None:
            # Every rank logs it; the cycle ends with a save and exit 0.
            row.detected_by = STRAGGLER_STOPPED  # the rank: the first one rank 0 reported (after the loop)
            row.detected_at = iso(when)

    def finish(self) -> AttemptReport:
        """After the last line: what can only be decided with the whole log read."""
        rows = self.rows
        for cycle, when in self.detected.items():
            rows[cycle].detected_at = rows[cycle].detected_at or iso(when)
        for cycle, exits in self.exit_lines.items():  # a rank's own lines may follow the agent's exit line
            _name_the_cause(rows[cycle], exits, self.peer_lost.get(cycle, set()))
        for cycle, rank in self.first_straggler.items():  # the ranks' stop line may come before rank 0's report
            if rows[cycle].detected_by == STRAGGLER_STOPPED:
                rows[cycle].detected_on_rank = rank
        for row in rows.values():
            if not self.launched:  # a plain interpreter: no launcher wrote a line, the workload's is the only evidence
                row.finished = row.finished_step is not None
            elif row.detected_by in (STRAGGLER_STOPPED, SIGNAL_EXITED):  # the workers exit 0, training did not end
                row.finished = False
            if row.iteration_times:
                row.iteration_ms = round(sum(ms for _, ms in row.iteration_times) / len(row.iteration_times), 3)
        for cycle, lines in self.dumps.items():
            stacks = rank_stacks(lines)
            rows[cycle].stacks = [stack.summary() for stack in stacks]
            outside = [stack for stack in stacks if stack.collective() is None]
            rows[cycle].outside_collective = [stack.label() for stack in outside]
            rows[cycle].outside_ranks = [stack.rank for stack in outside if stack.rank is not None]
        # Without a launcher's stamps, first and last are training_log lines: their span is not the wall time.
        first, last = self.first, self.last
        wall = round((last - first).total_seconds(), 3) if first and last and self.stamped else None
        skipped = [f"{self.log or 'log'}: skipped {self.bad} unreadable line(s), the first {self.first_bad}"]
        return AttemptReport(
            attempt=self.attempt,
            log=self.log,
            first=iso(first),
            last=iso(last),
            wall_s=wall,
            cycles=[rows[k] for k in sorted(rows)],
            launcher_stamped=self.stamped,
            skipped=skipped if self.bad else [],
        )


def parse_attempt(text: str, attempt: int = 0, log: str = "") -> AttemptReport:
    """The cycles of one launcher log (several launchers of a multi-node step may share it)."""
    reader = _Reader(text, attempt, log)
    for number, line in enumerate(text.splitlines(), 1):
        reader.read(number, line)
    return reader.finish()


def _name_the_cause(row: CycleRow, exits: list[_Exit], peer_lost: set[tuple[str | None, int]]) -> None:
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


class LauncherVerdict(NamedTuple):
    """What the launchers' own lines of one step say: the requeue guard's reading on the batch host
    (core/sbatch/step_verdict.sh, spare_nodes.sh), made here from the same lines (tests hold the two to one answer)."""

    no_restart: str | None  # NVRx's reason, when a launcher said the job must not be restarted
    exits: tuple[int, ...]  # each launcher's exit code, in log order


def launcher_verdict(text: str) -> LauncherVerdict:
    """The no-restart reason and the launchers' exit codes in ``text``, from launcher lines only."""
    reason, exits = None, []
    for line in text.splitlines():
        if not ll.is_launcher_line(line):
            continue
        if reason is None and (m := ll.NVRX_NO_RESTART.search(line)):
            reason = m.group(1)
        if (m := ll.NVRX_AGENT_EXIT.search(line)) and len(m.group(1)) <= _MAX_DIGITS:
            exits.append(int(m.group(1)))
    return LauncherVerdict(reason, tuple(exits))
