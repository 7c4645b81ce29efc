"""The GPU proofs' CPU-side inputs cannot rot unnoticed: CI has no GPU, but what a device call replays is made here.

``benchmarks/gpu/prepare.py`` calls each plugin's real ``setup()`` (on a ``run.Script`` and a ``LocalExecutor``);
once a plugin grows a new refusal (PreemptionPlugin now refuses a task that does not show ``checkpoint.save``)
the next device call would fail at its first step. ``pretrain_proof.job_args`` points each job's save, load and
local directories at its own, and ``checkpoint_rows.py`` reads the committed results into the benchmark rows.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
GPU = REPO / "benchmarks" / "gpu"
EVENING = REPO / "benchmarks" / "results" / "gpu" / "2026-12-04-evening"


@pytest.fixture(scope="module")
def gpu_modules():
    sys.path.insert(0, str(GPU))
    try:
        import checkpoint_rows
        import prepare
        import pretrain_proof

        yield prepare, pretrain_proof, checkpoint_rows
    finally:
        sys.path.remove(str(GPU))


def test_prepare_runs_every_plugins_setup(gpu_modules, tmp_path, monkeypatch):
    prepare, _, _ = gpu_modules
    monkeypatch.setenv("NEMORUN_HOME", str(tmp_path / "home"))
    prepare.main(str(tmp_path / "plugin"))
    settings = json.loads((tmp_path / "plugin" / "plugin_settings.json").read_text())
    assert set(settings) >= {
        "fault_tolerance",
        "fault_tolerance_calc",
        "straggler",
        "inprocess_restart",
        "preemption",
        "rerun",
        "async_checkpoint",
        "local_checkpoint",
    }
    assert "checkpoint.async_save=true" in settings["async_checkpoint"]["args"]
    assert "checkpoint.non_persistent_ckpt_type=local" in settings["local_checkpoint"]["args"]
    assert "train.exit_signal_handler=true" in settings["preemption"]["args"]
    # LocalCheckpointPlugin's guard runs in front of each rank; it travels with the settings
    guard = settings["local_checkpoint"]["program_first"]
    assert guard.endswith("local_checkpoint_guard.py") and (tmp_path / "plugin" / guard).is_file()
    assert "++nvrx_straggler.enabled=true" in settings["straggler"]["args"]
    # FaultTolerancePlugin's NVRx file, with the proof's short step timeout (a hang caught in seconds)
    assert "    step: 10.0\n" in (tmp_path / "plugin" / "ft_launcher.yaml").read_text()


def test_each_job_saves_loads_and_keeps_local_checkpoints_in_its_own_directories(gpu_modules):
    _, pretrain_proof, _ = gpu_modules
    plugin_args = [
        "checkpoint.save=/tmp/pretrain_proof/ckpt",
        "checkpoint.load=/tmp/pretrain_proof/ckpt",
        "checkpoint.non_persistent_ckpt_type=local",
        "checkpoint.non_persistent_local_ckpt_dir=/tmp/pretrain_proof/local_ckpt",
        "checkpoint.save_interval=10",
    ]
    args = pretrain_proof.job_args(plugin_args, "/w/local")
    assert "checkpoint.save=/w/local" in args and "checkpoint.load=/w/local" in args
    assert "checkpoint.non_persistent_local_ckpt_dir=/w/local_local" in args
    assert not any("/tmp/pretrain_proof/" in a for a in args), args
    assert "checkpoint.save_interval=10" in args
    plain = pretrain_proof.job_args(["rerun_state_machine.rerun_mode=validate_results"], "/w/r")
    assert not any("non_persistent_local_ckpt_dir" in a for a in plain)


def test_checkpoint_rows_from_the_committed_device_results(gpu_modules, tmp_path, capsys):
    _, _, checkpoint_rows = gpu_modules
    (tmp_path / "pretrain").mkdir()
    (tmp_path / "ckpt").mkdir()
    for call, name in (("call3", "pretrain/summary.json"), ("call4", "ckpt/checkpoint_proof.out")):
        (tmp_path / name).write_text((EVENING / call / name).read_text())
    assert checkpoint_rows.main(str(tmp_path)) == 0
    text = (tmp_path / "checkpoint_rows.md").read_text()
    assert "| persistent every K=10 | 20 | 5 |" in text
    assert "| local every k=2 (+ persistent 10) | 24 | 1 |" in text
    assert "0.151 (23.4 %) | no |" in text
    assert text == (EVENING / "checkpoint_rows.md").read_text()
