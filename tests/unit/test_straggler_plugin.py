"""StragglerDetectionPlugin: validation, the legacy-detector refusal, and what setup() does to real tasks."""

from __future__ import annotations

import nemo_run as run
import pytest

from nemo_resiliency_plugins import ResiliencyConfigError, StragglerDetectionPlugin
from nemo_resiliency_plugins.straggler import CONFIG_FIELDS
from tests.helpers import add_job

CLS = "megatron.bridge.training.config.NVRxStragglerDetectionConfig"
LEGACY = "megatron.bridge.training.config.StragglerDetectionConfig"


def script(*args):
    return run.Script(path="/tmp/nrp-train.py", entrypoint="python", args=list(args))


def local():
    return run.LocalExecutor(ntasks_per_node=2)


def slurm(tmp_path):
    return run.SlurmExecutor(
        account="acct",
        partition="debug",
        nodes=1,
        ntasks_per_node=2,
        time="00:30:00",
        tunnel=run.LocalTunnel(job_dir=str(tmp_path / "slurm-jobs")),
        packager=run.Packager(),
    )


# ------------------------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("field", "value", "allowed"),
    [
        ("enabled", "yes", "True or False"),
        ("report_time_interval", 0, "positive number"),
        ("report_time_interval", -300.0, "positive number"),
        ("report_time_interval", float("nan"), "positive number"),
        ("report_time_interval", True, "positive number"),
        ("gpu_relative_perf_threshold", 1.5, "[0.0, 1.0]"),
        ("gpu_relative_perf_threshold", -0.1, "[0.0, 1.0]"),
        ("gpu_individual_perf_threshold", 2, "[0.0, 1.0]"),
        ("gpu_individual_perf_threshold", "0.7", "[0.0, 1.0]"),
        ("profiling_interval", 0, ">= 1"),
        ("profiling_interval", 1.0, "integer"),
        ("num_gpu_perf_scores_to_print", -1, ">= 0"),
        ("num_gpu_perf_scores_to_print", 2.5, "integer"),
        ("stop_if_detected", 1, "True or False"),
        ("enable_logging", None, "True or False"),
        ("calc_relative_gpu_perf", "true", "True or False"),
        ("logger_name", "", "dotted logger name"),
        ("logger_name", "my logger", "dotted logger name"),
        ("logger_name", "a..b", "dotted logger name"),
        ("script_args_converter_fn", "not callable", "function"),
    ],
)
def test_bad_values_name_plugin_field_value_and_range(field, value, allowed):
    with pytest.raises(ResiliencyConfigError) as info:
        StragglerDetectionPlugin(**{field: value})
    text = str(info.value)
    assert f"StragglerDetectionPlugin.{field} = {value!r}" in text
    assert allowed in text


def test_both_score_kinds_off_is_refused_like_finalize():
    with pytest.raises(ResiliencyConfigError, match="computes no score"):
        StragglerDetectionPlugin(calc_relative_gpu_perf=False, calc_individual_gpu_perf=False)
    StragglerDetectionPlugin(calc_relative_gpu_perf=False)
    StragglerDetectionPlugin(calc_individual_gpu_perf=False)


def test_threshold_bounds_are_inclusive():
    StragglerDetectionPlugin(gpu_relative_perf_threshold=0.0, gpu_individual_perf_threshold=1.0)


def test_the_one_line_example():
    """'straggler detection with threshold 0.7 and a report every 300 seconds'."""
    plugin = StragglerDetectionPlugin(gpu_relative_perf_threshold=0.7, report_time_interval=300)
    assert plugin == StragglerDetectionPlugin()  # those are the defaults
    assert plugin.config_values()["report_time_interval"] == 300.0
    assert type(plugin.config_values()["report_time_interval"]) is float


def test_config_values_cover_every_field():
    assert tuple(StragglerDetectionPlugin().config_values()) == CONFIG_FIELDS


# ---------------------------------------------------------------------------------------- run.Script


