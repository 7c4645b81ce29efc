"""PreemptionPlugin's signal reaches the rank that saves under every launcher shape, on a real local Slurm.

The batch shell gets ``--signal=B:TERM@60`` and forwards it to each task (core/sbatch/forward_signal.sh): to the
task's first process, or, when that is a shell, to the first non-shell process under it. Three launcher shapes
run side by side here (one node each, so the test adds one job's time, not three), each without
FaultTolerancePlugin, so NeMo-Run's *plain* sbatch template decides the requeue:

* Megatron Bridge main's own Slurm launcher: its ``SlurmTemplate`` with ``bash -c '{{ pre_cmds }} {{ command }}'``
  (``INLINE_TEMPLATE`` read from the pinned upstream file in tests/fixtures/upstream), which NeMo-Run runs as
  ``bash <script>`` -> ``bash -c`` -> ``python``. Forwarding to the task's first process (the outer bash) killed
  the bash and with it the step: nothing was saved (issue 31);
* ``torchrun`` (``executor.launcher = "torchrun"``): torchrun gets it and passes it to its rank;
* a plain interpreter (no launcher): the rank itself.

For each: Megatron Bridge's handler catches the signal, the workload saves and exits 0, the job requeues itself
(the plain template requeues only failures; the requeue guard requeues a run that exited 0 after the signal),
and the next run resumes from that checkpoint and finishes. Timing as in test_preemption_slurm.py: the limit is
shortened once the ranks train, so the signal comes during training.
"""

from __future__ import annotations

import re
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.slurm.nrp_jobs import finished_hash, submit
from tests.slurm.test_preemption_slurm import _restore_limit_after_requeue, _shorten_limit_once_training

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

TRAIN_ITERS = 1000
STEP_TIME = "0.1"  # >= 100 s of training: outlasts the latest signal (150 s after the limit is shortened)
UPSTREAM = Path(__file__).parents[1] / "fixtures" / "upstream" / "mbridge-main" / "scripts" / "performance"


def _mbridge_template() -> str:
    """Megatron Bridge main's INLINE_TEMPLATE, from the pinned upstream file (not a copy of it)."""
    sys.path.insert(0, str(UPSTREAM))
    try:
        from utils.executors import INLINE_TEMPLATE  # the upstream module; imports only nemo_run
    finally:
        sys.path.remove(str(UPSTREAM))
    assert "bash -c '{{ pre_cmds }} {{ command }}'" in INLINE_TEMPLATE
    return INLINE_TEMPLATE


SHAPES = {
    # pre_cmds as upstream joins them (" ; "): a command before the training one, so bash -c cannot just exec it.
    "mbridge-bash-c": dict(template=_mbridge_template(), vars={"pre_cmds": "echo nrp-pre-cmd ;"}),
    "torchrun": "torchrun",
    "plain": None,
}


def _one_job(local_slurm, tmp_path: Path, shape: str) -> dict:
    t0 = time.monotonic()
    save = tmp_path / "ckpt"
    job = submit(
        local_slurm,
        tmp_path,
        name=f"nrp-preempt-{shape}",
        args=[f"checkpoint.save={save}", f"train.train_iters={TRAIN_ITERS}", "checkpoint.save_interval=400"],
        time_limit="00:10:00",
        env={"NRP_STEP_TIME": STEP_TIME},
        preemption=dict(preempt_time=60),
        ntasks_per_node=1,
        launcher=SHAPES[shape],
    )
    script = job.sbatch_script()
    assert "#SBATCH --signal=B:TERM@60" in script, script
    assert "ft_launcher" not in script
    _shorten_limit_once_training(local_slurm, job)
    _restore_limit_after_requeue(local_slurm, job)
    res = local_slurm.wait(job.job_id, timeout=600)
    return dict(job=job, res=res, save=save, seconds=time.monotonic() - t0, script=script)


def test_signal_reaches_the_rank_under_each_launcher_shape_save_requeue_resume(local_slurm, tmp_path):
    for s in SHAPES:
        (tmp_path / s).mkdir()
    with ThreadPoolExecutor(len(SHAPES)) as pool:
        futures = {s: pool.submit(_one_job, local_slurm, tmp_path / s, s) for s in SHAPES}
        done = {s: f.result() for s, f in futures.items()}
    for shape, out in done.items():
        job, res, save = out["job"], out["res"], out["save"]
        logs = job.logs()
        assert (res.state, res.exit_code) == ("COMPLETED", 0), (shape, res.record, logs[-8000:])
        attempts = job.attempt_logs()
        first = attempts[0]
        exit_steps = [int(x) for x in re.findall(r"EXIT on signal step=(\d+)", first)]
        assert exit_steps, (shape, first[-6000:])
        stopped_at = exit_steps[0]
        assert 0 < stopped_at < TRAIN_ITERS
        assert f"CHECKPOINT saved step={stopped_at}" in first, (shape, first[-6000:])
        assert (save / f"iter_{stopped_at:07d}.pt").is_file(), (shape, sorted(p.name for p in save.iterdir()))
        # Who got the forwarded signal: the first non-shell process of the task.
        sent = re.findall(r"sent SIGTERM to task pid \d+ \((\S+)\)", logs)
        assert sent, (shape, logs[-6000:])
        if shape == "torchrun":
            assert sent == ["torchrun"], (shape, sent)
        else:
            assert sent and all(name.startswith("python") for name in sent), (shape, sent)
        # Requeued by the guard (plain template), resumed from that checkpoint, finished, not requeued again.
        assert "exited 0 after SIGTERM: preempted, requeue" in logs, (shape, logs[-4000:])
        assert res.restarts == 1, (shape, res.record)
        second = attempts[1]
        assert f"RESUMED from step {stopped_at} (iter_{stopped_at:07d}.pt)" in second, (shape, second[-6000:])
        assert finished_hash(second)[0] == TRAIN_ITERS
        print(f"\n{shape}: job {job.job_id} stopped at step {stopped_at}, {out['seconds']:.0f} s")
    # The wrapper really was Megatron Bridge's: NeMo-Run's task script holds its bash -c line.
    texts = [p.read_text() for p in done["mbridge-bash-c"]["job"].exp_dir.rglob("*.sh")]
    assert any("bash -c 'echo nrp-pre-cmd ;" in t for t in texts), texts
