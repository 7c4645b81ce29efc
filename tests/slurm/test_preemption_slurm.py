"""PreemptionPlugin on a real local Slurm, through NeMo-Run's SlurmExecutor, with FaultTolerancePlugin's
ft_launcher between Slurm and the ranks (the FT branch of NeMo-Run's sbatch template).

Slurm sends ``--signal=B:TERM@60`` 60-120 s before the time limit (slurmctld checks every ~30 s, so up to
60 s early). A signal that arrives while the ranks are still importing kills them before Megatron Bridge's
handler exists (start-up takes 25-90 s on this shared 2-CPU host), so the test does not guess: the job is
submitted with a 10-minute limit and, once the first run's ranks are training, the test shortens the limit
(``scontrol update TimeLimit``, whole minutes) to 90-150 s from then, so the signal comes during training.
Megatron Bridge's own ``DistributedSignalHandler`` (from the parsed ``train.exit_signal_handler`` /
``train.exit_signal``) catches it in every rank, the workload saves a checkpoint and exits 0, ft_launcher
exits 0, and the requeue guard requeues the job (it exited 0 after the preemption signal). The test gives
the limit back; the next run resumes from that checkpoint and finishes, and the guard ends the job there.

Beside it, in the same launch (the two jobs run at once; each test reads its own), the same proof for Megatron
Bridge main's own Slurm launcher shape (issue 31): its ``SlurmTemplate`` with ``bash -c '{{ pre_cmds }} {{ command
}}'`` (``INLINE_TEMPLATE`` read from the pinned upstream file in tests/fixtures/upstream), PreemptionPlugin alone,
one rank run by a plain interpreter under ``bash <script>`` -> ``bash -c``. Forwarding the signal to the task's
first process (the outer bash) killed the bash and with it the step, so nothing was saved; the forwarder now picks
the first non-shell process under it, and without ft_launcher NeMo-Run's *plain* template decides the requeue.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

from nemo_resiliency_plugins.job import log_lines as ll
from nemo_resiliency_plugins.tools.report import report_experiment
from tests.slurm.nrp_jobs import finished_hash, launcher_times, submit
from tests.slurm_fixture import TERMINAL_STATES

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

TRAIN_ITERS = 1000
STEP_TIME = "0.1"  # >= 100 s of training: outlasts the latest signal (90 s after the limit is shortened)
UPSTREAM = Path(__file__).parents[1] / "fixtures" / "upstream" / "mbridge-main" / "scripts" / "performance"


def _ft_settings() -> dict:
    return dict(
        num_in_job_restarts=1,
        num_job_retries_on_failure=1,
        section_timeouts={"setup": 300, "step": 60, "checkpointing": 120},
        out_of_section_timeout=120,
        workload_check_interval=2,
    )


def _mbridge_template() -> str:
    """Megatron Bridge main's INLINE_TEMPLATE, from the pinned upstream file (not a copy of it)."""
    sys.path.insert(0, str(UPSTREAM))
    try:
        from utils.executors import INLINE_TEMPLATE  # the upstream module; imports only nemo_run
    finally:
        sys.path.remove(str(UPSTREAM))
    assert "bash -c '{{ pre_cmds }} {{ command }}'" in INLINE_TEMPLATE
    return INLINE_TEMPLATE


def _preempted_job(local_slurm, tmp_path: Path, name: str, **shape) -> dict:
    """One job submitted with a 10-minute limit, shortened once it trains and given back once it is requeued."""
    t0 = time.monotonic()
    save = tmp_path / "ckpt"
    job = submit(
        local_slurm,
        tmp_path,
        name=name,
        args=[f"checkpoint.save={save}", f"train.train_iters={TRAIN_ITERS}", "checkpoint.save_interval=400"],
        time_limit="00:10:00",
        env={"NRP_STEP_TIME": STEP_TIME},
        preemption=dict(preempt_time=60),
        **shape,
    )
    _shorten_limit_once_training(local_slurm, job)
    _restore_limit_after_requeue(local_slurm, job)
    res = local_slurm.wait(job.job_id, timeout=600)
    return dict(job=job, res=res, save=save, seconds=time.monotonic() - t0, script=job.sbatch_script())


