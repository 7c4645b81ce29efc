"""LocalCheckpointPlugin.fallback_on_unreadable: the guard each rank runs first (on real ``torch.save`` files and
NVRx's real ``LocalCheckpointManager``), and how the plugin wires it per task type and executor.

The end-to-end case (a damaged local checkpoint, the restart falling back to the persistent one) is in
``tests/smoke/test_checkpoint_local.py``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import nemo_run as run
import pytest
import torch

from nemo_resiliency_plugins import LocalCheckpointPlugin, ResiliencyConfigError
from nemo_resiliency_plugins.core.front_program import GUARD_FILE, guard_source
from nemo_resiliency_plugins.job import local_checkpoint_guard as guard
from tests.helpers import add_job, local, logged, slurm

SCHEDULE = ["checkpoint.save=/ckpt", "checkpoint.load=/ckpt", "checkpoint.save_interval=100"]
WORKLOAD = "nemo_resiliency_plugins.testing.workload"


def lcp(**kw) -> LocalCheckpointPlugin:
    return LocalCheckpointPlugin(
        **{"non_persistent_local_ckpt_dir": "/local/ckpt", "non_persistent_save_interval": 10, **kw}
    )


def module_task() -> run.Script:
    return run.Script(path=WORKLOAD, m=True, entrypoint="python", args=list(SCHEDULE))


def _save(path: Path, value: float) -> None:
    torch.save({"w": torch.full((4096,), value), "step": int(value)}, path)


@pytest.fixture
def rank_dir(tmp_path) -> Path:
    """Rank 0's local directory with NVRx-named files: good, cut in half, one flipped byte, a peer's replica,
    and a ``.dirty`` file (an unfinished save, which NVRx never reads)."""
    d = tmp_path / "local" / "0"
    d.mkdir(parents=True)
    for it in (5, 6, 7):
        _save(d / f"iter_{it:07d}_0_local.pt", float(it))
    _save(d / "iter_0000007_1_local.pt", 7.0)
    _save(d / "iter_0000008_0_local.pt.dirty", 8.0)
    cut = d / "iter_0000007_0_local.pt"
    os.truncate(cut, cut.stat().st_size // 2)
    flipped = d / "iter_0000006_0_local.pt"
    data = bytearray(flipped.read_bytes())
    data[len(data) // 2] ^= 0xFF  # inside the tensor's bytes
    flipped.write_bytes(bytes(data))
    return d


def _nvrx_ids(root: Path) -> set[tuple[int, int]]:
    """What NVRx's LocalCheckpointManager (rank 0, no process group) would offer to find_latest."""
    from nvidia_resiliency_ext.checkpointing.local.ckpt_managers.local_manager import LocalCheckpointManager

    return {(it, rank) for it, rank, _ in LocalCheckpointManager(str(root))._my_ckpt_ids()}


def test_a_flipped_byte_loads_silently_with_torch_which_is_why_the_guard_checks_crcs(rank_dir):
    loaded = torch.load(rank_dir / "iter_0000006_0_local.pt")  # no error: the damage goes unnoticed
    assert not torch.equal(loaded["w"], torch.full((4096,), 6.0))
    assert guard.unreadable_reason(str(rank_dir / "iter_0000006_0_local.pt")).startswith("CRC-32 mismatch")
    assert guard.unreadable_reason(str(rank_dir / "iter_0000007_0_local.pt")).startswith("BadZipFile")
    assert guard.unreadable_reason(str(rank_dir / "iter_0000005_0_local.pt")) is None


