"""LocalCheckpointPlugin end to end on CPU: 2 gloo ranks of the reference workload under NVRx's ft_launcher, local
checkpoints written and read by NVRx's real ``LocalCheckpointManager`` (Megatron Core ``MCoreTensorAwareStateDict``,
algo ``atomic``), persistent checkpoints every 5 steps, local every step. One launch, two faults in a row:

1. a rank killed right after a local save: the in-job restart resumes from that local checkpoint;
2. later, a rank whose newest local checkpoint is cut in half before it dies (a node crash after NVRx renamed an
   unsynced file): with ``fallback_on_unreadable`` (default) the rank's guard sets the file aside and the restart
   resumes from the newest persistent checkpoint. Megatron Bridge 0.6.2 alone fails on every restart there
   (seen on its real loop on the H200, ``benchmarks/results/gpu/2026-12-04-evening/summary.md``).

What needs CUDA and is not run here (``testing/mcore_checkpoint.py`` says where upstream calls CUDA): algo
``fully_parallel`` at load, replication (a lost node's shard fetched from a peer), async saves (NVRx's persistent
worker, Megatron Core's torch_dist writer).
"""

from __future__ import annotations

import re

import pytest

from nemo_resiliency_plugins import FaultTolerancePlugin, LocalCheckpointPlugin
from nemo_resiliency_plugins.job import log_lines as ll
from nemo_resiliency_plugins.testing.local_run import run_local
from nemo_resiliency_plugins.tools.report import report_job
from tests.helpers import assert_ended_by_kill, workload_script

STEPS = 20
PERSISTENT_INTERVAL = 5  # the reference config's checkpoint.save_interval
KILL_STEP = 13  # the newest persistent checkpoint is step 10, the newest local one step 13
CORRUPT_STEP = 17  # the newest persistent checkpoint is step 15, the newest local one (damaged on rank 1) step 17


@pytest.fixture(scope="module")
def local_ckpt_job(tmp_path_factory):
    """The one launch: the kill after a local save, then the damaged local file."""
    tmp_path = tmp_path_factory.mktemp("local-ckpt")
    save, local_dir = tmp_path / "ckpt", tmp_path / "node-local"
    task = workload_script(save, f"kill@{KILL_STEP},corrupt_local@{CORRUPT_STEP}", step_time="0.1", fault_step=0)
    task.args += [f"checkpoint.save_interval={PERSISTENT_INTERVAL}"]
    plugins = [
        FaultTolerancePlugin(
            num_in_job_restarts=2,
            section_timeouts={"setup": 180, "step": 10, "checkpointing": 60},
            out_of_section_timeout=90,
            workload_check_interval=1,
        ),
        LocalCheckpointPlugin(
            non_persistent_local_ckpt_dir=str(local_dir),
            non_persistent_save_interval=1,
            non_persistent_local_ckpt_algo="atomic",
        ),
    ]
    return run_local(task, plugins, name="local-ckpt-kill"), local_dir


def test_rank_killed_after_a_local_save_resumes_from_it_and_a_damaged_one_falls_back_to_persistent(local_ckpt_job):
    result, local_dir = local_ckpt_job
    assert result.state == "SUCCEEDED", result.log[-4000:]
    resumed = [line for line in result.lines if "RESUMED from step" in line]
    assert len(resumed) == 4, resumed  # two ranks, two restarts
    # 1. The killed rank's restart loaded the local checkpoint written just before the kill: nothing redone.
    assert result.grep(f"CHECKPOINT local step={KILL_STEP} ")
    assert result.grep(f"FAULT_INJECTED kind=kill step={KILL_STEP}")
    first, second = resumed[:2], resumed[2:]
    assert all(f"RESUMED from step {KILL_STEP} (local" in line for line in first), first
    assert f"persistent newest {KILL_STEP - KILL_STEP % PERSISTENT_INTERVAL}" in first[0]
    # 2. The damaged file was set aside by rank 1's guard, and the restart fell back to the persistent step 15
    #    (not to scratch, not to the damaged file).
    assert result.grep(f"FAULT_INJECTED kind=corrupt_local step={CORRUPT_STEP}")
    damaged = f"iter_{CORRUPT_STEP:07d}_1_local.pt"
    assert result.grep(f"FAULT_CORRUPTED {local_dir / '1' / damaged}")
    set_aside = result.grep("[nrp-local-guard] rank 1: set aside")
    assert len(set_aside) == 1 and damaged in set_aside[0] and "BadZipFile" in set_aside[0], set_aside
    persistent = CORRUPT_STEP - CORRUPT_STEP % PERSISTENT_INTERVAL
    assert all(f"RESUMED from step {persistent} (iter_{persistent:07d}" in line for line in second), second
    assert len(result.grep("STARTING from scratch")) == 2  # the first start only, never after a checkpoint
    # Every start of every rank ran the guard (3 starts x 2 ranks).
    assert len(result.grep("[nrp-local-guard] rank ")) - len(set_aside) == 6, result.grep("[nrp-local-guard]")
    assert result.grep(f"FINISHED step={STEPS}")
    # No local save on persistent-save steps (Megatron Bridge's schedule), one local file per rank kept by NVRx,
    # plus the damaged one, kept for inspection under a name NVRx does not read.
    assert not result.grep(f"CHECKPOINT local step={2 * PERSISTENT_INTERVAL} ")
    for rank in (0, 1):
        files = sorted(p.name for p in (local_dir / str(rank)).iterdir())
        kept = [f for f in files if not f.endswith(".unreadable")]
        assert kept and all(re.fullmatch(rf"iter_\d+_{rank}_local\.pt", f) for f in kept), files
        assert [f for f in files if f.endswith(".unreadable")] == ([damaged + ".unreadable"] if rank else []), files
    pattern = ll.WORKLOAD_LOCAL_SAVED
    seconds = sorted(float(m.group(2)) for line in result.lines if (m := pattern.search(line)))
    median = seconds[len(seconds) // 2]
    print(
        f"local saves: n={len(seconds)} median={median:.4f} s; steps lost to the kill: 0 (3 without them); "
        f"to the damaged file: {CORRUPT_STEP - persistent} (every restart fails without the guard)"
    )


def test_report_of_the_local_checkpoint_job(local_ckpt_job):
    """`nemo-resiliency report` (issue 36): the restart after the kill resumed from the local step-13 checkpoint
    (nothing trained twice), the one after the damaged file from the persistent step 15 (16-17 twice)."""
    result, _ = local_ckpt_job
    job = report_job(result.job_dir)
    assert (job.requeues, job.restarts, job.finished) == (0, 2, True)
    kill, damaged, last = job.rows
    assert kill.injected == [f"kill at step {KILL_STEP} on rank 1"]
    assert_ended_by_kill(kill, rank=1)
    # The column lists persistent checkpoints (the workload's CHECKPOINT saved lines), not every-step local ones.
    assert (kill.checkpoints, kill.last_iteration, kill.resumed_from) == ([5, 10], KILL_STEP, None)
    assert damaged.injected == [f"corrupt_local at step {CORRUPT_STEP} on rank 1"]
    assert (damaged.resumed_from, damaged.checkpoints, damaged.last_iteration) == (KILL_STEP, [15], CORRUPT_STEP)
    assert_ended_by_kill(damaged, rank=1)
    assert (last.resumed_from, last.finished_step) == (15, STEPS)
    assert job.iterations() == (STEPS, CORRUPT_STEP - 15) and 0 < job.goodput() < 1
