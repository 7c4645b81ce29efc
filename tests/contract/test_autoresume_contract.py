"""What the autoresume and progress-tracking rules rest on, pinned against the installed Megatron Bridge and NVRx:
the resume decision reads checkpoint.load only, the tracker file's name and content, NVRx's reading of that file
and its no-restart exit code."""

from __future__ import annotations

import nemo_run as run
import pytest

from nemo_resiliency_plugins import FaultTolerancePlugin
from nemo_resiliency_plugins.core import nvrx_launcher
from tests.helpers import add_job, launch_command, local

pytestmark = pytest.mark.contract


def _mb_source(relative: str) -> str:
    """The text of an installed Megatron Bridge module (``training/setup.py`` and ``training/checkpointing.py``
    import NVIDIA ModelOpt, which is not installed here, so they are read, not imported)."""
    import ast
    from pathlib import Path

    import megatron.bridge

    text = (Path(megatron.bridge.__file__).parent / relative).read_text()
    ast.parse(text)
    return text


def _function_source(relative: str, name: str) -> str:
    import ast

    text = _mb_source(relative)
    node = next(n for n in ast.walk(ast.parse(text)) if isinstance(n, ast.FunctionDef) and n.name == name)
    return ast.get_source_segment(text, node)


def test_megatron_bridge_resumes_from_checkpoint_load_only_and_the_plugins_wire_it(apply_overrides, workload, tmp_path):
    from megatron.bridge.training.utils.checkpoint_utils import checkpoint_exists

    # The resume decision reads checkpoint.load (and pretrained_checkpoint), never checkpoint.save.
    decision = _function_source("training/setup.py", "_should_load_checkpoint")
    assert "cfg.checkpoint.load" in decision and "checkpoint.save" not in decision
    # A directory with a checkpoint as Megatron Bridge recognises one (its legacy tracker file).
    (tmp_path / nvrx_launcher.ITERATION_FILE).write_text("10")
    assert checkpoint_exists(str(tmp_path))
    save_only = apply_overrides(workload.reference_config(None), [f"checkpoint.save={tmp_path}"])
    assert save_only.checkpoint.load is None and not checkpoint_exists(save_only.checkpoint.load)

    task = run.Script(path="/tmp/train.py", entrypoint="python", args=[f"checkpoint.save={tmp_path}"])
    job = add_job(task, local(), [FaultTolerancePlugin()])
    wired = apply_overrides(workload.reference_config(None), [a for a in job.task.args if a.startswith("checkpoint.")])
    assert wired.checkpoint.load == str(tmp_path) and checkpoint_exists(wired.checkpoint.load)


def test_the_iteration_file_is_megatron_bridges_tracker_and_the_workload_fills_it_the_same_way(megatron_bridge):
    from megatron.bridge.training.utils.checkpoint_utils import get_checkpoint_tracker_filename

    from nemo_resiliency_plugins.testing.checkpoint_files import TRACKER_FILE

    assert get_checkpoint_tracker_filename("/ck").rsplit("/", 1)[-1] == nvrx_launcher.ITERATION_FILE == TRACKER_FILE
    # Megatron Bridge writes str(step): the bare number, no newline, once the save is complete
    # (checkpointing.py, the train-state finalize step of save_checkpoint).
    assert "f.write(str(step))" in _mb_source("training/checkpointing.py")


def test_nvrx_reads_the_iteration_file_the_plugin_names(monkeypatch, tmp_path):
    from nvidia_resiliency_ext.fault_tolerance import launcher
    from nvidia_resiliency_ext.fault_tolerance.config import FaultToleranceConfig
    from nvidia_resiliency_ext.fault_tolerance.progress_tracker import TrainingProgressTracker

    task = run.Script(path="/tmp/train.py", entrypoint="python", args=[f"checkpoint.save={tmp_path}"])
    job = add_job(task, local(), [FaultTolerancePlugin(max_no_progress_cycles=2)])
    _, args, env = launch_command(job)
    for name, value in env.items():
        if name.startswith("PET_"):
            monkeypatch.setenv(name, value)
    cfg = FaultToleranceConfig.from_args(launcher.get_args_parser().parse_args(args))
    assert cfg.checkpoint_iteration_file == str(tmp_path / nvrx_launcher.ITERATION_FILE)
    assert cfg.max_no_progress_cycles == 2 and cfg.is_progress_tracking_enabled
    # NVRx's own tracker reads what Megatron Bridge writes: progress in cycle 0, none in the next two cycles.
    (tmp_path / nvrx_launcher.ITERATION_FILE).write_text("10")
    tracker = TrainingProgressTracker(
        max_no_progress_cycles=cfg.max_no_progress_cycles, checkpoint_iteration_file=cfg.checkpoint_iteration_file
    )
    tracker.last_restart_iteration = 0
    for _ in range(3):
        tracker.analyze_previous_cycle()
    assert tracker.should_terminate_early()


def test_the_no_restart_exit_code_is_nvrxs():
    from nvidia_resiliency_ext.fault_tolerance.utils import DEFAULT_NO_RESTART_EXIT_CODE

    assert nvrx_launcher.NO_RESTART_EXIT_CODE == DEFAULT_NO_RESTART_EXIT_CODE
