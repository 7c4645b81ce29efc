"""FaultTolerancePlugin on a real local Slurm through NeMo-Run's SlurmExecutor: ft_launcher inside the job
(the FT branch of NeMo-Run's sbatch template), an in-job restart of a killed rank, a failed job requeued by
``num_job_retries_on_failure`` and resumed from its checkpoint, and a finished job NOT requeued again.

NeMo-Run's FT template (``ft_launcher_slurm.j2``) ends every run with ``scontrol requeue`` unless a
"finished flag" file exists or the failure limit is reached, and Megatron Bridge never writes the flag: without
the plugins' requeue guard a job that succeeded is requeued, resumes at its last iteration, succeeds again
and is requeued again, for ever (``S`` lines never count as failures). The fault-free job here is the proof
that the guard ends it after one run.

The three jobs are submitted together (the node runs two at a time) and compared at the end: the faulty
runs' final parameters must equal the fault-free run's, bit for bit.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from tests.slurm.nrp_jobs import finished_hash, launcher_times, submit
from tests.slurm_fixture import REQUEUE_RELEASE_DELAY

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

STEPS = 20  # the reference config's train.train_iters; checkpoint every 5 steps
FAULT_STEP = 13  # the killed rank's attempt resumes from step 10


def _ft(**overrides) -> dict:
    settings = dict(
        num_in_job_restarts=1,
        num_job_retries_on_failure=1,
        section_timeouts={"setup": 300, "step": 60, "checkpointing": 120},
        out_of_section_timeout=120,
        workload_check_interval=2,
    )
    settings.update(overrides)
    return settings


@pytest.fixture(scope="module")
def jobs(local_slurm, tmp_path_factory):
    t0 = time.monotonic()
    specs = {
        "fault-free": dict(env={}, ft=_ft()),
        "in-job-restart": dict(env={"NRP_FAULT": "kill"}, ft=_ft()),
        "requeue": dict(env={"NRP_FAULT": "kill"}, ft=_ft(num_in_job_restarts=0)),
        "no-retry-left": dict(env={"NRP_FAULT": "kill"}, ft=_ft(num_in_job_restarts=0, num_job_retries_on_failure=0)),
    }
    submitted = {}
    for name, spec in specs.items():
        tmp = tmp_path_factory.mktemp(name)
        save = tmp / "ckpt"
        env = {"NRP_STEP_TIME": "0.15", "NRP_FAULT_STEP": str(FAULT_STEP), "NRP_FAULT_RANK": "1", **spec["env"]}
        job = submit(
            local_slurm,
            tmp,
            name=f"nrp-ft-{name}",
            args=[f"checkpoint.save={save}"],
            time_limit="00:10:00",
            env=env,
            ft=spec["ft"],
        )
        submitted[name] = (job, save)
    results = {}
    for name, (job, save) in submitted.items():
        res = local_slurm.wait(job.job_id, timeout=600)
        results[name] = (job, save, res)
    print(f"\nFT Slurm jobs: {time.monotonic() - t0:.0f} s for all four")
    return results


def test_fault_free_job_runs_under_ft_launcher_and_is_not_requeued_after_success(jobs):
    job, save, res = jobs["fault-free"]
    logs = job.logs()
    assert (res.state, res.exit_code) == ("COMPLETED", 0), (res.record, logs[-6000:])
    script = job.sbatch_script()
    assert "ft_launcher" in script and "JOB_RESULTS_FILE" in script, "not NeMo-Run's FT template branch"
    assert "Agent exits with exit code = 0" in logs or "exit code = 0" in logs, logs[-4000:]
    # The trap: the template would requeue this successful job; the guard wrote the flag instead.
    assert res.restarts == 0, res.record
    assert "finished, not requeued" in logs, logs[-4000:]
    assert any(job.task_dir().glob("*_finished_flag"))
    results = next(job.task_dir().glob("*_job_results")).read_text().split()
    assert results == [job.job_id, "0", "S"], results
    assert finished_hash(logs)[0] == STEPS


def test_killed_rank_is_restarted_inside_the_job(jobs):
    baseline = finished_hash(jobs["fault-free"][0].logs())
    job, save, res = jobs["in-job-restart"]
    logs = job.logs()
    assert (res.state, res.exit_code, res.restarts) == ("COMPLETED", 0, 0), (res.record, logs[-6000:])
    assert f"FAULT_INJECTED kind=kill step={FAULT_STEP} rank=1" in logs
    assert "will restart worker group" in logs, logs[-6000:]
    assert "RESUMED from step 10 (iter_0000010.pt)" in logs
    assert finished_hash(logs) == baseline


def test_failed_job_is_requeued_resumes_and_matches_the_fault_free_run(jobs):
    baseline = finished_hash(jobs["fault-free"][0].logs())
    job, save, res = jobs["requeue"]
    logs = job.logs()
    assert (res.state, res.exit_code) == ("COMPLETED", 0), (res.record, logs[-6000:])
    # num_job_retries_on_failure=1 is one requeue after the failure (NeMo-Run's template alone gives none),
    # and none after the success.
    assert res.restarts == 1, res.record
    attempts = job.attempt_logs()
    assert f"FAULT_INJECTED kind=kill step={FAULT_STEP} rank=1" in attempts[0]
    assert "FINISHED" not in attempts[0]
    assert "RESUMED from step 10 (iter_0000010.pt)" in attempts[1], attempts[1][-6000:]
    assert finished_hash(attempts[1]) == baseline
    results = next(job.task_dir().glob("*_job_results")).read_text().split("\n")
    assert [ln.split()[-1] for ln in results if ln.strip()] == ["F", "S"], results
    assert "finished, not requeued" in logs
    gap = launcher_times(attempts[1])[0] - launcher_times(attempts[0])[-1]
    print(f"\nrequeue job {job.job_id}: failed run's launcher exit -> requeued run's launcher up: {gap:.1f} s")


def _ft_template_script(tmp_path, guard: bool) -> str:
    """NeMo-Run's real FT sbatch script for a FaultTolerancePlugin job whose training step is ``true``
    (succeeds at once), with or without the plugins' requeue guard."""
    import re

    import nemo_run as run

    from nemo_resiliency_plugins import FaultTolerancePlugin
    from tests.helpers import add_job
    from tests.unit.test_preemption_plugin import sbatch_script

    executor = run.SlurmExecutor(
        account="local",
        partition="debug",
        nodes=1,
        ntasks_per_node=2,
        time="00:05:00",
        tunnel=run.LocalTunnel(job_dir=str(tmp_path / "jobs")),
        packager=run.Packager(),
    )
    task = run.Script(path="nemo_resiliency_plugins.testing.workload", m=True, entrypoint="python")
    job = add_job(task, executor, [FaultTolerancePlugin(num_job_retries_on_failure=2)], name=f"trap-{guard}")
    text = re.sub(r"srun --output .*? ft_launcher .*", "srun true", sbatch_script(job))
    assert "srun true" in text and "is_training_finished" in text
    if not guard:
        text = re.sub(r"# nemo-resiliency-plugins: requeue guard.*?\n}\n", "", text, flags=re.S)
        assert "scontrol() {" not in text
    results = re.search(r'JOB_RESULTS_FILE="([^"]+)"', text).group(1)
    Path(results).parent.mkdir(parents=True, exist_ok=True)
    Path(re.search(r"#SBATCH --output=(\S+)", text).group(1)).parent.mkdir(parents=True, exist_ok=True)
    return text


