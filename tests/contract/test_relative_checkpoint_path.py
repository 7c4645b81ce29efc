"""Issue 48, finding 1: a relative ``checkpoint.save`` (Megatron Bridge's tutorial writes
``checkpoint.save=./checkpoints/llama32_1b``) is accepted as written by every plugin that reads it, and the job's
ranks and NVRx's launcher resolve it to the same file (both run in the job's working directory)."""

from __future__ import annotations

import os

import nemo_run as run
import pytest

from nemo_resiliency_plugins import FaultTolerancePlugin, LocalCheckpointPlugin, PreemptionPlugin
from nemo_resiliency_plugins.core import nvrx_launcher
from tests.helpers import add_job, launch_command, local, slurm

pytestmark = pytest.mark.contract

TUTORIAL_SAVE = "./checkpoints/llama32_1b"  # Megatron Bridge's tutorial path, as its users write it


def _task(*extra: str) -> run.Script:
    return run.Script(path="/tmp/train.py", entrypoint="python", args=[f"checkpoint.save={TUTORIAL_SAVE}", *extra])


@pytest.mark.parametrize(
    "plugin",
    [
        FaultTolerancePlugin(),
        PreemptionPlugin(),
        LocalCheckpointPlugin(
            non_persistent_local_ckpt_dir="/local/ckpt", non_persistent_save_interval=10, fallback_on_unreadable=False
        ),
    ],
    ids=lambda p: type(p).__name__,
)
@pytest.mark.parametrize("where", ["local", "slurm"])
def test_relative_checkpoint_save_is_accepted_as_written(plugin, where, tmp_path):
    executor = local() if where == "local" else slurm(tmp_path)
    job = add_job(_task("checkpoint.save_interval=100"), executor, [plugin])
    assert f"checkpoint.save={TUTORIAL_SAVE}" in job.task.args
    # The load the autoresume rule wires is the same text, unquoted (a quoted one would reach the script with
    # its quotes on LocalExecutor).
    assert f"checkpoint.load={TUTORIAL_SAVE}" in job.task.args, job.task.args
    assert not [a for a in job.task.args if "'" in a]


def test_ranks_and_nvrx_name_the_same_iteration_file_for_a_relative_save(
    monkeypatch, tmp_path, apply_overrides, workload
):
    """The job's Megatron Bridge config and NVRx's launcher config, built from the same job, both in the job's
    working directory: Megatron Bridge's tracker file is the file NVRx's progress tracker reads."""
    from megatron.bridge.training.utils.checkpoint_utils import get_checkpoint_tracker_filename
    from nvidia_resiliency_ext.fault_tolerance import launcher
    from nvidia_resiliency_ext.fault_tolerance.config import FaultToleranceConfig
    from nvidia_resiliency_ext.fault_tolerance.progress_tracker import TrainingProgressTracker

    job = add_job(_task(), local(), [FaultTolerancePlugin(max_no_progress_cycles=2)])
    _, args, env = launch_command(job)
    for name, value in env.items():
        if name.startswith("PET_"):
            monkeypatch.setenv(name, value)
    cfg = FaultToleranceConfig.from_args(launcher.get_args_parser().parse_args(args))
    assert cfg.checkpoint_iteration_file == os.path.join(TUTORIAL_SAVE, nvrx_launcher.ITERATION_FILE)
    overrides = [a for a in job.task.args if a.startswith("checkpoint.")]
    config = apply_overrides(workload.reference_config(None), overrides)
    assert config.checkpoint.save == TUTORIAL_SAVE and config.checkpoint.load == TUTORIAL_SAVE
    # The job's working directory (NeMo-Run's code/ on Slurm, the container workdir elsewhere): the launcher
    # starts the ranks there, so both resolve the relative path against it.
    job_cwd = tmp_path / "code"
    (job_cwd / TUTORIAL_SAVE).mkdir(parents=True)
    monkeypatch.chdir(job_cwd)
    with open(get_checkpoint_tracker_filename(config.checkpoint.save), "w") as f:
        f.write("10")  # what Megatron Bridge writes after a completed save
    tracker = TrainingProgressTracker(
        max_no_progress_cycles=cfg.max_no_progress_cycles, checkpoint_iteration_file=cfg.checkpoint_iteration_file
    )
    assert tracker.current_max_iteration == 10
    assert os.path.samefile(cfg.checkpoint_iteration_file, get_checkpoint_tracker_filename(config.checkpoint.save))
