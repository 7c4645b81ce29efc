"""``nemo-resiliency report`` on the logs of real jobs of this suite (issue 36, first part).

The fixtures are the files four real jobs left (``tests/fixtures/job-logs/*.tar.gz``: NeMo-Run's ``_CONFIG``, the
launcher logs, the Slurm batch log), taken from one run of the suite on 2026-12-05 (commit 2acb9a8):

* ``local-ipr-ft-raise-kill``: tests/smoke/test_inprocess_restart_local.py's raise-then-kill job (LocalExecutor,
  FaultTolerancePlugin + InProcessRestartPlugin): rank 1 raises at step 13 (handled in-process), then is
  SIGKILLed at step 17 (ft_launcher restarts the workers);
* ``local-rerun-nan-ft``: tests/smoke/test_rerun_local.py's job: a NaN at step 13 on rank 1, the re-run state
  machine exits 17, ft_launcher restarts;
* ``slurm-two-nodes-lost-then-frozen``: tests/slurm/test_fault_tolerance_slurm.py's 2-node job: every process of
  one node SIGKILLed (requeue, node excluded), then a node SIGSTOPped (the healthy node's step section times out,
  the guard excludes the silent node), then the run that finishes;
* ``slurm-crash-loop``: the same file's crash loop: rank 1 killed at step 13 in every cycle, NVRx's progress
  tracker stops it after one cycle without progress;
* ``local-ft-kill-then-hang`` (a later run, commit 64ca2bc, once the reference workload printed Megatron Bridge's
  training_log line): tests/smoke/test_fault_tolerance_local.py's kill-then-hang job: rank 1 SIGKILLed at step 13,
  then, resumed from step 10, hung at step 17 (the step section timeout), resumed from step 15, finished.

* ``local-straggler-stop`` and ``slurm-preempt-plain-interpreter`` (runs of commits 70d1655 and 3267d48): the
  straggler file's stop job (torchrun, rank 1 three times slower, ``stop_if_detected``), and the preemption file's
  Megatron Bridge ``bash -c`` job (one rank run by a plain interpreter: saved at the signal, requeued, finished).

* ``local-rerun-nan-ft-late-resume-line`` and ``local-ipr-ft-raise-kill-late-kill-line`` (the project CI's run of
  commit 29a0657): the same two local jobs, where each rank's lines reached the log late through torch's tail
  threads (they poll each rank's file): rank 0's resume line after rank 1's first iteration after it, and the
  launcher's lines about the kill before rank 1's last lines.

* ``slurm-two-node-crash-loop`` (a run of commit a23cd9e): the same file's 2-node crash loop, one rank per node,
  two launchers' lines in one log: the killed rank's launcher (on the second node) names it by its local rank 0.

* ``slurm-spare-lost-then-frozen`` (a run of the Slurm FT module on 2026-12-07, commit 6e55d69 + the frozen spare
  case): the 2-node job with two spare nodes: nrp-node3 (task 2) SIGKILLed after the step-5 save, a spare
  (nrp-node2, task 1) trains in its place, and freezes (SIGSTOP) after the step-15 save; the other spare (nrp-node4)
  trains to the end, and the spare block stops the step the frozen task held.

* ``slurm-spare-assignment-before-restart-line`` (a loaded fresh-clone CI run of commit 7430cb0 on 2026-12-07): the
  same spare job, nrp-node4 (task 3) lost, then nrp-node2 (task 1) frozen; here NVRx's "Assigned active rank 1
  (round=1)" line for the spare came before torch's "restart_count=1" line of that cycle.

* ``experiment-ft-kill-then-hang`` (the project CI's run of commit 29a0657): the kill-then-hang job as NeMo-Run saved
  its whole experiment (``$NEMORUN_HOME/experiments/<title>/<id>`` with ``_CONFIG`` and ``_TASKS``), so that the
  report reads the job's plugins for the comparison with ``plan``.

Each field the report gives is checked against what the test injected.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import re
import tarfile
from pathlib import Path

import pytest

from nemo_resiliency_plugins.job import log_lines as ll
from nemo_resiliency_plugins.tools.cli import main
from nemo_resiliency_plugins.tools.report import parse_attempt, report_experiment
from nemo_resiliency_plugins.tools.report.nodes import expand_nodelist
from nemo_resiliency_plugins.tools.report.plan import compare, fault_class, saved_plugins
from nemo_resiliency_plugins.tools.report.timeline import cycle_phases

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "job-logs"


def unpack(name: str, tmp_path: Path) -> Path:
    with tarfile.open(FIXTURES / f"{name}.tar.gz") as tar:
        tar.extractall(tmp_path, filter="data")
    return tmp_path / name


def test_in_process_recovery_then_a_killed_rank(tmp_path):
    (job,) = report_experiment(unpack("local-ipr-ft-raise-kill", tmp_path))
    assert (job.requeues, job.restarts, job.finished) == (0, 1, True)
    first, second = job.rows
    assert first.injected == ["raise at step 13 on rank 1", "kill at step 17 on rank 1"]
    assert first.inprocess_restarts == 1  # the raise: handled inside the running processes
    assert first.resumed_from == 10  # ... from the step-10 checkpoint
    assert first.checkpoints == [5, 10, 15]
    assert (first.detected_by, first.detected_on_rank, first.exit_code) == ("rank killed by signal 9", 1, -9)
    assert first.exits == ["local rank 1 killed by signal 9"]  # the raise never reached the launcher
    assert 0 < first.restart_s < 60  # NVRx's worker_start_completed after the exit line, one launcher clock
    assert (second.cycle, second.resumed_from, second.checkpoints, second.finished_step) == (1, 15, [20], 20)
    assert second.detected_by is None


def test_rerun_exit_code_restarted_by_the_launcher(tmp_path):
    (job,) = report_experiment(unpack("local-rerun-nan-ft", tmp_path))
    first, second = job.rows
    assert first.injected == ["nan at step 13 on rank 1"]
    assert (first.detected_by, first.exit_code) == ("rank exited with code 17", 17)
    assert first.checkpoints == [5, 10] and first.resumed_from is None
    assert (second.resumed_from, second.checkpoints, second.finished_step) == (10, [15, 20], 20)
    assert (job.requeues, job.restarts, job.finished) == (0, 1, True)


def test_a_ranks_late_resume_line_is_not_an_in_process_go_back(tmp_path):
    """Rank 1 printed "RESUMED from step 10" and iteration 11 before rank 0's "RESUMED from step 10" reached the
    log: the same resume, not a second one (CI of 29a0657 counted 4 iterations trained twice instead of 3)."""
    (job,) = report_experiment(unpack("local-rerun-nan-ft-late-resume-line", tmp_path))
    nan, last = job.rows
    assert (nan.last_iteration, last.resumed_from_first, last.recomputed_inside) == (13, 10, 0)
    assert job.iterations() == (20, 3)  # 11-13 trained again after the restart


def test_launcher_lines_before_the_killed_ranks_last_lines(tmp_path):
    """The launcher's report of the SIGKILL and its restart decision came before rank 1's iteration 17 and its
    kill marker: the cycle still ends with the kill, and its iterations count once."""
    (job,) = report_experiment(unpack("local-ipr-ft-raise-kill-late-kill-line", tmp_path))
    first, second = job.rows
    assert (first.detected_by, first.exit_code, first.inprocess_restarts) == ("rank killed by signal 9", -9, 1)
    assert first.injected == ["raise at step 13 on rank 1", "kill at step 17 on rank 1"]
    # The raise at 13 went back to 10 inside the cycle (11-13 twice); the kill after 17 back to 15 (16-17 twice).
    assert (first.last_iteration, first.recomputed_inside, second.resumed_from_first) == (17, 3, 15)
    assert job.iterations() == (20, 5)


def _shift_local_stamps(text: str, hours: int) -> str:
    """The log as a launcher host ``hours`` east of UTC would have written it: NVRx's and torch's line stamps are
    local time, NVRx's event times ("Time: ... UTC") stay UTC."""

    def nvrx(m: re.Match) -> str:
        when = dt.datetime.strptime(m.group(0), "%Y-%m-%d %H:%M:%S,%f") + dt.timedelta(hours=hours)
        return when.strftime("%Y-%m-%d %H:%M:%S,%f")[:-3]

    def glog(m: re.Match) -> str:
        when = dt.datetime.strptime(f"2026{m.group(2)} {m.group(3)}", "%Y%m%d %H:%M:%S.%f") + dt.timedelta(hours=hours)
        return m.group(1) + when.strftime("%m%d %H:%M:%S.%f")

    text = re.sub(r"(?m)^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}", nvrx, text)
    return re.sub(r"(?m)^([IWEF])(\d{4}) (\d\d:\d\d:\d\d\.\d+)", glog, text)