@pytest.fixture(scope="module")
def preempted(local_slurm, tmp_path_factory) -> dict:
    """The three jobs, run at once: under ft_launcher (FaultTolerancePlugin too), under Megatron Bridge's launcher and
    under NeMo-Run's torchrun launcher."""
    shapes = {
        "ft": dict(ft=_ft_settings()),
        # pre_cmds as upstream joins them (" ; "): a command before the training one, so bash -c cannot exec it.
        "mbridge-bash-c": dict(
            ntasks_per_node=1, launcher=dict(template=_mbridge_template(), vars={"pre_cmds": "echo nrp-pre-cmd ;"})
        ),
        # NeMo-Run's torchrun launcher, PreemptionPlugin alone (one rank: the two-rank case is a unit test).
        "torchrun": dict(ntasks_per_node=1, launcher="torchrun"),
    }
    with ThreadPoolExecutor(len(shapes)) as pool:
        futures = {
            s: pool.submit(
                _preempted_job, local_slurm, tmp_path_factory.mktemp(f"preempt-{s}"), f"nrp-preempt-{s}", **kw
            )
            for s, kw in shapes.items()
        }
        # One job's failure (an assertion while waiting on it) fails that job's tests only, not the other's.
        return {s: f.exception() or f.result() for s, f in futures.items()}


def _job(preempted: dict, shape: str) -> dict:
    out = preempted[shape]
    if isinstance(out, BaseException):
        raise out
    return out


def test_slurm_signal_before_time_limit_saves_exits_0_and_requeued_job_resumes(preempted):
    out = _job(preempted, "ft")
    job, res, save, script, elapsed = out["job"], out["res"], out["save"], out["script"], out["seconds"]
    # B: the batch shell gets it and sends it to the step's task (ft_launcher) only; see preemption.py.
    assert "#SBATCH --signal=B:TERM@60" in script, script
    assert "trap 'nrp_forward_signal TERM' TERM" in script
    assert "#SBATCH --time=00:10:00" in script
    assert "ft_launcher" in script and "train.exit_signal=15" in script, script
    logs = job.logs()
    assert (res.state, res.exit_code) == ("COMPLETED", 0), (res.record, logs[-8000:])

    attempts = job.attempt_logs()
    first = attempts[0]
    # Megatron Bridge's handler caught Slurm's SIGTERM in the ranks; the workload saved and exited 0.
    assert "Received signal 15, initiating graceful stop" in first, first[-6000:]
    exit_steps = [int(s) for s in ll.WORKLOAD_EXIT_ON_SIGNAL.findall(first)]
    assert exit_steps, first[-6000:]
    stopped_at = exit_steps[0]
    assert 0 < stopped_at < TRAIN_ITERS
    assert f"CHECKPOINT saved step={stopped_at}" in first
    assert "sent SIGTERM to task pid" in logs, logs[-6000:]
    # ft_launcher forwarded the signal, waited for the save, and exited without an error.
    assert "All ranks exited gracefully" in first, first[-6000:]
    assert "FINISHED" not in first

    # The checkpoint written on the signal is complete and loadable.
    ckpt = torch.load(save / f"iter_{stopped_at:07d}.pt", map_location="cpu", weights_only=True)
    assert ckpt["step"] == stopped_at and ckpt["world_size"] == 2
    assert ckpt["train_state"]["step"] == stopped_at
    assert (save / "latest_checkpointed_iteration.txt").read_text().strip().isdigit()

    # Requeued (exit 0 after the preemption signal), resumed from that checkpoint, finished, not requeued.
    assert res.restarts == 1, res.record
    second = attempts[1]
    assert f"RESUMED from step {stopped_at} (iter_{stopped_at:07d}.pt)" in second, second[-6000:]
    step, _ = finished_hash(attempts[max(attempts)])
    assert step == TRAIN_ITERS
    # ... and then not requeued again: the guard wrote NeMo-Run's finished flag.
    assert "finished, not requeued" in logs, logs[-4000:]
    assert any(job.task_dir().glob("*_finished_flag")), sorted(p.name for p in job.task_dir().iterdir())
    results = next(job.task_dir().glob("*_job_results")).read_text().split("\n")
    assert all(line.endswith(" S") for line in results if line.strip()), results

    signal_at = launcher_times(first, "Received 15 death signal")[0]
    exit_at = launcher_times(first, "Agent exits with exit code = 0")[0]
    resumed_at = launcher_times(second)[0]
    print(
        f"\npreemption job {job.job_id}: stopped at step {stopped_at}, restarts {res.restarts}, "
        f"SIGTERM at ft_launcher -> launcher exit 0: {exit_at - signal_at:.1f} s, "
        f"launcher exit -> requeued run's launcher up: {resumed_at - exit_at:.1f} s, test {elapsed / 60:.1f} min"
    )