def test_script_gets_a_whole_nvrx_straggler_section_with_target():
    task = script("train.train_iters=40")
    StragglerDetectionPlugin(report_time_interval=2, stop_if_detected=True).setup(task, local())
    assert task.args[0] == "train.train_iters=40"
    assert task.args[1] == f"++nvrx_straggler._target_={CLS}"
    assert "++nvrx_straggler.enabled=true" in task.args
    assert "++nvrx_straggler.report_time_interval=2.0" in task.args
    assert "++nvrx_straggler.stop_if_detected=true" in task.args
    assert "++nvrx_straggler.logger_name=megatron.bridge.NVRxStragglerDetection" in task.args
    assert len(task.args) == 2 + len(CONFIG_FIELDS)


def test_users_agreeing_override_is_kept_once_and_a_conflicting_one_is_reported():
    task = script("nvrx_straggler.gpu_relative_perf_threshold=0.7")
    StragglerDetectionPlugin().setup(task, local())
    assert sum("gpu_relative_perf_threshold" in a for a in task.args) == 1
    task = script("++nvrx_straggler.gpu_relative_perf_threshold=0.5")
    with pytest.raises(ResiliencyConfigError, match="never silently overwritten"):
        StragglerDetectionPlugin().setup(task, local())


@pytest.mark.parametrize(
    "args",
    [
        ["straggler.log_straggler=true"],
        ["++straggler.log_straggler=True"],
        [f"++straggler._target_={LEGACY}", "++straggler.log_straggler=true"],
        [f"straggler={{_target_:{LEGACY},log_straggler:true}}"],
    ],
)
def test_legacy_detector_on_the_same_task_is_refused_naming_which_to_keep(args):
    with pytest.raises(ResiliencyConfigError) as info:
        StragglerDetectionPlugin().setup(script(*args), local())
    text = str(info.value)
    assert "straggler.log_straggler" in text and "one detector at a time" in text
    assert "keep StragglerDetectionPlugin" in text and "or keep the legacy detector" in text


def test_legacy_detector_configured_but_off_is_fine_and_disabled_plugin_never_conflicts():
    StragglerDetectionPlugin().setup(script("++straggler.log_straggler=false"), local())
    task = script("++straggler.log_straggler=true")
    StragglerDetectionPlugin(enabled=False).setup(task, local())
    assert "++nvrx_straggler.enabled=false" in task.args


_SEEN: list = []


def _straggler_converter(args) -> list[str]:
    _SEEN.append(args)
    return [f"--straggler-threshold={args.gpu_relative_perf_threshold}"]


def test_script_args_converter_fn_receives_every_value():
    _SEEN.clear()
    task = script()
    StragglerDetectionPlugin(gpu_relative_perf_threshold=0.5, script_args_converter_fn=_straggler_converter).setup(
        task, local()
    )
    assert task.args == ["--straggler-threshold=0.5"]
    assert _SEEN[0].report_time_interval == 300.0 and _SEEN[0].logger_name.endswith("NVRxStragglerDetection")


def test_python_file_with_bash_entrypoint_is_a_clear_error(tmp_path):
    path = tmp_path / "train.py"
    path.write_text("print('hi')\n")
    with pytest.raises(ResiliencyConfigError, match="entrypoint='python'"):
        StragglerDetectionPlugin().setup(run.Script(path=str(path)), local())


# ------------------------------------------------------------------------------------ run.Partial / executors


def _train(config=None):  # a stand-in callable: only the fiddle tree matters here
    return config


def test_partial_without_a_config_container_is_a_clear_error():
    with pytest.raises(ResiliencyConfigError, match="ConfigContainer"):
        StragglerDetectionPlugin().setup(run.Partial(_train), local())


@pytest.mark.parametrize("kind", ["local", "slurm", "docker"])
def test_every_executor_type_through_a_real_experiment(kind, tmp_path):
    executor = {
        "local": local,
        "slurm": lambda: slurm(tmp_path),
        "docker": lambda: run.DockerExecutor(container_image="x", num_gpus=0),
    }[kind]()
    job = add_job(script("train.train_iters=3"), executor, [StragglerDetectionPlugin(report_time_interval=60)])
    assert f"++nvrx_straggler._target_={CLS}" in job.task.args
    assert "++nvrx_straggler.report_time_interval=60.0" in job.task.args
    # The detector runs inside the ranks: no launcher, env or retries are touched.
    assert job.executor.launcher is None and not getattr(job.executor, "retries", 0)
    assert not job.executor.env_vars