def test_the_shipped_guard_sets_aside_damaged_files_then_runs_the_program_with_its_arguments(rank_dir, tmp_path):
    root = rank_dir.parent
    assert _nvrx_ids(root) == {(5, 0), (6, 0), (7, 0), (7, 1)}
    shipped = tmp_path / GUARD_FILE
    shipped.write_text(guard_source())  # the file as the plugin ships it: standard library only
    (tmp_path / "nrp_target_mod.py").write_text("import sys\nprint('TARGET', sys.argv[1:])\n")
    env = {**os.environ, "RANK": "0", guard.DIR_ENV: str(root), guard.TARGET_ENV: "module:nrp_target_mod"}
    done = subprocess.run(
        [sys.executable, str(shipped), "a=1", "--b"], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert "TARGET ['a=1', '--b']" in done.stdout
    assert _nvrx_ids(root) == {(5, 0), (7, 1)}  # the peer's replica of 7 stays on offer
    assert sorted(p.name for p in rank_dir.iterdir()) == [
        "iter_0000005_0_local.pt",
        "iter_0000006_0_local.pt.unreadable",
        "iter_0000007_0_local.pt.unreadable",
        "iter_0000007_1_local.pt",
        "iter_0000008_0_local.pt.dirty",
    ]
    set_aside = [line for line in done.stderr.splitlines() if "set aside /" in line]
    assert len(set_aside) == 2 and "CRC-32" in set_aside[0] and "BadZipFile" in set_aside[1], done.stderr
    assert "2 set aside" in done.stderr


def test_the_guard_runs_a_script_path_and_refuses_a_bad_target(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("import sys\nprint('SCRIPT', sys.argv)\n")
    shipped = tmp_path / GUARD_FILE
    shipped.write_text(guard_source())
    env = {**os.environ, "RANK": "3", guard.DIR_ENV: str(tmp_path / "none"), guard.TARGET_ENV: f"path:{script}"}
    done = subprocess.run([sys.executable, str(shipped), "x"], env=env, capture_output=True, text=True)
    assert done.returncode == 0 and f"SCRIPT ['{script}', 'x']" in done.stdout, done.stderr
    assert "0 set aside" in done.stderr
    env[guard.TARGET_ENV] = "train.py"
    done = subprocess.run([sys.executable, str(shipped)], env=env, capture_output=True, text=True)
    assert done.returncode != 0 and "expected 'module:<name>' or 'path:<file>'" in done.stderr


# ------------------------------------------------------------------------------------------ wiring


def test_a_python_script_runs_the_shipped_guard_first_on_local_and_slurm(tmp_path):
    job = add_job(module_task(), local(), [lcp()])
    env = job.executor.env_vars
    assert job.task.path.endswith(GUARD_FILE) and job.task.m is False
    assert Path(job.task.path).read_text() == guard_source()
    assert env[guard.CHAIN_ENV] == f"local_checkpoint_guard:path:{job.task.path},task:module:{WORKLOAD}"
    assert env[guard.DIR_ENV] == "/local/ckpt"
    assert job.task.args[: len(SCHEDULE)] == SCHEDULE  # the task's own arguments are untouched

    job = add_job(module_task(), slurm(tmp_path), [lcp()])
    assert f"cat > '{job.task.path}' <<'" in job.executor.setup_lines  # written by the sbatch script
    assert job.executor.env_vars[guard.CHAIN_ENV].endswith(f",task:module:{WORKLOAD}")


def test_the_sbatch_script_writes_the_guard_byte_for_byte(tmp_path):
    job = add_job(module_task(), slurm(tmp_path), [lcp()])
    done = subprocess.run(["bash", "-e"], input=job.executor.setup_lines, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert Path(job.task.path).read_text() == guard_source()


def test_where_the_guard_cannot_run_the_default_says_so_and_true_is_refused():
    docker = run.DockerExecutor(container_image="x", num_gpus=0)
    with logged("nemo_resiliency_plugins.local_checkpoint") as log:
        job = add_job(module_task(), docker, [lcp()])
    assert job.task.path == WORKLOAD and guard.CHAIN_ENV not in job.executor.env_vars
    assert any("fallback_on_unreadable not applied" in m and "DockerExecutor" in m for m in log.messages)
    with pytest.raises(ResiliencyConfigError, match=r"fallback_on_unreadable = True.*DockerExecutor"):
        add_job(module_task(), run.DockerExecutor(container_image="x", num_gpus=0), [lcp(fallback_on_unreadable=True)])
    from nemo_resiliency_plugins.testing.te_compat import ensure_megatron_bridge_importable

    ensure_megatron_bridge_importable()
    from nemo_resiliency_plugins.testing import workload

    partial = run.Partial(workload.pretrain, config=workload.reference_config_buildable("/tmp/nrp-ck"))
    with logged("nemo_resiliency_plugins.local_checkpoint") as log:
        add_job(partial, local(), [lcp(non_persistent_save_interval=2)])
    assert any("not applied" in m and "fdl_runner" in m for m in log.messages), log.messages
    with pytest.raises(ResiliencyConfigError, match=r"fallback_on_unreadable = True.*fdl_runner"):
        add_job(partial, local(), [lcp(non_persistent_save_interval=2, fallback_on_unreadable=True)])


def test_explain_shows_the_program_put_in_front():
    from nemo_resiliency_plugins.tools.explain import explain

    result = explain([lcp()], module_task(), local(), executor_kind="local")
    (effect,) = [e for e in result.effects if e.plugin == "LocalCheckpointPlugin"]
    path = [c for c in effect.task_changes if c.startswith(f"~ path: '{WORKLOAD}' -> ")]
    assert len(path) == 1 and path[0].endswith(f"{GUARD_FILE}'"), effect.task_changes
    assert "~ m: True -> False" in effect.task_changes


def test_off_leaves_the_task_as_megatron_bridge_would_run_it():
    job = add_job(module_task(), local(), [lcp(fallback_on_unreadable=False)])
    assert (job.task.path, job.task.m) == (WORKLOAD, True) and guard.CHAIN_ENV not in job.executor.env_vars


def test_bad_value_is_refused():
    with pytest.raises(ResiliencyConfigError, match=r"fallback_on_unreadable = 'yes'"):
        lcp(fallback_on_unreadable="yes")
