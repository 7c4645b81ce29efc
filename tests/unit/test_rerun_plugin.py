"""RerunStateMachinePlugin: validation, the experimental notice, exit codes, and what setup() does to tasks."""

from __future__ import annotations

import logging
from pathlib import Path

import nemo_run as run
import pytest

from nemo_resiliency_plugins import FaultTolerancePlugin, RerunStateMachinePlugin, ResiliencyConfigError
from nemo_resiliency_plugins import rerun as rerun_module
from tests.helpers import add_job, logged

REPO = Path(__file__).resolve().parents[2]


def script(*args):
    return run.Script(path="/tmp/nrp-train.py", entrypoint="python", args=list(args))


def local():
    return run.LocalExecutor(ntasks_per_node=2)


# ------------------------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("field", "value", "allowed"),
    [
        ("rerun_mode", "report_stats", "'validate_results'"),  # Megatron-LM's old name, not Megatron Bridge's
        ("rerun_mode", "VALIDATE_RESULTS", "'validate_results'"),
        ("rerun_mode", None, "'disabled'"),
        ("check_for_nan_in_loss", "true", "True or False"),
        ("check_for_spiky_loss", 0, "True or False"),
        ("spiky_loss_factor", 0, "positive number"),
        ("spiky_loss_factor", 1.0, "> 1"),
        ("spiky_loss_factor", float("inf"), "positive number"),
        ("spiky_loss_factor", "10", "positive number"),
        ("error_injection_rate", -1, ">= 0"),
        ("error_injection_rate", 0.5, "integer"),
        ("error_injection_type", "bit_flip", "'transient_error'"),
        ("script_args_converter_fn", 3, "function"),
    ],
)
def test_bad_values_name_plugin_field_value_and_range(field, value, allowed):
    with pytest.raises(ResiliencyConfigError) as info:
        RerunStateMachinePlugin(**{field: value})
    text = str(info.value)
    assert f"RerunStateMachinePlugin.{field} = {value!r}" in text
    assert allowed in text


def test_error_injection_needs_validate_results_mode():
    RerunStateMachinePlugin(error_injection_rate=1000, error_injection_type="persistent_error")
    for mode in ("disabled", "report_determinism_stats"):
        with pytest.raises(ResiliencyConfigError, match="injects errors only while validating"):
            RerunStateMachinePlugin(rerun_mode=mode, error_injection_rate=10)


def test_determinism_stats_need_a_validated_value():
    with pytest.raises(ResiliencyConfigError, match="nothing is measured"):
        RerunStateMachinePlugin(rerun_mode="report_determinism_stats", check_for_nan_in_loss=False)
    RerunStateMachinePlugin(
        rerun_mode="report_determinism_stats", check_for_nan_in_loss=False, check_for_spiky_loss=True
    )


def test_experimental_status_is_in_the_docstrings_and_logged_once(monkeypatch):
    assert "experimental" in rerun_module.__doc__.lower() and "EXPERIMENTAL" in RerunStateMachinePlugin.__doc__
    monkeypatch.setattr(rerun_module, "_experimental_logged", False)
    with logged("nemo_resiliency_plugins.rerun") as log:
        RerunStateMachinePlugin()
        RerunStateMachinePlugin(rerun_mode="disabled")
    notices = [m for m in log.messages if "EXPERIMENTAL" in m]
    assert len(notices) == 1


def test_exit_codes_are_documented_in_plugin_and_docs():
    assert rerun_module.EXIT_CODE_RESUME_TO_DISAMBIGUATE == 16
    assert rerun_module.EXIT_CODE_FAILED_ON_RESULT_VALIDATION == 17
    page = (REPO / "docs" / "plugins" / "rerun.md").read_text()
    for text in (rerun_module.__doc__, RerunStateMachinePlugin.__doc__, page):
        assert "16" in text and "17" in text
    # What ft_launcher does with them, when combined with FaultTolerancePlugin.
    assert "ft_launcher" in rerun_module.__doc__ and "restarts the worker group in place" in rerun_module.__doc__


# ---------------------------------------------------------------------------------------- run.Script


def test_script_gets_one_override_per_field_of_the_always_present_section():
    task = script("train.train_iters=20")
    RerunStateMachinePlugin(check_for_spiky_loss=True, spiky_loss_factor=15).setup(task, local())
    assert task.args == [
        "train.train_iters=20",
        "rerun_state_machine.rerun_mode=validate_results",
        "rerun_state_machine.check_for_nan_in_loss=true",
        "rerun_state_machine.check_for_spiky_loss=true",
        "rerun_state_machine.spiky_loss_factor=15.0",
        "rerun_state_machine.error_injection_rate=0",
        "rerun_state_machine.error_injection_type=transient_error",
    ]


def test_users_agreeing_override_is_kept_and_a_conflicting_one_is_reported():
    task = script("rerun_state_machine.rerun_mode=validate_results")
    RerunStateMachinePlugin().setup(task, local())
    assert sum("rerun_mode" in a for a in task.args) == 1
    with pytest.raises(ResiliencyConfigError, match="rerun_state_machine.check_for_nan_in_loss"):
        RerunStateMachinePlugin().setup(script("rerun_state_machine.check_for_nan_in_loss=false"), local())


def test_setup_logs_the_exit_codes():
    with logged("nemo_resiliency_plugins.rerun", logging.INFO) as log:
        RerunStateMachinePlugin().setup(script(), local())
    assert any("exit code 16" in m and "17" in m for m in log.messages)


def _rerun_converter(args) -> list[str]:
    return [f"--rerun-mode={args.rerun_mode}"]


def test_script_args_converter_fn():
    task = script()
    RerunStateMachinePlugin(script_args_converter_fn=_rerun_converter).setup(task, local())
    assert task.args == ["--rerun-mode=validate_results"]


# ------------------------------------------------------------------------------------ executors, with FT


@pytest.mark.parametrize("kind", ["local", "slurm", "docker"])
def test_every_executor_type_through_a_real_experiment(kind, tmp_path):
    executor = {
        "local": local,
        "slurm": lambda: run.SlurmExecutor(
            account="a",
            partition="p",
            nodes=1,
            ntasks_per_node=2,
            time="00:10:00",
            tunnel=run.LocalTunnel(job_dir=str(tmp_path / "jobs")),
            packager=run.Packager(),
        ),
        "docker": lambda: run.DockerExecutor(container_image="x", num_gpus=0),
    }[kind]()
    job = add_job(script(), executor, [RerunStateMachinePlugin()])
    assert "rerun_state_machine.rerun_mode=validate_results" in job.task.args
    assert job.executor.launcher is None and not job.executor.env_vars


def test_combined_with_fault_tolerance_plugin_both_apply(tmp_path):
    job = add_job(
        script(),
        local(),
        [FaultTolerancePlugin(num_in_job_restarts=2), RerunStateMachinePlugin()],
    )
    assert "rerun_state_machine.rerun_mode=validate_results" in job.task.args
    assert "++ft.enable_ft_package=true" in job.task.args
    assert type(job.executor.launcher).__name__ == "FaultTolerance"