def test_megatron_bridge_bash_c_launcher_gets_the_signal_saves_requeues_and_resumes(preempted):
    out = _job(preempted, "mbridge-bash-c")
    job, res, save, script = out["job"], out["res"], out["save"], out["script"]
    assert "#SBATCH --signal=B:TERM@60" in script, script
    # PreemptionPlugin alone: NeMo-Run's plain template (the ft_launcher one defines this function).
    assert not re.search(r"^is_job_failures_limit_reached\(\)", script, re.M), script
    # The wrapper really was Megatron Bridge's: NeMo-Run's task script holds its bash -c line.
    texts = [p.read_text() for p in job.exp_dir.rglob("*.sh")]
    assert any("bash -c 'echo nrp-pre-cmd ;" in t for t in texts), texts
    logs = job.logs()
    assert (res.state, res.exit_code) == ("COMPLETED", 0), (res.record, logs[-8000:])
    attempts = job.attempt_logs()
    first = attempts[0]
    exit_steps = [int(x) for x in ll.WORKLOAD_EXIT_ON_SIGNAL.findall(first)]
    assert exit_steps, first[-6000:]
    stopped_at = exit_steps[0]
    assert 0 < stopped_at < TRAIN_ITERS
    assert f"CHECKPOINT saved step={stopped_at}" in first, first[-6000:]
    assert (save / f"iter_{stopped_at:07d}.pt").is_file(), sorted(p.name for p in save.iterdir())
    # Who got the forwarded signal: the first non-shell process of the task, the rank's Python, not the bash.
    sent = re.findall(r"sent SIGTERM to task pid \d+ \((\S+)\)", logs)
    assert sent and all(name.startswith("python") for name in sent), (sent, logs[-6000:])
    # Requeued by the guard (plain template: a run that exited 0 after the signal), resumed, finished, not again.
    assert "exited 0 after SIGTERM: preempted, requeue" in logs, logs[-4000:]
    assert res.restarts == 1, res.record
    second = attempts[1]
    assert f"RESUMED from step {stopped_at} (iter_{stopped_at:07d}.pt)" in second, second[-6000:]
    assert finished_hash(second)[0] == TRAIN_ITERS
    print(f"\nMegatron Bridge bash -c launcher: job {job.job_id} stopped at step {stopped_at}, {out['seconds']:.0f} s")


def test_torchrun_launcher_gets_the_signal_to_its_rank_exits_0_and_is_requeued(preempted):
    """torchrun itself, signalled, passes the signal on and exits 1 even though its ranks saved and exited 0, and
    NeMo-Run's plain template (retries=0) would end the job FAILED; the forwarding signals torchrun's ranks."""
    out = _job(preempted, "torchrun")
    job, res, save, script = out["job"], out["res"], out["save"], out["script"]
    assert "#SBATCH --signal=B:TERM@60" in script and "torchrun" in script, script
    assert (save / "latest_checkpointed_iteration.txt").is_file(), sorted(p.name for p in save.iterdir())
    assert not re.search(r"^is_job_failures_limit_reached\(\)", script, re.M), script
    logs = job.logs()
    assert (res.state, res.exit_code) == ("COMPLETED", 0), (res.record, logs[-8000:])
    first = job.attempt_logs()[0]
    stopped_at = int(ll.WORKLOAD_EXIT_ON_SIGNAL.findall(first)[0])
    assert f"CHECKPOINT saved step={stopped_at}" in first, first[-6000:]
    # The rank got it, not torchrun (torch names torchrun's thread pt_elastic), and torchrun ended without error.
    sent = re.findall(r"sent SIGTERM to task pid \d+ \((\S+)\)", logs)
    assert sent and "pt_elastic" not in sent, (sent, logs[-6000:])
    assert "SignalException" not in first, first[-6000:]
    assert "exited 0 after SIGTERM: preempted, requeue" in logs, logs[-4000:]
    assert res.restarts == 1, res.record
    second = job.attempt_logs()[1]
    assert f"RESUMED from step {stopped_at} (iter_{stopped_at:07d}.pt)" in second, second[-6000:]
    assert finished_hash(second)[0] == TRAIN_ITERS
    print(f"\ntorchrun launcher: job {job.job_id} stopped at step {stopped_at}, {out['seconds']:.0f} s")


