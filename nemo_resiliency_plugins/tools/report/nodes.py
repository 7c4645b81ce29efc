"""``nemo-resiliency report`` on Slurm: which node each fault was on.

Why: a rank number does not say which machine to drain. A lost node is not even a rank's fault: its launcher dies
with it, srun ends the step, and what the surviving launchers log is their own workers stopped by SIGTERM (so the
launcher's view alone blames a healthy rank). The node comes from three things the job already writes:

* NeMo-Run's batch script runs with ``set -evx``: each attempt's trace shows
  ``++ scontrol show hostnames <nodelist>`` at its start; that line also separates the attempts in the batch log
  (a requeued job appends to the same file). Slurm gives task *i* of a one-launcher-per-node step the *i*-th node.
* srun's ``srun: error: <node>: task <i>: Killed``: a launcher task killed outright. ft_launcher never ends that
  way on its own: a line before the guard stopped the step is a node lost; one after the spare block stopped a
  step that outlived training is a node that froze (its task never ended); one after the guard's silent-node
  watchdog stopped the step is that watchdog's doing (its verdict line names the node).
* the requeue guard's verdict lines (``core/sbatch/requeue_guard.sh``): a node that went silent (frozen) after a
  section timeout elsewhere; the node srun named first.
* NVRx's ``infra:<task>(..) ... Assigned active rank <group>`` lines: which launcher (task, hence node) holds which
  group of ranks in each cycle, so a rank's exit or section timeout is placed on its node.

A LocalExecutor or Docker job runs on one host: no node is named there.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from nemo_resiliency_plugins.job import log_lines as ll

if TYPE_CHECKING:
    from nemo_resiliency_plugins.tools.report.model import AttemptReport

#: The most node names one node list may expand to: more than any Slurm job holds (Slurm's own limit on a
#: cluster's nodes is 65533). A longer list in a log is one skipped line, not a list built until memory runs out.
MAX_NODES = 65536


@dataclass(kw_only=True)
class SlurmAttempt:
    """What the batch log says about one Slurm attempt (one run of the batch script)."""

    nodes: list[str]
    srun_errors: list[tuple[str, str, str]] = field(default_factory=list)  # (node, task(s), what)
    guard: list[str] = field(default_factory=list)
    # srun's "Killed" tasks as (node, task(s), what, why): why is "lost", or "frozen" when the spare block had
    # stopped a step that outlived training, or "stopped" when the guard's watchdog had (read in the log's order)
    killed: list[tuple[str, str, str, str]] = field(default_factory=list)


def expand_nodelist(nodelist: str) -> list[str]:
    """Slurm's compressed node list (``nrp-node[1-2,4],gpu07``) as names, in Slurm's order; [] when it has a form
    this does not read (several bracket groups in one name). ValueError when it names more than
    :data:`MAX_NODES` nodes or a number longer than any node name's."""
    names: list[str] = []
    for part in re.findall(r"[^,\[]+(?:\[[^\]]*\])?[^,\[]*", nodelist):
        m = re.fullmatch(r"([^\[\]]*)\[([0-9,-]+)\]([^\[\]]*)", part)
        if m is None:
            if "[" in part or "]" in part:
                return []
            names.append(part)
            continue
        prefix, ranges, suffix = m.groups()
        for item in ranges.split(","):
            lo, _, hi = item.partition("-")
            width = len(lo)
            if not lo or len(lo) > 18 or len(hi) > 18:
                raise ValueError(f"node range {item!r} is not one Slurm writes")
            if int(hi or lo) - int(lo) + 1 + len(names) > MAX_NODES:
                raise ValueError(f"node list {nodelist[:80]!r} names more than {MAX_NODES} nodes")
            for number in range(int(lo), int(hi or lo) + 1):
                names.append(f"{prefix}{number:0{width}d}{suffix}")
    return names


def slurm_attempts(batch_text: str, skipped: list[str] | None = None) -> list[SlurmAttempt]:
    """The attempts of a NeMo-Run Slurm batch log, in order (empty when the log has no attempt start line). A node
    list this cannot expand starts an attempt with no node names, said once in ``skipped``."""
    attempts: list[SlurmAttempt] = []
    for line in batch_text.splitlines():
        if m := ll.SBATCH_HOSTNAMES.fullmatch(line):
            try:
                nodes = expand_nodelist(m.group(2))
            except ValueError as exc:
                nodes = []
                if skipped is not None:
                    skipped.append(f"batch log: skipped a node list ({exc})")
            attempts.append(SlurmAttempt(nodes=nodes))
        elif not attempts:
            continue
        elif m := ll.SRUN_ERROR.fullmatch(line):
            attempts[-1].srun_errors.append((m.group(1), m.group(2), m.group(3)))
            if m.group(3).strip() == "Killed":
                stops = [g for g in attempts[-1].guard if ll.GUARD_STOPPING.fullmatch(g)]
                why = "lost" if not stops else "frozen" if ll.GUARD_FROZEN_STOP.fullmatch(stops[0]) else "stopped"
                attempts[-1].killed.append((m.group(1), m.group(2), m.group(3), why))
        elif m := ll.GUARD.fullmatch(line):
            attempts[-1].guard.append(m.group(1))
    return attempts


