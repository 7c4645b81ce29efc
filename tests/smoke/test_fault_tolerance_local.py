"""FaultTolerancePlugin end to end: the reference workload under the real ft_launcher through NeMo-Run's
LocalExecutor, with real faults. Nothing here is mocked: torch + gloo ranks, NVRx's launcher and rank
monitor, Megatron Bridge's config parser and fault-tolerance hooks.

Every faulty run must end with parameters bit-identical to the fault-free run's.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import nemo_run as run
import pytest

from nemo_resiliency_plugins import FaultTolerancePlugin
from nemo_resiliency_plugins.job import log_lines as ll
from nemo_resiliency_plugins.testing.local_run import run_local
from nemo_resiliency_plugins.tools.report import report_experiment, report_job
from tests.helpers import assert_ended_by_kill, assert_same_params, final_params, workload_script

STEPS = 20  # the reference config's train.train_iters; checkpoint every 5 steps
FAULT_STEP = 13  # resume from step 10
HANG_STEP = 17  # the second fault of the kill-then-hang job: resume from step 15
STEP_TIME = "0.15"


def plugin(**overrides) -> FaultTolerancePlugin:
    settings = dict(
        num_in_job_restarts=2,
        section_timeouts={"setup": 120, "step": 5, "checkpointing": 60},
        out_of_section_timeout=60,
        workload_check_interval=1,
        # Kept from Megatron Bridge's plugin; must not reach a section-based job (it would kill it at 10 s).
        initial_rank_heartbeat_timeout=10,
        rank_heartbeat_timeout=5,
    )
    settings.update(overrides)
    return FaultTolerancePlugin(**settings)


def script_task(save_dir: Path, fault: str | None = None):
    return workload_script(save_dir, fault, step_time=STEP_TIME, fault_step=FAULT_STEP)


def section_wait(result) -> float:
    """Seconds the hung 'step' section had been open when NVRx's rank monitor reported it."""
    lines = result.grep("Section 'step' has been open for")
    assert lines, "the hang was not detected by the step section timeout:\n" + result.log[-4000:]
    return float(ll.NVRX_SECTION.search(lines[0]).group(2))


@pytest.fixture(scope="module")
def baseline(tmp_path_factory):
    """A fault-free run: its final parameters and ft_state.json are what the faulty runs compare against."""
    save = tmp_path_factory.mktemp("baseline")
    result = run_local(script_task(save), [plugin()], name="ft-baseline")
    return result, save


def test_fault_free_run_succeeds_and_outlives_the_initial_heartbeat_timeout(baseline):
    result, save = baseline
    assert result.state == "SUCCEEDED", result.log[-4000:]
    assert not result.grep("will restart"), "a healthy job was restarted"
    assert not result.grep("Did not get initial heartbeat")
    # Longer than initial_rank_heartbeat_timeout=10: had it reached the launcher, the job would have died.
    assert result.wall_s > 10
    assert result.grep(f"FINISHED step={STEPS}")
    assert (save / "ft_state.json").exists(), "calc_ft_timeouts=True: Megatron Bridge saves computed timeouts"


@pytest.fixture(scope="module")
def kill_then_hang(tmp_path_factory):
    """One job, two faults in a row (restart budget 2): rank 1 killed at step 13, then, after resuming from step
    10, hung at step 17. Each recovery is asserted on its own below."""
    save = tmp_path_factory.mktemp("kill-then-hang")
    # diagnostics: the hung rank is stopped with SIGABRT and leaves its stack (test_report_of_the_kill_then_hang_job)
    task = script_task(save, f"kill@{FAULT_STEP},hang@{HANG_STEP}")
    result = run_local(task, [plugin(diagnostics=True)], name="ft-kill-hang")
    return result, save


def test_killed_rank_is_restarted_and_resumes_with_nothing_lost(baseline, kill_then_hang):
    result, save = kill_then_hang
    assert result.state == "SUCCEEDED", result.log[-4000:]
    assert result.grep(f"FAULT_INJECTED kind=kill step={FAULT_STEP}")
    assert result.grep("will restart worker group")
    assert len(result.grep("RESUMED from step 10")) == 2, "both ranks resume from the last checkpoint before the kill"
    assert_same_params(final_params(save), final_params(baseline[1]))


def test_hang_in_a_step_is_caught_by_the_step_section_timeout(baseline, kill_then_hang, record_property):
    result, save = kill_then_hang
    assert result.state == "SUCCEEDED", result.log[-4000:]
    assert result.grep(f"FAULT_INJECTED kind=hang step={HANG_STEP}")
    waited = section_wait(result)
    record_property("hang_detection_s_explicit_timeout", waited)
    # NVRx's own figure (its clock, section open -> the check that saw it): never below the timeout; late by at most
    # one check interval (workload_check_interval=1 s) plus the rank monitor's wake-up on a loaded host (2 s).
    assert 5 <= waited < 5 + 1 + 2, "detected by the declared 5 s step timeout (+ the 1 s check interval)"
    assert len(result.grep("RESUMED from step 15")) == 2, "both ranks resume from the last checkpoint before the hang"
    assert len(result.grep("will restart worker group")) == 2, "one restart per fault"
    assert_same_params(final_params(save), final_params(baseline[1]))