def test_restart_time_of_a_launcher_host_outside_utc(tmp_path):
    """NVRx stamps its cycle events in UTC and its log lines in local time: on a host at UTC+8 the restart time
    (failure seen -> the next cycle's workers started) is the same as at UTC, not 8 hours off."""
    (log,) = unpack("local-ipr-ft-raise-kill", tmp_path).glob("**/combined.log")
    text = log.read_text()
    at_utc = parse_attempt(text).cycles
    east = _shift_local_stamps(text, 8)
    assert east != text and "Time: " + at_utc[1].started[:10] in east  # the event times themselves are unchanged
    shifted = parse_attempt(east).cycles
    assert 0 < shifted[0].restart_s == at_utc[0].restart_s < 60
    # Every time the report gives is the log's own local time.
    started = dt.datetime.fromisoformat(shifted[1].started) - dt.datetime.fromisoformat(at_utc[1].started)
    assert started == dt.timedelta(hours=8)


def test_two_node_job_a_lost_node_then_a_frozen_node(tmp_path):
    (job,) = report_experiment(unpack("slurm-two-nodes-lost-then-frozen", tmp_path))
    assert (job.requeues, job.restarts, job.finished) == (2, 0, True)
    lost, frozen, last = job.rows
    assert [row.attempt for row in job.rows] == [0, 1, 2]
    # Attempt 0: the killed node's processes are gone; what this log holds is srun ending the healthy node's step.
    assert lost.checkpoints == [5] and lost.exit_code == -15
    # Attempt 1: resumed from step 5; the healthy node's step section timed out (NVRx's own figure, >= 6 s).
    assert frozen.resumed_from == 5 and frozen.checkpoints == [10]
    assert frozen.detected_by.startswith("section 'step' timeout") and frozen.open_s >= 6
    assert (last.resumed_from, last.checkpoints, last.finished_step) == (10, [15, 20], 20)
    # The guard's verdicts name both nodes, in order, and the end.
    assert job.guard[0].startswith("node nrp-node2 failed first") and "excludes nrp-node2" in job.guard[0]
    assert any(line.startswith("node nrp-node4 went silent") for line in job.guard), job.guard
    assert job.guard[-1].endswith("finished, not requeued")


