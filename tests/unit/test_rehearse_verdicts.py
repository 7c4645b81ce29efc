"""The rehearsal's verdict on one fault run, read by its real log watcher from a job log written here: a restart
that trains from iteration 0 although a checkpoint existed fails the rehearsal (Megatron Bridge resumes only from
checkpoint.load). The launching rehearsals themselves are in tests/smoke/test_rehearse.py."""

from __future__ import annotations

import time
from pathlib import Path

import torch

from nemo_resiliency_plugins.tools.rehearse.report import RunOutcome
from nemo_resiliency_plugins.tools.rehearse.run import _judge
from nemo_resiliency_plugins.tools.rehearse.watch import Watch

FIRST_ATTEMPT = [
    "[rank0] STARTING from scratch",
    "[rank0] CHECKPOINT saved step=5",
    "[rank0] CHECKPOINT saved step=10",
    "[rank1] FAULT_INJECTED kind=kill step=13 rank=1",
]
WORKER_FAILED = ["[default] Worker group FAILED. 3/3 attempts left; will restart worker group"]


def _judge_log(tmp_path: Path, *after_fault: str):
    save = tmp_path / "ckpt"
    save.mkdir()
    torch.save({"w": torch.ones(2)}, save / "final_params.pt")
    log = tmp_path / "job" / "combined.log"
    log.parent.mkdir()
    watch = Watch(str(tmp_path / "job"), time.monotonic(), None)
    for chunk in (FIRST_ATTEMPT, WORKER_FAILED, list(after_fault)):
        with log.open("a") as handle:
            handle.write("".join(line + "\n" for line in chunk))
        watch._scan()
        time.sleep(0.02)  # events are stamped when seen: the restart's lines come after the fault's
    run = RunOutcome("kill", "SUCCEEDED", 30.0, str(tmp_path / "job"), str(save))
    return _judge("kill", run, watch, 60.0, run, [])


def test_a_restart_from_scratch_after_a_checkpoint_fails_the_rehearsal(tmp_path):
    result = _judge_log(tmp_path, "[rank0] STARTING from scratch", "[rank0] FINISHED step=20 params_sha256=ab")
    assert not result.ok
    assert any("trained from iteration 0 although step 5 was checkpointed" in r for r in result.reasons), result.reasons


def test_a_restart_that_resumes_passes(tmp_path):
    result = _judge_log(
        tmp_path, "[rank0] RESUMED from step 10 (iter_0000010.pt)", "[rank0] FINISHED step=20 params_sha256=ab"
    )
    assert result.ok, result.reasons
    assert result.resumed_from == 10