@pytest.fixture(scope="module")
def partial_second_run(baseline, tmp_path_factory):
    """One job read by two tests: a run.Partial task (the plugin sets config fields, not CLI overrides) started on a
    save directory holding the baseline's ft_state.json (a second run: Megatron Bridge loads the timeouts NVRx
    computed), with rank 1 hung at step 13."""
    from nemo_resiliency_plugins.testing import workload

    save = tmp_path_factory.mktemp("partial-second-run")
    shutil.copy(baseline[1] / "ft_state.json", save / "ft_state.json")
    computed = json.loads((save / "ft_state.json").read_text())["current_timeouts"]["section"]["section"]["step"]
    task = run.Partial(workload.pretrain, config=workload.reference_config_buildable(str(save)))
    env = {"NRP_STEP_TIME": STEP_TIME, "NRP_FAULT": "hang", "NRP_FAULT_STEP": str(FAULT_STEP), "NRP_FAULT_RANK": "1"}
    result = run_local(task, [plugin()], name="ft-partial-hang-2nd", env=env)
    return result, save, computed


def test_second_run_uses_computed_timeouts_and_detects_a_hang_faster(partial_second_run, record_property):
    result, _, computed = partial_second_run
    assert result.state == "SUCCEEDED", result.log[-4000:]
    assert result.grep("FT: loaded timeouts from"), "Megatron Bridge did not load ft_state.json"
    assert result.grep(f"FAULT_INJECTED kind=hang step={FAULT_STEP}")
    waited = section_wait(result)
    record_property("hang_detection_s_computed_timeout", waited)
    # NVRx's own figure against the timeout it computed from the baseline's steps (what this run loaded): the same
    # bounds as for the declared timeout (one 1 s check interval + 2 s of wake-up on a loaded host).
    # NVRx prints the open time to 2 decimals ("open for 0.84 seconds" for 0.8424 s against a 0.8423 s timeout, seen
    # in a loaded run): the printed figure may be up to 0.005 s below the timeout it exceeded.
    assert computed - 0.005 <= waited < computed + 1 + 2, (waited, computed)
    assert computed < 5, f"the computed step timeout ({computed:.2f} s) should beat the declared 5 s"


def test_partial_task_recovers_from_a_fault_with_nothing_lost(baseline, partial_second_run):
    result, save, _ = partial_second_run
    assert result.state == "SUCCEEDED", result.log[-4000:]
    assert result.grep("will restart worker group")
    assert len(result.grep("RESUMED from step 10")) == 2, "both ranks resume from the last checkpoint before the hang"
    assert_same_params(final_params(save), final_params(baseline[1]))


def test_faults_beyond_the_restart_budget_end_failed(tmp_path):
    """num_in_job_restarts=0 really means no restart, and run.run's job ends FAILED (it does not raise)."""
    title = "ft-no-restarts"
    run.run(
        script_task(tmp_path, "kill"),
        executor=run.LocalExecutor(ntasks_per_node=2),
        plugins=[plugin(num_in_job_restarts=0)],
        name=title,
        detach=False,
        tail_logs=False,
    )
    # run.run returned normally although the job failed: ask NeMo-Run for the job's state.
    with run.Experiment.from_title(title) as exp:
        status = exp.status(return_dict=True)
    state = next(iter(status.values()))["status"]
    assert getattr(state, "name", str(state)) == "FAILED", status
    assert not (tmp_path / "final_params.pt").exists()
    # `nemo-resiliency report` (issue 36) on the saved experiment: one cycle, ended by the kill, never restarted.
    (job,) = report_experiment(exp._exp_dir)
    assert (job.requeues, job.restarts, job.finished) == (0, 0, False), job.rows
    (row,) = job.rows
    assert row.injected == [f"kill at step {FAULT_STEP} on rank 1"], row
    assert_ended_by_kill(row, rank=1)
    assert row.checkpoints == [5, 10], row