def _record(local_slurm, job, patience_s: float = 60) -> dict:
    """The job's record; a controller too busy to answer (job_record gives ``{}``) is asked again, every 0.5 s for
    at most ``patience_s``, before the job is declared unknown."""
    deadline = time.monotonic() + patience_s
    while True:
        rec, _ = local_slurm.job_record(job.job_id)
        if rec or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert rec, f"job {job.job_id} unknown to Slurm"
    return rec


def _seconds(text: str) -> int:
    days, _, hms = text.rpartition("-")
    h, m, s = (int(x) for x in hms.split(":"))
    return ((int(days or 0) * 24 + h) * 60 + m) * 60 + s


def _scontrol_update(job, setting: str) -> None:
    p = subprocess.run(["scontrol", "update", f"jobid={job.job_id}", setting], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr


def _shorten_limit_once_training(local_slurm, job, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while "STARTING from scratch" not in job.attempt_logs().get(0, ""):
        rec = _record(local_slurm, job)
        assert rec.get("JobState") not in TERMINAL_STATES, (rec, job.logs()[-6000:])
        assert time.monotonic() < deadline, job.logs()[-6000:]
        time.sleep(0.5)
    # RunTime is a field of the live record only (scontrol): the job is training, so that is the record read here.
    runtime = _seconds(_record(local_slurm, job)["RunTime"])
    _scontrol_update(job, f"TimeLimit={-(-(runtime + 90) // 60)}")  # whole minutes: 90-150 s from now


def _restore_limit_after_requeue(local_slurm, job, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while True:
        rec = _record(local_slurm, job)
        # Requeued: held PENDING (Slurm's BeginTime hold), or already RUNNING if that hold was cut short.
        if rec.get("Restarts", "0") != "0" and rec.get("JobState") in ("PENDING", "RUNNING"):
            break
        # Between its runs scontrol shows the job in passing states (SIGNALING while the batch shell's signal is
        # delivered, COMPLETING, REQUEUED; seen in the project's CI): only a final state ends the wait.
        assert rec.get("JobState") not in TERMINAL_STATES, (rec, job.logs()[-6000:])
        assert time.monotonic() < deadline, (rec, job.logs()[-6000:])
        time.sleep(0.5)
    _scontrol_update(job, "TimeLimit=10")


@pytest.mark.parametrize("shape", ["ft", "mbridge-bash-c", "torchrun"])
def test_report_of_each_preempted_job(preempted, shape):
    """`nemo-resiliency report` (issue 36) on both jobs: one attempt stopped by the signal with its save, the
    requeue the guard made, the attempt that resumed from that save and finished."""
    out = _job(preempted, shape)
    (job,) = report_experiment(out["job"].exp_dir)
    first = out["job"].attempt_logs()[0]
    stopped_at = int(ll.WORKLOAD_EXIT_ON_SIGNAL.findall(first)[0])
    assert (job.requeues, job.restarts, job.finished) == (1, 0, True)
    (stopped,), (resumed,) = (a.cycles for a in job.attempts)
    assert stopped.injected == [] and stopped.finished_step is None
    assert stopped.detected_by == "SIGTERM to the ranks (saved, exited)"  # Megatron Bridge's line after the save
    assert stopped.checkpoints[-1] == stopped_at and stopped.resumed_from is None
    assert (resumed.resumed_from, resumed.finished_step) == (stopped_at, TRAIN_ITERS)
    # Saved at the signal, right after the last iteration it reported: a preemption costs no iteration.
    assert stopped.last_iteration == stopped_at and job.iterations() == (TRAIN_ITERS, 0)
    if shape in ("ft", "torchrun"):  # ft_launcher's and torchrun's own log lines time each attempt
        assert all(a.launcher_stamped for a in job.attempts) and 0 < job.goodput() < 1
    else:  # a plain interpreter stamps nothing but training_log lines: its start-up cannot be timed, so no figure
        assert not any(a.launcher_stamped for a in job.attempts) and job.goodput() is None
        assert all(a.wall_s is None for a in job.attempts)  # a training_log span is no launcher wall time
    verdicts = ["step exited 0 after SIGTERM: preempted, requeue"]
    if shape == "ft":  # the ft_launcher template calls scontrol requeue after every run; the plain one on failure
        verdicts.append("step exited 0 without a preemption signal: finished, not requeued")
    assert [line for line in job.guard if "requeue" in line] == verdicts, job.guard