@pytest.mark.parametrize("guard", [False, True], ids=["nemo-run-template-alone", "with-guard"])
def test_successful_ft_job_requeue_trap(local_slurm, tmp_path, guard):
    """The trap, on the real template: without the guard a job whose every run succeeds is requeued again
    and again (stopped here after 2 requeues); with it, it ends COMPLETED after its first run."""
    job_id, _ = local_slurm.sbatch(_ft_template_script(tmp_path, guard), args=["--requeue"])
    deadline = time.monotonic() + 120
    hold_seen: dict[int, float] = {}
    while True:
        rec, _ = local_slurm.job_record(job_id)
        restarts = int(rec.get("Restarts", "0") or 0)
        if rec.get("Reason") == "BeginTime":
            # Skip Slurm's 120 s hold of a requeued job, not at once (see LocalSlurm.wait: credential revoked).
            first = hold_seen.setdefault(restarts, time.monotonic())
            if time.monotonic() - first >= REQUEUE_RELEASE_DELAY:
                subprocess.run(["scontrol", "update", f"jobid={job_id}", "StartTime=now"], capture_output=True)
        if rec.get("JobState") in ("COMPLETED", "FAILED", "CANCELLED") or restarts >= 2:
            break
        assert time.monotonic() < deadline, rec
        time.sleep(0.5)
    if guard:
        assert (rec["JobState"], restarts) == ("COMPLETED", 0), rec
    else:
        subprocess.run(["scancel", job_id], capture_output=True)
        assert restarts >= 2, rec  # succeeded, requeued, succeeded, requeued...


def test_job_out_of_retries_ends_failed_not_completed(jobs):
    """NeMo-Run's template alone ends such a job COMPLETED with exit code 0; the guard keeps the failure."""
    job, save, res = jobs["no-retry-left"]
    logs = job.logs()
    assert res.state == "FAILED" and res.exit_code not in (0, None), (res.record, logs[-4000:])
    assert res.restarts == 0, res.record
    assert f"FAULT_INJECTED kind=kill step={FAULT_STEP} rank=1" in logs
    assert "FINISHED step=" not in logs
    results = next(job.task_dir().glob("*_job_results")).read_text().split()
    assert results == [job.job_id, "0", "F"], results