def test_5711_a_finished_run_started_again_fails_exactly_where_the_known_bug_check_says(baseline, tmp_path):
    """Megatron-Bridge#5711 (core/known_bugs.py) for real: the baseline's finished save directory
    started again, as a Slurm requeue of a run that had in fact finished would be. Where the check reads the bug in
    the installed code (0.6.2 here) the run fails in Megatron Bridge's fault_tolerance.shutdown with NVRx's "Not
    enough data to compute timeouts"; where it reads the fix, the run succeeds. (The workaround,
    calc_ft_timeouts=False, on the same directory: SUCCEEDED, verified by hand.)"""
    from nemo_resiliency_plugins.core.known_bugs import FinishedRunResumeFails

    save = tmp_path / "save"
    shutil.copytree(baseline[1], save)
    result = run_local(script_task(save), [plugin(num_in_job_restarts=0)], name="ft-finished-again")
    assert result.grep(f"RESUMED from step {STEPS}"), result.log[-4000:]  # zero iterations left
    if FinishedRunResumeFails().detect().status == "present":
        assert result.state == "FAILED", result.log[-4000:]
        assert result.grep("RankMonitorClientError: Not enough data to compute timeouts"), result.log[-4000:]
    else:
        assert FinishedRunResumeFails().detect().status == "fixed"
        assert result.state == "SUCCEEDED", result.log[-4000:]


# `nemo-resiliency report` (issue 36) on the jobs above: each field agrees with what the test injected.


def test_report_of_the_fault_free_job(baseline):
    job = report_job(baseline[0].job_dir)
    assert (job.requeues, job.restarts, job.finished) == (0, 0, True)
    (row,) = job.rows
    assert row.injected == [] and row.detected_by is None and row.exit_code is None
    assert row.checkpoints == [5, 10, 15, 20] and row.resumed_from is None and row.finished_step == STEPS
    # Megatron Bridge's training_log line every iteration (log_interval=1): all 20 kept, none trained twice.
    assert (row.last_iteration, job.iterations()) == (STEPS, (STEPS, 0))
    assert 0 < job.goodput() < 1  # start-up (imports, rendezvous) is most of this tiny job's wall time


def test_report_of_the_kill_then_hang_job(kill_then_hang):
    job = report_job(kill_then_hang[0].job_dir)
    assert (job.requeues, job.restarts, job.finished) == (0, 2, True)
    kill, hang, last = job.rows
    assert kill.injected == [f"kill at step {FAULT_STEP} on rank 1"]
    assert_ended_by_kill(kill, rank=1)
    assert kill.checkpoints == [5, 10] and kill.resumed_from is None and kill.finished_step is None
    assert kill.restart_s is not None and kill.restart_s > 0
    assert hang.injected == [f"hang at step {HANG_STEP} on rank 1"] and hang.resumed_from == 10
    assert hang.detected_by.startswith("section 'step' timeout"), hang.detected_by
    # NVRx's figure, as test_hang_in_a_step_is_caught_by_the_step_section_timeout bounds it.
    assert 5 <= hang.open_s < 5 + 1 + 2
    assert hang.checkpoints == [15] and hang.finished_step is None
    assert (last.injected, last.resumed_from, last.detected_by) == ([], 15, None)
    assert (last.checkpoints, last.finished_step) == ([20], STEPS)
    # A fault at step N strikes after iteration N completed: 11-13 (after the step-10 checkpoint) and 16-17 (after
    # the step-15 one) were trained again.
    assert (kill.last_iteration, hang.last_iteration) == (FAULT_STEP, HANG_STEP)
    assert job.iterations() == (STEPS, 3 + 2) and 0 < job.goodput() < 1
    # diagnostics=True: the rank monitor's SIGABRT made each rank it stopped dump its stack. Rank 1 hung outside any
    # collective (the fault's own line); rank 0, if its monitor stopped it before rank 1's end broke its all_reduce,
    # was in that collective. The kill cycle has no dump: the fault itself SIGKILLed rank 1.
    assert hang.outside_collective == ["rank 1"], hang.stacks
    (hung,) = [line for line in hang.stacks if line.startswith("rank 1:")]
    assert "not in a collective, at _inject (faults.py:" in hung, hang.stacks
    assert all("in all_reduce" in line for line in hang.stacks if line.startswith("rank 0:")), hang.stacks
    assert hang.exit_code == -6 or "local rank 1 killed by signal 6" in hang.exits, hang.exits  # SIGABRT
    assert kill.stacks == [] and last.stacks == []


def test_report_of_the_partial_second_run(partial_second_run):
    result, _, computed = partial_second_run
    job = report_job(result.job_dir)
    assert (job.requeues, job.restarts, job.finished) == (0, 1, True)
    hang, last = job.rows
    assert hang.injected == [f"hang at step {FAULT_STEP} on rank 1"]
    # A fault at step N strikes after iteration N (the hung rank 1, the last one, printed its training_log line).
    assert (hang.last_iteration, hang.checkpoints, hang.finished_step) == (FAULT_STEP, [5, 10], None)
    assert hang.detected_by.startswith("section 'step' timeout") and computed - 0.005 <= hang.open_s < computed + 1 + 2
    assert (last.resumed_from, last.finished_step) == (10, STEPS)
