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
from pathlib import Path
from typing import TYPE_CHECKING

from nemo_resiliency_plugins.tools.report_lines import is_launcher_line

if TYPE_CHECKING:
    from nemo_resiliency_plugins.tools.report import AttemptReport

_HOSTNAMES = re.compile(r"\+\+ scontrol show hostnames ('?)([^' ]+)\1")  # fullmatch; bash quotes it if needed
_SRUN_ERROR = re.compile(r"srun: error: ([A-Za-z0-9._-]+): tasks? ([0-9,-]+): (.+)")  # fullmatch
_GUARD = re.compile(r"nemo-resiliency-plugins: (.+)")  # fullmatch (bash's trace of the echo starts with "+ ")
_SILENT = re.compile(r"node ([A-Za-z0-9._-]+) went silent(?:: (.*?))?(?:: the requeued job .*)?")  # fullmatch
_STOPPING = re.compile(r".*stopping step \S+.*")  # fullmatch: the guard ended the step itself
_FROZEN_STOP = re.compile(r".*\(a task on a frozen node\): stopping step .*")  # fullmatch: core/sbatch/spare_nodes.sh
_ASSIGNED = re.compile(r"infra:(\d+)\(\d+\)\].*\bAssigned active rank (\d+) \(round=(\d+)\)")
_NPROC = re.compile(r"\s*nproc_per_node\s*:\s*(\d+)\s*")  # fullmatch: the launch config torch's agent prints


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
    this does not read (several bracket groups in one name)."""
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
            for number in range(int(lo), int(hi or lo) + 1):
                names.append(f"{prefix}{number:0{width}d}{suffix}")
    return names


def slurm_attempts(batch_text: str) -> list[SlurmAttempt]:
    """The attempts of a NeMo-Run Slurm batch log, in order (empty when the log has no attempt start line)."""
    attempts: list[SlurmAttempt] = []
    for line in batch_text.splitlines():
        if m := _HOSTNAMES.fullmatch(line):
            attempts.append(SlurmAttempt(nodes=expand_nodelist(m.group(2))))
        elif not attempts:
            continue
        elif m := _SRUN_ERROR.fullmatch(line):
            attempts[-1].srun_errors.append((m.group(1), m.group(2), m.group(3)))
            if m.group(3).strip() == "Killed":
                stops = [g for g in attempts[-1].guard if _STOPPING.fullmatch(g)]
                why = "lost" if not stops else "frozen" if _FROZEN_STOP.fullmatch(stops[0]) else "stopped"
                attempts[-1].killed.append((m.group(1), m.group(2), m.group(3), why))
        elif m := _GUARD.fullmatch(line):
            attempts[-1].guard.append(m.group(1))
    return attempts


def launcher_tasks(log_text: str) -> tuple[dict[int, dict[int, int]], int | None]:
    """Per cycle, each node group's launcher task (NVRx's rank assignment), and the ranks per node. The cycle is
    the line's own rendezvous round (NVRx runs one round per cycle): torch's ``restart_count=`` line for the same
    cycle can come after it, and a spare that joined late counts its own restarts from its first round."""
    tasks: dict[int, dict[int, int]] = {}
    nproc = None
    for line in log_text.splitlines():
        if is_launcher_line(line) and (m := _ASSIGNED.search(line)):  # a rank may print the line too
            tasks.setdefault(int(m.group(3)), {})[int(m.group(2))] = int(m.group(1))
        elif m := _NPROC.fullmatch(line):
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
    ended = [row for row in report.cycles if row.finished_step is None]
    if not ended:
        return
    for line in slurm.guard:
        if m := _SILENT.fullmatch(line):
            row = ended[-1]
            row.node, row.node_fault = m.group(1), "went silent" + (f" ({m.group(2)})" if m.group(2) else "")
            return
    placed: set[int] = set()
    for node, task, what, why in slurm.killed:
        if why == "stopped":
            continue  # the guard's watchdog stopped the step: the tasks srun reports killed are its doing
        held = [row for row in ended if task.isdigit() and int(task) in tasks.get(row.cycle, {}).values()]
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


def place_all(attempts: list[AttemptReport], job_dir: Path) -> None:
    """Name the nodes of a Slurm job's faults (nothing for a job with no NeMo-Run batch log: one host)."""
    batches = sorted(job_dir.glob("sbatch_*.out"))
    if not batches:
        return
    slurm = slurm_attempts("\n".join(p.read_text(errors="replace") for p in batches))
    for report in attempts:
        if report.attempt < len(slurm) and report.log:
            place(report, Path(report.log).read_text(errors="replace"), slurm[report.attempt])


__all__ = ["SlurmAttempt", "expand_nodelist", "launcher_tasks", "place", "place_all", "slurm_attempts"]