def test_two_node_job_names_the_lost_and_the_frozen_node(tmp_path, capsys):
    """The launchers' view of attempt 0 is their own rank stopped by SIGTERM on the healthy node; srun's line says
    the other node's launcher task was killed outright: the node was lost (the test SIGKILLed every process of
    nrp-node2). Attempt 1: the guard found nrp-node4 silent (the test SIGSTOPped it). Attempt 2: nothing failed."""
    (job,) = report_experiment(unpack("slurm-two-nodes-lost-then-frozen", tmp_path))
    lost, frozen, last = job.rows
    assert (lost.detected_by, lost.detected_on_rank) == ("rank killed by signal 15", 0)  # the consequence
    assert lost.node == "nrp-node2"
    assert lost.node_fault == "lost (srun: error: nrp-node2: task 1: Killed)"
    assert frozen.node == "nrp-node4"
    assert frozen.node_fault == "went silent (no launcher line after a section timeout on another node)"
    assert (last.node, last.node_fault) == (None, None)
    with pytest.raises(SystemExit) as done:
        main(["report", str(tmp_path / "slurm-two-nodes-lost-then-frozen"), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert done.value.code == 0
    assert [row["node"] for a in out[0]["attempts"] for row in a["cycles"]] == ["nrp-node2", "nrp-node4", None]
    with pytest.raises(SystemExit):
        main(["report", str(tmp_path / "slurm-two-nodes-lost-then-frozen")])
    words = " ".join(re.findall(r"[\w'.-]+", capsys.readouterr().out))  # the table's cells wrap: its words
    assert "node lost launchers saw rank killed by signal 15" in words, words


def test_a_spare_job_names_the_lost_node_and_the_frozen_node_each_on_its_own_cycle(tmp_path):
    """One Slurm attempt, three cycles: srun's "Killed" line for task 2 came before any stop of ours (a node lost,
    while it held ranks in cycle 0); the one for task 1 came after the spare block stopped a step that outlived
    training (a node that froze, while it held ranks in cycle 1). The launchers saw a peer's death and a section
    timeout on rank 0's node: the nodes are what failed."""
    (job,) = report_experiment(unpack("slurm-spare-lost-then-frozen", tmp_path))
    assert (job.requeues, job.restarts, job.finished) == (0, 2, True)
    lost, frozen, last = job.rows
    assert (lost.node, lost.node_fault) == ("nrp-node3", "lost (srun: error: nrp-node3: task 2: Killed)")
    assert frozen.node == "nrp-node2" and frozen.node_fault.startswith("froze (its task outlived training"), frozen
    assert frozen.detected_by.startswith("section 'step' timeout") and frozen.detected_on_rank == 0
    assert (last.resumed_from, last.finished_step, last.node, last.node_fault) == (15, 20, None, None)
    assert [fault_class(row, rerun_check=False) for row in job.rows] == ["node_loss", "node_loss", None]


def test_a_spare_job_s_nodes_follow_nvrx_s_rounds_not_torch_s_restart_lines(tmp_path):
    """The rank assignment of round 1 was logged before the cycle's restart_count=1 line: read by that line, it
    fell into cycle 0 and the lost node's task held no cycle (the report put the frozen node on cycle 0 and the
    lost one nowhere; a CI failure). NVRx's own round number places each assignment."""
    (job,) = report_experiment(unpack("slurm-spare-assignment-before-restart-line", tmp_path))
    lost, frozen, last = job.rows
    assert (lost.node, lost.node_fault) == ("nrp-node4", "lost (srun: error: nrp-node4: task 3: Killed)")
    assert frozen.node == "nrp-node2" and frozen.node_fault.startswith("froze (its task outlived training"), frozen
    assert (last.finished_step, last.node, last.node_fault) == (20, None, None)


def test_a_ranks_fault_is_placed_on_the_node_its_launcher_ran_on(tmp_path):
    # Rank 1 (one rank per node) is NVRx's node group 1, whose launcher logged "infra:1": srun's task 1, the second
    # node of nrp-node[3-4]; srun's own line agrees ("nrp-node4: task 1: Exited with exit code 93").
    (job,) = report_experiment(unpack("slurm-two-node-crash-loop", tmp_path))
    assert [(row.detected_on_rank, row.node, row.node_fault) for row in job.rows] == [(1, "nrp-node4", None)] * 2
    # One node, two ranks per node: rank 1 is on the only node.
    (one,) = report_experiment(unpack("slurm-crash-loop", tmp_path))
    assert [row.node for row in one.rows] == ["nrp-node1"] * 2
    # A LocalExecutor job names no node.
    (local,) = report_experiment(unpack("local-ft-kill-then-hang", tmp_path))
    assert [row.node for row in local.rows] == [None] * len(local.rows)


def test_a_lost_or_silent_node_is_plans_node_loss_whatever_the_launchers_saw(tmp_path):
    (job,) = report_experiment(unpack("slurm-two-nodes-lost-then-frozen", tmp_path))
    lost, frozen, last = job.rows
    # The launchers saw a SIGTERM (a dead process to plan) and a section timeout (a hang): the node is what failed.
    assert [fault_class(row, rerun_check=False) for row in job.rows] == ["node_loss", "node_loss", None]
    assert fault_class(dataclasses.replace(lost, node_fault=None), rerun_check=False) == "dead_process"
    assert fault_class(dataclasses.replace(frozen, node_fault=None), rerun_check=False) == "hang"


@pytest.mark.parametrize(
    ("nodelist", "names"),
    [
        ("nrp-node1", ["nrp-node1"]),
        ("nrp-node[1-2]", ["nrp-node1", "nrp-node2"]),
        ("nrp-node[1,3]", ["nrp-node1", "nrp-node3"]),
        ("gpu[08-10],login1", ["gpu08", "gpu09", "gpu10", "login1"]),
        ("rack[1-2]-n[1-2]", []),  # two bracket groups in one name: not read, no node named rather than a wrong one
    ],
)
def test_slurm_node_lists_expand_as_slurm_orders_them(nodelist, names):
    assert expand_nodelist(nodelist) == names


def test_crash_loop_every_cycle_ended_by_the_same_kill(tmp_path):
    (job,) = report_experiment(unpack("slurm-crash-loop", tmp_path))
    assert (job.requeues, job.restarts, job.finished) == (0, 1, False)
    for row in job.rows:
        assert row.injected == ["kill at step 13 on rank 1"]
        assert (row.detected_by, row.detected_on_rank) == ("rank killed by signal 9", 1)
    assert job.rows[1].resumed_from == 10 and job.rows[1].checkpoints == []  # no progress: no new checkpoint
    assert "no-restart code" in job.guard[-1] and "not requeued" in job.guard[-1]


def test_a_kill_on_the_second_node_is_named_by_its_global_rank(tmp_path):
    # torch's launcher says "local_rank: 0"; NVRx's events give that launcher's group rank (1) and the launch config
    # one rank per node: global rank 1, the rank the workload's own marker names.
    (job,) = report_experiment(unpack("slurm-two-node-crash-loop", tmp_path))
    assert (job.requeues, job.restarts, job.finished) == (0, 1, False)
    for row in job.rows:
        assert row.injected == ["kill at step 13 on rank 1"]
        assert (row.detected_by, row.detected_on_rank, row.exits) == (
            "rank killed by signal 9",
            1,
            ["local rank 0 killed by signal 9"],
        )
    assert "step exit code 143" in job.guard[-1] and "not requeued, no node excluded" in job.guard[-1], job.guard


def test_goodput_and_the_iterations_trained_twice(tmp_path, capsys):
    (job,) = report_experiment(unpack("local-ft-kill-then-hang", tmp_path))
    kill, hang, last = job.rows
    # A fault at step N strikes after iteration N: 11-13 and 16-17 were trained again after the resumes.
    assert [row.last_iteration for row in job.rows] == [13, 17, 20]
    assert [row.resumed_from for row in job.rows] == [None, 10, 15]
    assert job.iterations() == (20, 5)
    assert all(row.iteration_ms > 100 for row in job.rows)  # NRP_STEP_TIME=0.15 s per iteration, and then some
    # 20 kept iterations at ~160 ms against the launcher's 86 s: start-up, detection and restarts are the rest.
    assert job.attempts[0].launcher_stamped and 0.02 < job.goodput() < 0.06
    with pytest.raises(SystemExit) as done:
        main(["report", str(tmp_path / "local-ft-kill-then-hang")])
    assert done.value.code == 0
    assert "goodput 3.7% (iterations kept 20, recomputed after faults at least 5;" in " ".join(
        capsys.readouterr().out.split()
    )


_STAMP = ll.NVRX_STAMP  # match: a launcher line's time stamp
_ITERATION = ll.MB_ITERATION  # groups: time, iteration, ms per iteration


def _goodput_from_step_times(logs: list[Path]) -> tuple[float, float]:
    """Goodput from the job's own lines, without the report: the kept iterations' own times (each iteration's last
    training_log line, attempts in order) over the launchers' stamped span of each attempt. Also the margin the
    report's figure may differ by: it takes the mean time of every logged iteration (recomputed ones too) times the
    kept count, so kept x (slowest - fastest iteration) / wall, plus its rounding to 4 places."""
    kept: dict[int, float] = {}
    times: list[float] = []
    wall = 0.0
    for log in logs:
        stamps = []
        for line in log.read_text().splitlines():
            if m := _STAMP.match(line):
                stamps.append(dt.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S").timestamp() + int(m.group(2)) / 1e3)
            if m := _ITERATION.search(line):
                kept[int(m.group(2))] = float(m.group(3))
                times.append(float(m.group(3)))
        wall += stamps[-1] - stamps[0]
    return sum(kept.values()) / 1e3 / wall, len(kept) * (max(times) - min(times)) / 1e3 / wall + 5e-5


@pytest.mark.parametrize(
    ("fixture", "logs"),
    [("local-ft-kill-then-hang", "**/combined.log"), ("slurm-spare-assignment-before-restart-line", "train/log-*.out")],
)
def test_goodput_is_the_one_the_job_s_own_step_times_give(tmp_path, fixture, logs):
    """Issue 36: the report's goodput against the kept iterations' own times over the launchers' wall time (the
    LocalExecutor kill-then-hang job; a one-attempt Slurm job with a spare)."""
    root = unpack(fixture, tmp_path)
    (job,) = report_experiment(root)
    expected, margin = _goodput_from_step_times(sorted(root.glob(logs)))
    assert 0 < expected < 1 and margin < expected / 2, (expected, margin)
    assert abs(job.goodput() - expected) <= margin, (job.goodput(), expected, margin)


def test_the_timeline_draws_each_cycles_phases_from_the_logs(tmp_path, capsys):
    """``report --timeline``: a PNG, and each phase drawn is a span the logs give (kill-then-hang job)."""
    root = unpack("local-ft-kill-then-hang", tmp_path)
    png = tmp_path / "timeline.png"
    with pytest.raises(SystemExit) as done:
        main(["report", str(root), "--timeline", str(png)])
    assert done.value.code == 0 and f"timeline: {png}" in capsys.readouterr().out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    (job,) = report_experiment(root)
    (attempt,) = job.attempts
    kill, hang, last = (dict((n, (b - a).total_seconds()) for n, a, b in cycle_phases(attempt, i)) for i in range(3))
    assert list(kill) == list(hang) == ["start-up", "training", "until detected", "restart"]
    assert list(last) == ["start-up", "training", "after training"]
    # restart: NVRx's own detection -> workers-started span, to the millisecond
    assert (kill["restart"], hang["restart"]) == (job.rows[0].restart_s, job.rows[1].restart_s)
    # The hang: from the last training_log line (whole seconds, so up to 1 s early) to the timeout that caught it,
    # which NVRx fired once the step section had been open for open_s (the section opened one 0.15 s step after
    # that line's iteration at the earliest).
    assert hang["until detected"] - 1 <= job.rows[1].open_s <= hang["until detected"] + 0.15
    with pytest.raises(SystemExit) as done:
        main(["report", str(root), "--json", "--timeline", str(png)])
    assert json.loads(capsys.readouterr().out)[0]["timeline"] == str(png)


def test_each_fault_next_to_what_plans_model_says_it_costs(tmp_path, capsys):
    """The kill and the hang of the local-smoke recipe's job (step timeout 5 s, checks every 1 s, calc_ft_timeouts):
    plan's three parts of each fault's cost for the plugins NeMo-Run saved, and the same parts measured here."""
    root = unpack("experiment-ft-kill-then-hang", tmp_path)
    (exp,) = (root / "experiments" / "ft-kill-hang").iterdir()  # <NEMORUN_HOME>/experiments/<title>/<id>
    (job,) = report_experiment(exp)
    (ft,) = saved_plugins(job.job_dir)
    assert (type(ft).__name__, ft.section_timeouts["step"], ft.workload_check_interval) == (
        "FaultTolerancePlugin",
        5,
        1,
    )
    kill, hang = compare(job, [ft])
    step_s = sum(r.iteration_ms for r in job.rows) / len(job.rows) / 1000
    # plan: a dead rank is seen within a check interval (half on average); a hang at the step timeout, which plan
    # reads as NVRx's computed one under calc_ft_timeouts (5 x the step time) plus half a check interval; a restart
    # at plan's default 300 s; half the save interval (5 iterations) redone.
    assert (kill.fault_class, kill.detect_plan_s) == ("dead_process", 0.5)
    assert (hang.fault_class, hang.detect_plan_s) == ("hang", round(5 * step_s + 0.5, 3))
    assert kill.restart_plan_s == hang.restart_plan_s == 300.0
    assert kill.redo_plan_s == hang.redo_plan_s == round(2.5 * step_s, 3)
    # measured: the hang's from the last training_log line (whole seconds) to the timeout, NVRx's open_s after it
    first, second, last = job.rows
    assert second.open_s <= hang.detect_measured_s <= second.open_s + 1 + step_s
    assert kill.restart_measured_s == round(
        (
            dt.datetime.fromisoformat(second.first_iteration_at) - dt.datetime.fromisoformat(first.detected_at)
        ).total_seconds(),
        3,
    )
    # 11-13 after the kill (resumed from 10), 16-17 after the hang (resumed from 15)
    assert (kill.redo_measured_s, hang.redo_measured_s) == (round(3 * step_s, 3), round(2 * step_s, 3))
    with pytest.raises(SystemExit) as done:
        main(["report", str(exp), "--json", "--restart-time", "60"])
    (data,) = json.loads(capsys.readouterr().out)
    assert done.value.code == 0 and [r["restart_plan_s"] for r in data["vs_plan"]] == [60.0, 60.0]
    with pytest.raises(SystemExit) as done:
        main(["report", str(exp)])
    out = " ".join(capsys.readouterr().out.split())
    assert "plan's restart is its stated default (300 s)" in out and "plan --restart-time" in out


def test_the_command_prints_the_table_and_json(tmp_path, capsys):
    exp = unpack("slurm-two-nodes-lost-then-frozen", tmp_path)
    with pytest.raises(SystemExit) as done:
        main(["report", str(exp), "--json"])
    assert done.value.code == 0
    (data,) = json.loads(capsys.readouterr().out)
    assert data["requeues"] == 2 and data["finished"] is True and data["goodput"] is None
    assert [a["attempt"] for a in data["attempts"]] == [0, 1, 2]
    with pytest.raises(SystemExit) as done:
        main(["report", str(exp / "train")])  # one job's folder works as well
    out = capsys.readouterr().out
    # The table wraps its cells at the console's width: its words, not its lines
    assert done.value.code == 0 and "section 'step' timeout" in " ".join(re.findall(r"[\w'.-]+", out)), out
    assert "requeue guard: node nrp-node4" in out


def test_a_directory_that_is_no_job_is_one_line(tmp_path, capsys):
    (tmp_path / "_CONFIG").write_text("{}")  # an experiment whose job never wrote a log
    (tmp_path / "train").mkdir()
    for target in (tmp_path, tmp_path / "train", tmp_path / "missing"):
        with pytest.raises(SystemExit) as done:
            main(["report", str(target)])
        err = capsys.readouterr().err.strip().splitlines()
        assert done.value.code == 2 and len(err) == 1, err
        assert err[0].startswith("nemo-resiliency report: error: ") and "EXPERIMENT_DIR" in err[0], err


def test_the_rehearsal_table_prints_every_run_and_the_verdict():
    """``rehearse``'s printer (tools/rehearse/report.py) on a report of one baseline and one fault, no launch."""
    import io

    from rich.console import Console

    from nemo_resiliency_plugins.tools.rehearse.report import FaultResult, RehearsalReport, RunOutcome, print_rehearsal

    base = RunOutcome(name="baseline", state="SUCCEEDED", wall_s=30.0, job_dir="/j", save_dir="/s")
    kill = FaultResult(
        fault="kill", ok=False, injected=True, detected=True, detected_by="dead rank 1", detect_s=1.5,
        recover_s=20.0, resumed_from=10, final_state="SUCCEEDED", params_equal=False, deadline_s=60.0,
        run=RunOutcome(name="kill", state="SUCCEEDED", wall_s=50.0, job_dir="/k", save_dir="/ks"),
    )  # fmt: skip
    report = RehearsalReport(
        ok=False, reasons=["kill: parameters differ from the fault-free run's"], plugins=["FaultTolerancePlugin"],
        ranks=2, scaled=[], not_exercised=[], chain=[{"name": "step", "detail": "5 s > 1 s", "verdict": "pass"}],
        baseline=base, faults=[kill], wall_s=80.0, workdir="/w", step_time_s=1.0,
    )  # fmt: skip
    out = io.StringIO()
    print_rehearsal(Console(file=out, width=200), "local-smoke", report)
    text = " ".join(out.getvalue().split())  # a table's title wraps at the table's width
    assert "baseline (no fault)" in text and "dead rank 1" in text and "step 10" in text and "NO" in text
    assert "timeout chain" in text and "unknown (pass --save-time)" in text
    assert "FAILED:" in text and "parameters differ" in text and "logs and checkpoints: /w" in text


def test_a_straggler_stop_and_torchruns_own_time_stamps(tmp_path):
    (job,) = report_experiment(unpack("local-straggler-stop", tmp_path))
    (row,) = job.rows
    assert row.stragglers == ["rank 1 on node vm (relative)"]
    assert (row.detected_by, row.detected_on_rank) == ("straggler detection (training stopped)", 1)
    assert row.checkpoints == [5, 10, 15, 18] and row.finished_step is None and not job.finished
    # torch's launcher lines have no year; the training_log lines give it, so torchrun's attempt is timed.
    assert job.attempts[0].launcher_stamped and job.attempts[0].wall_s > 0
    assert job.iterations() == (18, 0) and 0 < job.goodput() < 1


def test_a_plain_interpreters_torch_warnings_do_not_time_the_attempt(tmp_path):
    """The rank logs torch's own import warning in torch's format (``W1205 ... torch/utils/cpp_extension.py``);
    that is no launcher's stamp: start-up before it is not seen, so neither wall time nor goodput is given."""
    root = unpack("slurm-preempt-plain-interpreter", tmp_path)
    assert any(
        line.startswith("W") and "torch/utils/cpp_extension.py" in line
        for log in root.glob("train/log-*.out")
        for line in log.read_text().splitlines()
    )
    (job,) = report_experiment(root)
    assert [(a.launcher_stamped, a.wall_s) for a in job.attempts] == [(False, None), (False, None)]
    assert job.goodput() is None and job.iterations() == (1000, 0)
    stopped, resumed = job.rows
    assert (stopped.last_iteration, resumed.resumed_from, resumed.finished_step) == (404, 404, 1000)


# Two ranks' faulthandler dumps as torch elastic's tail threads put them in the launcher's log, taken from a real
# gloo job here (rank 1 hung in threading.Event().wait(), rank 0 in dist.all_reduce; both sent SIGABRT with
# PYTHONFAULTHANDLER=1), with a helper thread added to rank 0's dump and the extension list cut short.
DUMPS = """\
[default0]:Fatal Python error: Aborted
[default0]:
[default0]:Thread 0x00007f0815a00640 (most recent call first):
[default0]:  File "/usr/lib/python3.12/threading.py", line 355 in wait
[default0]:  File "/usr/lib/python3.12/threading.py", line 1030 in _bootstrap
[default0]:
[default0]:Current thread 0x00007f0815d7fb80 (most recent call first):
[default0]:  File "/venv/lib/python3.12/site-packages/torch/distributed/distributed_c10d.py", line 3913 in all_reduce
[default0]:  File "/venv/lib/python3.12/site-packages/torch/distributed/c10d_logger.py", line 83 in wrapper
[default0]:  File "/work/train.py", line 9 in step
[default0]:  File "/work/train.py", line 10 in <module>
[default0]:
[default0]:Extension modules: numpy._core._multiarray_umath, torch._C (total: 2)
[default1]:Fatal Python error: Aborted
[default1]:
[default1]:Current thread 0x00007f289cd60b80 (most recent call first):
[default1]:  File "/usr/lib/python3.12/threading.py", line 355 in wait
[default1]:  File "/usr/lib/python3.12/threading.py", line 655 in wait
[default1]:  File "/work/train.py", line 7 in step
[default1]:  File "/work/train.py", line 10 in <module>
[default1]:
[default1]:Extension modules: numpy._core._multiarray_umath, torch._C (total: 2)
"""


def test_stack_dumps_name_the_rank_that_was_not_in_the_collective():
    restart = "I1205 18:39:38.729000 13791 torch/distributed/elastic/agent/server/api.py:553]   restart_count=1"
    (hang, after) = parse_attempt(DUMPS + restart + "\n").cycles
    assert hang.stacks == [
        "rank 0: in all_reduce, called from step (train.py:9)",
        "rank 1: not in a collective, at step (train.py:7)",
    ]
    assert hang.outside_collective == ["rank 1"] and after.stacks == []


def test_a_traceback_is_not_a_stack_dump():
    """A rank's ordinary exception (File lines, no faulthandler header) gives no stack rows."""
    text = '[default0]:Traceback (most recent call last):\n[default0]:  File "/work/train.py", line 3 in <module>\n'
    (row,) = parse_attempt(text).cycles
    assert row.stacks == [] and row.outside_collective == []


def test_each_cycle_keeps_its_training_log_times_in_log_order(tmp_path):
    """Issue 52: the model holds every training_log line's (iteration, ms), per cycle, so that plan --from reads step
    and save times from report's model instead of the log again. The job's log read here without the report gives
    the same lines in the same order; each cycle's mean is its iteration_ms."""
    root = unpack("local-ft-kill-then-hang", tmp_path)
    (job,) = report_experiment(root)
    (log,) = sorted(root.glob("**/combined.log"))
    own = [(int(m.group(2)), float(m.group(3))) for m in map(_ITERATION.search, log.read_text().splitlines()) if m]
    assert [pair for row in job.rows for pair in row.iteration_times] == own
    assert [row.iteration_times[0][0] for row in job.rows] == [1, 11, 16]  # each cycle starts after its resume
    for row in job.rows:
        assert row.iteration_ms == round(sum(ms for _, ms in row.iteration_times) / len(row.iteration_times), 3)


#: Lines a training script may print that quote the launcher's success and the workload's finish verbatim; torch
#: elastic tees them into the launcher log with its ``[default<N>]:`` prefix, as it does every rank line.
SPOOFED_SUCCESS = (
    "[default1]:[rank1] FINISHED step=20 params_sha256=" + "0" * 64,
    "[default1]:I1205 07:47:40.000000 4242 torch/distributed/elastic/agent/server/api.py:932] [default] worker group"
    " successfully finished. Waiting 300 seconds for other agents to finish.",
    "[default1]:2026-12-05 07:47:40,000 [INFO] [vm] [workload:?(?) infra:0(0)] launcher.py:672 [default] worker group"
    " successfully finished. Waiting 300 seconds for other agents to finish.",
)


def test_a_rank_that_prints_finished_does_not_make_a_failed_job_finished(tmp_path):
    # The crash loop's launcher reports the failure (NVRx's no-restart verdict, non-zero exits); its rank 1 also
    # prints the workload's FINISHED line and the launcher's success line: the verdict stays the launcher's.
    root = unpack("slurm-crash-loop", tmp_path)
    (log,) = root.glob("**/log-*_0.out")
    log.write_text(log.read_text() + "\n".join(SPOOFED_SUCCESS) + "\n")
    (job,) = report_experiment(root)
    assert (job.requeues, job.restarts, job.finished) == (0, 1, False)
    assert job.rows[-1].finished_step == 20 and not job.rows[-1].finished  # the figure is read, the verdict is not
    assert [row.detected_by for row in job.rows] == ["rank killed by signal 9"] * 2


def test_finished_is_the_launchers_success_line_not_the_workloads(tmp_path):
    # The same job that finished, its launchers' success lines removed: the workload's FINISHED line is still there
    # (the step figure), but no launcher said the worker group finished.
    root = unpack("local-ft-kill-then-hang", tmp_path)
    (log,) = root.glob("**/combined.log")
    text = log.read_text()
    assert ll.TORCH_GROUP_FINISHED.search(text)
    (job,) = report_experiment(root)
    assert job.finished and job.rows[-1].finished and job.rows[-1].finished_step == 20
    log.write_text("".join(line for line in text.splitlines(True) if not ll.TORCH_GROUP_FINISHED.search(line)))
    (job,) = report_experiment(root)
    assert not job.finished and job.rows[-1].finished_step == 20 and not job.rows[-1].finished
