"""PreemptionPlugin: validation and what setup() does to real NeMo-Run tasks, executors and sbatch scripts."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import warnings
from pathlib import Path

import nemo_run as run
import pytest
from nemo_run.core.execution.slurm import SlurmBatchRequest
from nemo_run.run.torchx_backend.packaging import package

from nemo_resiliency_plugins import FaultTolerancePlugin, ResiliencyConfigError
from nemo_resiliency_plugins.core.executor_config import slurm_time_limit_seconds
from nemo_resiliency_plugins.preemption import (
    PreemptionPlugin,
    PreemptionPluginScriptArgs,
    PreemptionTimeWarning,
    step_plus_save_seconds,
)
from tests.helpers import add_job

MODULE = "nemo_resiliency_plugins.testing.workload"
HANDLER_ARGS = [
    "train.exit_signal_handler=true",
    "train.exit_signal_handler_for_dataloader=false",
    "train.exit_signal=15",
]


def script(*args, save: bool = True):
    """The workload as a run.Script; it shows a checkpoint directory unless ``save=False`` (PreemptionPlugin needs
    one: its save at the signal is what the next run resumes from)."""
    shown = any(a.startswith("checkpoint.save=") for a in args)
    return run.Script(
        path=MODULE,
        m=True,
        entrypoint="python",
        args=[*(() if shown or not save else ("checkpoint.save=/tmp/ck",)), *args],
    )


def slurm(tmp_path, **kw):
    kw.setdefault("time", "00:30:00")
    return run.SlurmExecutor(
        account="acct",
        partition="debug",
        nodes=1,
        ntasks_per_node=2,
        tunnel=run.LocalTunnel(job_dir=str(tmp_path / "slurm-jobs")),
        packager=run.Packager(),
        **kw,
    )


def sbatch_script(job) -> str:
    """The sbatch script NeMo-Run would submit for ``job``: the request its Slurm scheduler builds (minus the
    code packaging, which runs shell commands and is no part of the script)."""
    executor = job.executor
    role = package(job.id, job.task, executor, serialize_to_file=False).roles[0]
    role = executor.macro_values().apply(role)
    request = SlurmBatchRequest(
        launch_cmd=["sbatch", "--requeue", "--parsable"],
        jobs=[role.name],
        command_groups=[[" ".join([role.entrypoint, *role.args])]],
        executor=executor,
        max_retries=role.max_retries,
        extra_env=role.env,
        launcher=executor.get_launcher(),
    )
    return request.materialize()


# ------------------------------------------------------------------------------------------- validation


def test_defaults_are_megatron_bridges():
    p = PreemptionPlugin()
    assert (p.preempt_time, p.enable_exit_handler, p.enable_exit_handler_for_data_loader) == (60, True, False)
    assert p.script_args_converter_fn is None
    assert p.signal is signal.SIGTERM and p.slurm_signal == "B:TERM@60"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("preempt_time", 0),
        ("preempt_time", -5),
        ("preempt_time", 1.5),
        ("preempt_time", True),
        ("preempt_time", "60"),
        ("preempt_time", 70000),
        ("enable_exit_handler", "yes"),
        ("enable_exit_handler_for_data_loader", 1),
        ("script_args_converter_fn", "not callable"),
        ("exit_signal", "SIGKILL"),
        ("exit_signal", "SIGUSR1"),
        ("exit_signal", signal.SIGSTOP),
        ("exit_signal", 15),
        ("exit_signal", "TERM; rm -rf /"),
    ],
)
def test_bad_values_name_plugin_field_and_value(field, value):
    with pytest.raises(ResiliencyConfigError) as info:
        PreemptionPlugin(**{field: value})
    text = str(info.value)
    assert "PreemptionPlugin" in text and field in text and repr(value)[:20] in text


def test_data_loader_handler_without_exit_handler_is_refused_not_dropped():
    with pytest.raises(ResiliencyConfigError, match="enable_exit_handler_for_data_loader"):
        PreemptionPlugin(enable_exit_handler=False, enable_exit_handler_for_data_loader=True)


@pytest.mark.parametrize(("name", "number", "slurm_name"), [("SIGINT", 2, "INT"), ("sighup", 1, "HUP")])
def test_exit_signal_by_name_or_enum(name, number, slurm_name):
    assert PreemptionPlugin(exit_signal=name, preempt_time=90).slurm_signal == f"B:{slurm_name}@90"
    assert PreemptionPlugin(exit_signal=signal.Signals(number)).signal == signal.Signals(number)


# ---------------------------------------------------------------------------------------- setup: Slurm


def test_slurm_gets_signal_field_sbatch_line_and_exit_handler_overrides(tmp_path):
    job = add_job(script("checkpoint.save=/tmp/ck"), slurm(tmp_path), [PreemptionPlugin(preempt_time=120)])
    assert job.executor.signal == "B:TERM@120"
    # checkpoint.load is wired to the save directory: Megatron Bridge resumes only from checkpoint.load.
    assert job.task.args == ["checkpoint.save=/tmp/ck", "checkpoint.load=/tmp/ck", *HANDLER_ARGS]
    text = sbatch_script(job)
    assert "#SBATCH --signal=B:TERM@120" in text
    # The batch shell forwards the signal to the step's task processes only, with srun waited for in the
    # background so that the trap can run while training does.
    assert "trap 'nrp_forward_signal TERM' TERM" in text
    assert text.index("srun() {") < text.index("srun --output")
    assert subprocess.run(["bash", "-n"], input=text, text=True).returncode == 0


def test_other_signal_reaches_both_slurm_and_the_config(tmp_path):
    job = add_job(script(), slurm(tmp_path), [PreemptionPlugin(exit_signal="SIGINT")])
    assert job.executor.signal == "B:INT@60"
    assert "train.exit_signal=2" in job.task.args


def test_exit_handler_off_sets_only_the_slurm_signal(tmp_path):
    job = add_job(script("a=1", save=False), slurm(tmp_path), [PreemptionPlugin(enable_exit_handler=False)])
    assert job.executor.signal == "B:TERM@60"
    assert job.task.args == ["a=1"]


@pytest.mark.parametrize("limit", ["00:01:00", "1", "0:30"])
def test_preempt_time_not_shorter_than_time_limit_is_refused(tmp_path, limit):
    with pytest.raises(ResiliencyConfigError) as info:
        add_job(script(), slurm(tmp_path, time=limit), [PreemptionPlugin(preempt_time=60)])
    assert "preempt_time" in str(info.value) and limit in str(info.value)


def test_unlimited_time_is_accepted_and_unparseable_time_is_reported(tmp_path):
    job = add_job(script(), slurm(tmp_path, time="UNLIMITED"), [PreemptionPlugin(preempt_time=3600)])
    assert job.executor.signal == "B:TERM@3600"
    with pytest.raises(ResiliencyConfigError, match="executor.time"):
        add_job(script(), slurm(tmp_path, time="soon"), [PreemptionPlugin()])


def test_user_signal_is_never_overwritten(tmp_path):
    with pytest.raises(ResiliencyConfigError, match="B:USR1@30"):
        add_job(script(), slurm(tmp_path, signal="B:USR1@30"), [PreemptionPlugin()])
    job = add_job(script(), slurm(tmp_path, signal="B:TERM@60"), [PreemptionPlugin()])
    assert job.executor.signal == "B:TERM@60"


def test_user_override_that_disagrees_is_an_error_and_one_that_agrees_is_kept(tmp_path):
    with pytest.raises(ResiliencyConfigError, match="train.exit_signal_handler"):
        add_job(script("train.exit_signal_handler=false"), slurm(tmp_path), [PreemptionPlugin()])
    job = add_job(script("train.exit_signal_handler=True"), slurm(tmp_path), [PreemptionPlugin()])
    assert job.task.args.count("train.exit_signal_handler=True") == 1
    assert "train.exit_signal_handler=true" not in job.task.args


def test_with_fault_tolerance_the_ft_template_and_requeue_guard_are_in_the_script(tmp_path):
    job = add_job(script(), slurm(tmp_path), [PreemptionPlugin(), FaultTolerancePlugin()])
    text = sbatch_script(job)
    assert "#SBATCH --signal=B:TERM@60" in text and "ft_launcher" in text
    guard, template = text.index("scontrol() {"), text.index("is_training_finished()")
    srun = text.index("ft_launcher --")
    assert guard < template < srun, "the guard must be defined before the template's final requeue"
    assert text.count("# nemo-resiliency-plugins: requeue guard") == 1  # both plugins install it once
    assert subprocess.run(["bash", "-n"], input=text, text=True).returncode == 0


# ------------------------------------------------------------------------------------ setup: elsewhere


def test_local_executor_keeps_the_exit_handler_and_gets_no_slurm_field():
    executor = run.LocalExecutor(ntasks_per_node=2)
    job = add_job(script(), executor, [PreemptionPlugin()])
    assert job.task.args == ["checkpoint.save=/tmp/ck", "checkpoint.load=/tmp/ck", *HANDLER_ARGS]
    assert not hasattr(job.executor, "signal")
    assert job.executor.env_vars == {}


_SEEN: list = []


def _convert(args: PreemptionPluginScriptArgs) -> list[str]:
    """A module-level converter (NeMo-Run serializes plugins, so a converter must import back by name)."""
    _SEEN.append(args)
    return ["--exit-on", args.exit_signal.name]


def test_converter_receives_script_args():
    _SEEN.clear()
    job = add_job(script(save=False), run.LocalExecutor(), [PreemptionPlugin(script_args_converter_fn=_convert)])
    assert job.task.args == ["--exit-on", "SIGTERM"]
    assert _SEEN[0].enable_exit_handler is True and _SEEN[0].enable_exit_handler_for_data_loader is False


# ------------------------------------------------------------------------------ ft_state.json warning


def _ft_state(directory: Path, step: float, checkpointing: float) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    state = {
        "current_timeouts": {
            "section": {
                "section": {"setup": 600.0, "step": step, "checkpointing": checkpointing},
                "out_of_section": 300.0,
                "calculated_sections": ["step", "checkpointing"],
                "is_out_of_section_calculated": True,
            }
        }
    }
    (directory / "ft_state.json").write_text(json.dumps(state))


def test_warns_when_step_plus_save_from_ft_state_is_longer(tmp_path):
    ck = tmp_path / "ck"
    _ft_state(ck, step=100.0, checkpointing=400.0)  # observed: 20 s + 80 s = 100 s
    assert step_plus_save_seconds(str(ck)) == pytest.approx(100.0)
    with pytest.warns(PreemptionTimeWarning, match="preempt_time=60 may be too short.*100 s"):
        add_job(script(f"checkpoint.save={ck}"), slurm(tmp_path), [PreemptionPlugin(preempt_time=60)])
    with warnings.catch_warnings():
        warnings.simplefilter("error", PreemptionTimeWarning)
        add_job(script(f"checkpoint.save={ck}"), slurm(tmp_path), [PreemptionPlugin(preempt_time=120)])


@pytest.mark.parametrize("content", [None, "{not json", json.dumps({"current_timeouts": {}})])
def test_no_warning_when_not_known(tmp_path, content):
    ck = tmp_path / "ck"
    ck.mkdir()
    if content is not None:
        (ck / "ft_state.json").write_text(content)
    assert step_plus_save_seconds(str(ck)) is None
    with warnings.catch_warnings():
        warnings.simplefilter("error", PreemptionTimeWarning)
        add_job(script(f"checkpoint.save={ck}"), slurm(tmp_path), [PreemptionPlugin(preempt_time=1)])


# ------------------------------------------------------------------------------------ Slurm time parse


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30", 1800),
        ("10:30", 630),
        ("04:00:00", 14400),
        ("1-2", 93600),
        ("1-02:03", 93780),
        ("1-02:03:04", 93784),
        ("UNLIMITED", None),
        ("infinite", None),
        ("", None),
    ],
)
def test_slurm_time_limit_seconds(text, seconds):
    assert slurm_time_limit_seconds(text) == seconds


@pytest.mark.parametrize("text", ["1h", "1:2:3:4", "-5", "10 minutes"])
def test_slurm_time_limit_rejects_unknown_forms(text):
    with pytest.raises(ValueError):
        slurm_time_limit_seconds(text)


def test_fault_tolerance_alone_on_slurm_gets_the_requeue_guard_but_no_signal_forwarding(tmp_path):
    job = add_job(script(), slurm(tmp_path), [FaultTolerancePlugin(num_job_retries_on_failure=2)])
    text = sbatch_script(job)
    assert "export TORCHX_MAX_RETRIES=2" in text
    guard = text.index("# nemo-resiliency-plugins: requeue guard")
    # Both template fixes sit after NeMo-Run's export and before its FT set-up reads the value.
    assert text.index("export TORCHX_MAX_RETRIES=2") < guard < text.index("is_job_failures_limit_reached()")
    assert "TORCHX_MAX_RETRIES=$(( TORCHX_MAX_RETRIES + 1 ))" in text
    assert """[ "${exitcode:-0}" = 0 ] || exit "$exitcode"' EXIT""" in text
    assert "nrp_forward_signal" not in text and not re.search(r"^#SBATCH --signal", text, re.M)
    assert subprocess.run(["bash", "-n"], input=text, text=True).returncode == 0
