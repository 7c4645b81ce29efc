"""PreemptionPlugin on a real local Slurm, through NeMo-Run's SlurmExecutor, with FaultTolerancePlugin's
ft_launcher between Slurm and the ranks (the FT branch of NeMo-Run's sbatch template).

The job gets a 3-minute limit and ``preempt_time=60``: Slurm sends SIGTERM 60-120 s before the limit
(slurmctld checks every ~30 s, so up to 60 s early), i.e. 60-120 s after the start. Training is sized to
outlast that, so the signal always arrives mid-training; nothing here sleeps to wait for it. Megatron
Bridge's own ``DistributedSignalHandler`` (installed from the parsed ``train.exit_signal_handler`` /
``train.exit_signal``) catches it in every rank, the workload saves a checkpoint and exits 0, ft_launcher
exits 0, and the requeue guard requeues the job (it exited 0 inside the preemption window). The next run
resumes from that checkpoint and finishes; the guard then ends the job instead of requeueing it again.
"""

from __future__ import annotations

import re
import time

import pytest
import torch

from tests.slurm.nrp_jobs import finished_hash, submit

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

TRAIN_ITERS = 1000
STEP_TIME = "0.1"  # ~110 s of training: longer than the latest signal (t+120 s) minus start-up


def _ft_settings() -> dict:
    return dict(
        num_in_job_restarts=1,
        num_job_retries_on_failure=1,
        section_timeouts={"setup": 300, "step": 60, "checkpointing": 120},
        out_of_section_timeout=120,
        workload_check_interval=2,
    )


def test_slurm_signal_before_time_limit_saves_exits_0_and_requeued_job_resumes(local_slurm, tmp_path):
    t0 = time.monotonic()
    save = tmp_path / "ckpt"
    job = submit(
        local_slurm,
        tmp_path,
        name="nrp-preempt",
        args=[f"checkpoint.save={save}", f"train.train_iters={TRAIN_ITERS}", "checkpoint.save_interval=400"],
        time_limit="00:03:00",
        env={"NRP_STEP_TIME": STEP_TIME},
        preemption=dict(preempt_time=60),
        ft=_ft_settings(),
    )
    script = job.sbatch_script()
    assert "#SBATCH --signal=TERM@60" in script, script
    assert "#SBATCH --time=00:03:00" in script
    assert "ft_launcher" in script and "train.exit_signal=15" in script, script

    res = local_slurm.wait(job.job_id, timeout=720)
    logs = job.logs()
    elapsed = time.monotonic() - t0
    assert (res.state, res.exit_code) == ("COMPLETED", 0), (res.record, logs[-8000:])

    attempts = job.attempt_logs()
    first = attempts[0]
    # Megatron Bridge's handler caught Slurm's SIGTERM in the ranks; the workload saved and exited 0.
    assert "Received signal 15, initiating graceful stop" in first, first[-6000:]
    exit_steps = [int(s) for s in re.findall(r"EXIT on signal step=(\d+)", first)]
    assert exit_steps, first[-6000:]
    stopped_at = exit_steps[0]
    assert 0 < stopped_at < TRAIN_ITERS
    assert f"CHECKPOINT saved step={stopped_at}" in first
    # ft_launcher forwarded the signal, waited for the save, and exited without an error.
    assert "All ranks exited gracefully" in first, first[-6000:]
    assert "FINISHED" not in first

    # The checkpoint written on the signal is complete and loadable.
    ckpt = torch.load(save / f"iter_{stopped_at:07d}.pt", map_location="cpu", weights_only=True)
    assert ckpt["step"] == stopped_at and ckpt["world_size"] == 2
    assert ckpt["train_state"]["step"] == stopped_at
    assert (save / "latest_checkpointed_iteration.txt").read_text().strip().isdigit()

    # Requeued (exit 0 inside the preemption window), resumed from that checkpoint, finished.
    assert res.restarts >= 1, res.record
    second = attempts[1]
    assert f"RESUMED from step {stopped_at} (iter_{stopped_at:07d}.pt)" in second, second[-6000:]
    step, _ = finished_hash(attempts[max(attempts)])
    assert step == TRAIN_ITERS
    # ... and then not requeued again: the guard wrote NeMo-Run's finished flag.
    assert "finished, not requeued" in logs, logs[-4000:]
    assert any(job.task_dir().glob("*_finished_flag")), sorted(p.name for p in job.task_dir().iterdir())
    results = next(job.task_dir().glob("*_job_results")).read_text().split("\n")
    assert all(line.endswith(" S") for line in results if line.strip()), results

    signal_at = _launcher_time(first, r"Received (?:Signals\.)?SIGTERM death signal|Received 15 death signal")
    exit_at = _launcher_time(first, r"All ranks exited gracefully")
    print(
        f"\npreemption job {job.job_id}: stopped at step {stopped_at}, restarts {res.restarts}, "
        f"SIGTERM->launcher exit {exit_at - signal_at:.1f} s, test {elapsed / 60:.1f} min"
    )


def _launcher_time(text: str, pattern: str) -> float:
    """Epoch seconds of the first ft_launcher log line matching ``pattern`` (its logging timestamp)."""
    for line in text.splitlines():
        if re.search(pattern, line):
            m = re.search(r"(\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d[,.]\d+)", line)
            assert m, line
            return time.mktime(time.strptime(m.group(1)[:19].replace("T", " "), "%Y-%m-%d %H:%M:%S")) + float(
                "0." + m.group(1)[20:]
            )
    raise AssertionError(f"no launcher line matches {pattern!r}:\n{text[-6000:]}")
