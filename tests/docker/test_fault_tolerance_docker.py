"""FaultTolerancePlugin on NeMo-Run's real DockerExecutor: the reference workload under NVRx's ft_launcher in a
container of the local Docker daemon (.ci/docker-up), with real faults. Nothing is mocked: docker-py and
dockerd start the container, NeMo-Run writes and mounts the job directory (the section timeouts reach the rank
monitor through its ``<job>_executor.yaml``), torch + gloo ranks train, Megatron Bridge's hooks report sections.

One faulty launch proves two recoveries (``NRP_FAULT=kill@13,hang@17``, restart budget 3): rank 1 killed at step
13 and restarted, then rank 1 hung at step 17 and caught by the step section timeout. Its final parameters must be
bit-identical to the suite's fault-free reference run (``reference_run``, tests/helpers.py: the workload gives the
same parameters whatever launches it). The same launch proves what only a container job has: the container's
exit status, doctor's reading of it, and the rank monitor's config mounted from NeMo-Run's executor YAML (a
fault-free container job of its own cost 200 s of a loaded CI run and proved nothing more). Timeouts are the
``local-smoke`` recipe's (step 10 s, check every 1 s).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from nemo_resiliency_plugins.job import log_lines as ll
from nemo_resiliency_plugins.recipes import get_recipe
from nemo_resiliency_plugins.tools.doctor import check_job, jobs_from_experiment_dir
from nemo_resiliency_plugins.tools.report import report_job
from tests.helpers import assert_ended_by_kill, assert_same_params, final_params, workload_script

pytestmark = [pytest.mark.docker, pytest.mark.slow]

STEPS = 20  # the reference config's train.train_iters; checkpoint every 5 steps
KILL_STEP = 13  # resume from step 10
HANG_STEP = 17  # after the kill: resume from step 15
STEP_TIME = "0.15"
STEP_TIMEOUT = 10.0  # the local-smoke recipe's step section timeout


def launch(local_docker, save: Path, fault: str | None, name: str):
    plugins = get_recipe("local-smoke")
    (ft,) = plugins
    assert ft.section_timeouts["step"] == STEP_TIMEOUT and ft.num_in_job_restarts >= 2
    task = workload_script(save, fault, step_time=STEP_TIME, fault_step=KILL_STEP)
    executor = local_docker.executor(ntasks=2, writable=[save])
    return local_docker.run(task, executor, plugins, name=name)


@pytest.fixture(scope="module")
def kill_then_hang(local_docker, tmp_path_factory):
    save = tmp_path_factory.mktemp("docker-kill-hang")
    return launch(local_docker, save, f"kill@{KILL_STEP},hang@{HANG_STEP}", "ft-docker-kill-hang"), save


def test_job_runs_in_a_container_under_ft_launcher(kill_then_hang, record_property):
    result, save = kill_then_hang
    record_property("docker_kill_then_hang_wall_s", round(result.wall_s, 1))
    assert result.state == "SUCCEEDED", result.log[-4000:]
    assert result.grep(f"FINISHED step={STEPS}")
    assert result.grep("Agent exits with exit code = 0"), "ft_launcher ran in the container and ended cleanly"
    # What only a DockerExecutor job leaves: the container's exit status, written by its own command line.
    (status,) = Path(result.job_dir).glob("status_*.out")
    assert json.loads(status.read_text())["exit_code"] == "0"
    # ... and what `nemo-resiliency doctor` makes of it on the saved experiment: the job's real outcome, also when
    # NeMo-Run's wait lost its race with the container's auto-removal (result.wait_race; docs/races.md).
    ((task, executor, plugins),) = jobs_from_experiment_dir(result.exp_dir)
    (exit_check,) = [c for c in check_job(task, executor, plugins) if c.name == "container exit status"]
    assert exit_check.verdict == "pass" and "every container exited 0" in exit_check.detail, exit_check
    record_property("docker_wait_race", result.wait_race)
    # The rank monitor's config travels in NeMo-Run's executor YAML, mounted at /nemo_run/configs.
    (config,) = Path(result.job_dir, "configs").glob("*_executor.yaml")
    sections = yaml.safe_load(config.read_text())["launcher"]["fault_tolerance"]["rank_section_timeouts"]
    assert sections["step"] == STEP_TIMEOUT
    assert (save / "final_params.pt").exists()


def test_killed_rank_is_restarted_and_resumes_with_nothing_lost(kill_then_hang, reference_run):
    result, save = kill_then_hang
    assert result.state == "SUCCEEDED", result.log[-4000:]
    assert result.grep(f"FAULT_INJECTED kind=kill step={KILL_STEP}")
    assert len(result.grep("RESUMED from step 10")) == 2, "both ranks resume from the last checkpoint before the kill"
    assert_same_params(final_params(save), final_params(reference_run[0]))


def test_hang_is_caught_by_the_step_section_timeout(kill_then_hang, reference_run):
    result, save = kill_then_hang
    assert result.state == "SUCCEEDED", result.log[-4000:]
    assert result.grep(f"FAULT_INJECTED kind=hang step={HANG_STEP}")
    lines = result.grep("Section 'step' has been open for")
    assert lines, "NVRx did not name the step section for the hang:\n" + result.log[-4000:]
    waited = float(ll.NVRX_SECTION.search(lines[0]).group(2))
    # NVRx's own figure (its clock): never below the timeout; late by at most one check interval (1 s) plus the rank
    # monitor's wake-up on a loaded host (2 s).
    assert STEP_TIMEOUT <= waited < STEP_TIMEOUT + 1 + 2, f"detected by the 10 s step timeout (+ 1 s checks): {waited}"
    assert len(result.grep("RESUMED from step 15")) == 2, "both ranks resume from the last checkpoint before the hang"
    assert len(result.grep("will restart worker group")) == 2, "one restart per fault"
    assert_same_params(final_params(save), final_params(reference_run[0]))


def test_report_of_the_container_job(kill_then_hang):
    """`nemo-resiliency report` (issue 36) on the container's log (``log_<container>.out``): the kill and the hang,
    what caught each, the two resumes and the finish."""
    job = report_job(kill_then_hang[0].job_dir)
    assert (job.requeues, job.restarts, job.finished) == (0, 2, True)
    kill, hang, last = job.rows
    assert kill.injected == [f"kill at step {KILL_STEP} on rank 1"]
    assert_ended_by_kill(kill, rank=1)
    assert (hang.injected, hang.resumed_from) == ([f"hang at step {HANG_STEP} on rank 1"], 10)
    assert hang.detected_by.startswith("section 'step' timeout") and STEP_TIMEOUT <= hang.open_s < STEP_TIMEOUT + 3
    assert (last.injected, last.resumed_from, last.finished_step) == ([], 15, STEPS)
    assert [row.checkpoints for row in job.rows] == [[5, 10], [15], [20]], job.rows
