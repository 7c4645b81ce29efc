"""LocalCheckpointPlugin end to end on CPU: 2 gloo ranks of the reference workload under NVRx's ft_launcher, local
checkpoints written and read by NVRx's real ``LocalCheckpointManager`` (Megatron Core ``MCoreTensorAwareStateDict``,
algo ``atomic``), a rank killed right after a local save, and the in-job restart resuming from that local
checkpoint (persistent checkpoints every 5 steps, local every step).

What needs CUDA and is not run here (``testing/mcore_checkpoint.py`` says where upstream calls CUDA): algo
``fully_parallel`` at load, replication (a lost node's shard fetched from a peer), async saves (NVRx's persistent
worker, Megatron Core's torch_dist writer).
"""

from __future__ import annotations

import re

from nemo_resiliency_plugins import FaultTolerancePlugin, LocalCheckpointPlugin
from nemo_resiliency_plugins.testing.local_run import run_local
from tests.helpers import workload_script

STEPS = 20
PERSISTENT_INTERVAL = 5  # the reference config's checkpoint.save_interval
KILL_STEP = 13  # the newest persistent checkpoint is step 10, the newest local one step 13


def test_rank_killed_after_a_local_save_resumes_from_it_with_nothing_lost(tmp_path):
    save, local_dir = tmp_path / "ckpt", tmp_path / "node-local"
    task = workload_script(save, "kill", step_time="0.1", fault_step=KILL_STEP)
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
    result = run_local(task, plugins, name="local-ckpt-kill")
    assert result.state == "SUCCEEDED", result.log[-4000:]
    assert result.grep(f"CHECKPOINT local step={KILL_STEP} ")
    assert result.grep(f"FAULT_INJECTED kind=kill step={KILL_STEP}")
    resumed = [line for line in result.lines if "RESUMED from step" in line]
    assert resumed and all(f"RESUMED from step {KILL_STEP} (local" in line for line in resumed), resumed
    assert f"persistent newest {KILL_STEP - KILL_STEP % PERSISTENT_INTERVAL}" in resumed[0]
    assert result.grep(f"FINISHED step={STEPS}")
    # No local save on persistent-save steps (Megatron Bridge's schedule), one local file per rank kept by NVRx.
    assert not result.grep(f"CHECKPOINT local step={2 * PERSISTENT_INTERVAL} ")
    for rank in (0, 1):
        files = sorted(p.name for p in (local_dir / str(rank)).iterdir())
        assert files and all(re.fullmatch(rf"iter_\d+_{rank}_local\.pt", f) for f in files), files
    pattern = re.compile(r"CHECKPOINT local step=\d+ seconds=([0-9.]+)")
    seconds = sorted(float(m.group(1)) for line in result.lines if (m := pattern.search(line)))
    median = seconds[len(seconds) // 2]
    print(f"local saves: n={len(seconds)} median={median:.4f} s; steps lost to the kill: 0 (3 without them)")