def launcher_tasks(log_text: str) -> tuple[dict[int, dict[int, int]], int | None]:
    """Per cycle, each node group's launcher task (NVRx's rank assignment), and the ranks per node. The cycle is
    the line's own rendezvous round (NVRx runs one round per cycle): torch's ``restart_count=`` line for the same
    cycle can come after it, and a spare that joined late counts its own restarts from its first round."""
    tasks: dict[int, dict[int, int]] = {}
    nproc = None
    for line in log_text.splitlines():
        # A launcher's line only (a rank may print the line too); a longer number is not a count.
        if ll.is_launcher_line(line) and (m := ll.NVRX_ASSIGNED.search(line)) and max(map(len, m.groups())) <= 9:
            tasks.setdefault(int(m.group(3)), {})[int(m.group(2))] = int(m.group(1))
        elif (m := ll.TORCH_NPROC.fullmatch(line)) and len(m.group(1)) <= 9:
            nproc = int(m.group(1))
    return tasks, nproc


def place(report: AttemptReport, log_text: str, slurm: SlurmAttempt) -> None:
    """Set ``node`` (and ``node_fault`` where the node itself failed) on the cycles of one Slurm attempt."""
    nodes = slurm.nodes
    tasks, nproc = launcher_tasks(log_text)

    def node_of(rank: int, cycle: int) -> str | None:
        group = rank // (nproc or 1)
        task = tasks.get(cycle, {}).get(group, group)
        return nodes[task] if 0 <= task < len(nodes) else None

    for row in report.cycles:
        if row.detected_on_rank is None or not nodes:
            continue
        row.node = node_of(row.detected_on_rank, row.cycle)
    # A hang inside a collective (diagnostics=True): every waiting rank timed out too, and the rank that detected
    # it is any of them; the ranks whose stack dumps are outside the collective are the ones waited for. When they
    # are on one node, that is the fault's node (a rank's fault, not the node's: node_fault stays None). The guard's
    # nrp_hung_rank_node (core/sbatch/step_verdict.sh) reads the same dumps to exclude it.
    for row in report.cycles:
        if row.outside_ranks and len(row.outside_ranks) < len(row.stacks) and nodes:
            held = {node_of(rank, row.cycle) for rank in row.outside_ranks}
            if len(held) == 1 and None not in held:
                row.node = held.pop()
    # A node-level verdict belongs to the cycle the node's failure ended: the last unfinished cycle in which the
    # node's launcher held ranks (a spare node's job trains on after a loss, in later cycles of the same attempt),
    # or, without NVRx's assignment lines, the attempt's last unfinished cycle.
    ended = [row for row in report.cycles if not row.finished]
    if not ended:
        return
    for line in slurm.guard:
        if m := ll.GUARD_SILENT.fullmatch(line):
            row = ended[-1]
            row.node, row.node_fault = m.group(1), "went silent" + (f" ({m.group(2)})" if m.group(2) else "")
            return
    placed: set[int] = set()
    for node, task, what, why in slurm.killed:
        if why == "stopped":
            continue  # the guard's watchdog stopped the step: the tasks srun reports killed are its doing
        held = [
            row for row in ended if task.isdigit() and len(task) <= 9 and int(task) in tasks.get(row.cycle, {}).values()
        ]
        candidates = held if tasks else [ended[-1]]
        row = next((r for r in reversed(candidates) if r.cycle not in placed), None)
        if row is None:
            continue  # a spare that never trained, or a cycle already placed
        placed.add(row.cycle)
        if why == "frozen":
            fault = f"froze (its task outlived training; the spare block stopped it: srun: error: {node}: task {task})"
        else:
            fault = f"lost (srun: error: {node}: task {task}: {what})"
        row.node, row.node_fault = node, fault


def place_all(
    attempts: list[AttemptReport], batch_text: str, logs: dict[str, str], skipped: list[str] | None = None
) -> None:
    """Name the nodes of a Slurm job's faults, from its batch logs' text and each attempt's log text (by path)."""
    slurm = slurm_attempts(batch_text, skipped)
    for report in attempts:
        if report.attempt < len(slurm) and report.log in logs:
            place(report, logs[report.log], slurm[report.attempt])


__all__ = ["SlurmAttempt", "expand_nodelist", "launcher_tasks", "place", "place_all", "slurm_attempts"]
