"""StragglerDetectionPlugin and RerunStateMachinePlugin against Megatron Bridge's and Megatron Core's real code:
field parity, every key and type through Megatron Bridge's own override parser on a real ConfigContainer, the
Partial path built with fiddle, finalize() agreement, and the re-run state machine initialised from the result."""

from __future__ import annotations

import dataclasses
import math
import typing

import fiddle as fdl
import nemo_run as run
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nemo_resiliency_plugins import RerunStateMachinePlugin, ResiliencyConfigError, StragglerDetectionPlugin
from nemo_resiliency_plugins import rerun as rerun_module

pytestmark = pytest.mark.contract

# The plugin defaults that differ from the config class's, on purpose (documented in the plugins).
STRAGGLER_DEFAULT_DIFFERENCES = {"enabled": (True, False)}
RERUN_DEFAULT_DIFFERENCES = {"rerun_mode": ("validate_results", "disabled")}

STRAGGLER_CASES = [
    StragglerDetectionPlugin(),
    StragglerDetectionPlugin(
        report_time_interval=2,
        calc_relative_gpu_perf=False,
        num_gpu_perf_scores_to_print=0,
        gpu_relative_perf_threshold=0,
        gpu_individual_perf_threshold=1,
        stop_if_detected=True,
        enable_logging=False,
        profiling_interval=7,
        logger_name="my_team.stragglers",
    ),
    StragglerDetectionPlugin(enabled=False, calc_individual_gpu_perf=False),
]
RERUN_CASES = [
    RerunStateMachinePlugin(),
    RerunStateMachinePlugin(
        check_for_nan_in_loss=False,
        check_for_spiky_loss=True,
        spiky_loss_factor=17.5,
        error_injection_rate=1000,
        error_injection_type="persistent_error",
    ),
    RerunStateMachinePlugin(rerun_mode="report_determinism_stats", check_for_spiky_loss=True),
    RerunStateMachinePlugin(rerun_mode="disabled"),
]


def local():
    return run.LocalExecutor(ntasks_per_node=2)


def mb_defaults(cls) -> dict:
    out = {}
    for f in dataclasses.fields(cls):
        out[f.name] = f.default if f.default is not dataclasses.MISSING else f.default_factory()
    return out


def assert_same_values_and_types(obj, expected: dict, cls) -> None:
    defaults = mb_defaults(cls)
    for name, value in expected.items():
        got = getattr(obj, name)
        assert got == value, f"{name}: {got!r} != {value!r}"
        assert type(got) is type(defaults[name]), f"{name}: {type(got).__name__}, MB default {defaults[name]!r}"


# ------------------------------------------------------------------------------------------ field parity


def test_straggler_plugin_has_every_field_with_megatron_bridges_defaults(megatron_bridge):
    cls = megatron_bridge.NVRxStragglerDetectionConfig
    ours = {f.name: f.default for f in dataclasses.fields(StragglerDetectionPlugin)}
    for name, default in mb_defaults(cls).items():
        assert name in ours, f"NVRxStragglerDetectionConfig.{name} has no plugin field"
        expected = STRAGGLER_DEFAULT_DIFFERENCES.get(name, (default, default))
        assert (ours[name], default) == expected, name
    assert tuple(StragglerDetectionPlugin().config_values()) == tuple(mb_defaults(cls))


def test_rerun_plugin_has_every_field_with_megatron_bridges_defaults_and_choices(megatron_bridge):
    from megatron.core.rerun_state_machine import (
        EXIT_CODE_FAILED_ON_RESULT_VALIDATION,
        EXIT_CODE_RESUME_TO_DISAMBIGUATE,
        RerunDiagnostic,
        RerunMode,
    )

    cls = megatron_bridge.RerunStateMachineConfig
    ours = {f.name: f.default for f in dataclasses.fields(RerunStateMachinePlugin)}
    for name, default in mb_defaults(cls).items():
        assert name in ours, f"RerunStateMachineConfig.{name} has no plugin field"
        expected = RERUN_DEFAULT_DIFFERENCES.get(name, (default, default))
        assert (ours[name], default) == expected, name
    hints = typing.get_type_hints(cls)
    assert typing.get_args(hints["rerun_mode"]) == rerun_module.RERUN_MODES
    assert typing.get_args(hints["error_injection_type"]) == rerun_module.ERROR_INJECTION_TYPES
    assert tuple(m.value for m in RerunMode) == rerun_module.RERUN_MODES
    assert tuple(d.value for d in RerunDiagnostic) == rerun_module.ERROR_INJECTION_TYPES
    assert rerun_module.EXIT_CODE_RESUME_TO_DISAMBIGUATE == EXIT_CODE_RESUME_TO_DISAMBIGUATE == 16
    assert rerun_module.EXIT_CODE_FAILED_ON_RESULT_VALIDATION == EXIT_CODE_FAILED_ON_RESULT_VALIDATION == 17


# ------------------------------------------------------------------------------------- run.Script overrides


@pytest.mark.parametrize("plugin", STRAGGLER_CASES, ids=["defaults", "everything-changed", "disabled"])
def test_script_overrides_give_a_real_nvrx_straggler_config(
    plugin, megatron_bridge, apply_overrides, workload, tmp_path
):
    task = run.Script(path="/tmp/train.py", entrypoint="python", args=["train.train_iters=7"])
    plugin.setup(task, local())
    cfg = workload.reference_config(str(tmp_path))
    assert cfg.nvrx_straggler is None, "ConfigContainer's default sub-config is None"
    apply_overrides(cfg, task.args)
    cls = megatron_bridge.NVRxStragglerDetectionConfig
    assert type(cfg.nvrx_straggler) is cls
    assert_same_values_and_types(cfg.nvrx_straggler, plugin.config_values(), cls)
    cfg.nvrx_straggler.finalize()
    cfg.validate()  # the whole container, as Megatron Bridge's pretrain does (calls nvrx_straggler.finalize())
    assert cfg.train.train_iters == 7


def test_script_overrides_replace_a_recipes_own_nvrx_straggler(megatron_bridge, apply_overrides, workload, tmp_path):
    task = run.Script(path="/tmp/train.py", entrypoint="python")
    StragglerDetectionPlugin(report_time_interval=42).setup(task, local())
    cfg = workload.reference_config(str(tmp_path))
    cfg.nvrx_straggler = megatron_bridge.NVRxStragglerDetectionConfig(profiling_interval=3)
    apply_overrides(cfg, task.args)
    assert type(cfg.nvrx_straggler) is megatron_bridge.NVRxStragglerDetectionConfig
    assert cfg.nvrx_straggler.report_time_interval == 42.0 and cfg.nvrx_straggler.enabled is True


@pytest.mark.parametrize("plugin", RERUN_CASES, ids=["defaults", "everything-changed", "stats", "disabled"])
def test_script_overrides_reach_the_real_rerun_state_machine(
    plugin, megatron_bridge, apply_overrides, workload, tmp_path
):
    from megatron.bridge.training.initialize import init_rerun_state
    from megatron.core.rerun_state_machine import (
        RerunDiagnostic,
        RerunMode,
        destroy_rerun_state_machine,
        get_rerun_state_machine,
    )

    task = run.Script(path="/tmp/train.py", entrypoint="python")
    plugin.setup(task, local())
    cfg = workload.reference_config(str(tmp_path))
    apply_overrides(cfg, task.args)
    cls = megatron_bridge.RerunStateMachineConfig
    assert type(cfg.rerun_state_machine) is cls
    assert_same_values_and_types(cfg.rerun_state_machine, plugin.config_values(), cls)
    cfg.validate()
    # Megatron Bridge's own initialisation from the parsed config.
    init_rerun_state(cfg.rerun_state_machine)
    try:
        rsm = get_rerun_state_machine()
        assert rsm.mode == RerunMode(plugin.rerun_mode)
        assert rsm.spiky_loss_factor == plugin.spiky_loss_factor
        assert rsm.error_injector.error_injection_rate == plugin.error_injection_rate
        assert rsm.error_injector.error_injection_type == RerunDiagnostic(plugin.error_injection_type)
    finally:
        destroy_rerun_state_machine()


def test_legacy_detector_parsed_by_megatron_bridge_is_what_the_plugin_refuses(apply_overrides, workload, tmp_path):
    legacy = [
        "++straggler._target_=megatron.bridge.training.config.StragglerDetectionConfig",
        "++straggler.log_straggler=true",
    ]
    cfg = apply_overrides(workload.reference_config(str(tmp_path)), legacy)
    assert cfg.straggler.log_straggler is True  # the form is real: Megatron Bridge turns it on
    task = run.Script(path="/tmp/train.py", entrypoint="python", args=legacy)
    with pytest.raises(ResiliencyConfigError, match="one detector at a time"):
        StragglerDetectionPlugin().setup(task, local())


# --------------------------------------------------------------------------------- run.Partial with fiddle


def partial(workload, tmp_path):
    return run.Partial(workload.pretrain, config=workload.reference_config_buildable(str(tmp_path)))


@pytest.mark.parametrize("plugin", STRAGGLER_CASES, ids=["defaults", "everything-changed", "disabled"])
def test_partial_builds_the_same_nvrx_straggler_config(plugin, megatron_bridge, workload, tmp_path):
    task = partial(workload, tmp_path)
    plugin.setup(task, local())
    cfg = fdl.build(task).keywords["config"]
    cls = megatron_bridge.NVRxStragglerDetectionConfig
    assert type(cfg.nvrx_straggler) is cls
    assert_same_values_and_types(cfg.nvrx_straggler, plugin.config_values(), cls)
    cfg.validate()


@pytest.mark.parametrize("plugin", RERUN_CASES, ids=["defaults", "everything-changed", "stats", "disabled"])
def test_partial_builds_the_same_rerun_config(plugin, megatron_bridge, workload, tmp_path):
    task = partial(workload, tmp_path)
    plugin.setup(task, local())
    cfg = fdl.build(task).keywords["config"]
    cls = megatron_bridge.RerunStateMachineConfig
    assert type(cfg.rerun_state_machine) is cls
    assert_same_values_and_types(cfg.rerun_state_machine, plugin.config_values(), cls)


def test_partial_refuses_the_legacy_detector_and_a_conflicting_recipe_value(megatron_bridge, workload, tmp_path):
    task = partial(workload, tmp_path)
    task.config.straggler = run.Config(megatron_bridge.StragglerDetectionConfig, log_straggler=True)
    with pytest.raises(ResiliencyConfigError, match="straggler.log_straggler"):
        StragglerDetectionPlugin().setup(task, local())
    task = partial(workload, tmp_path)
    task.config.nvrx_straggler = run.Config(megatron_bridge.NVRxStragglerDetectionConfig, report_time_interval=60.0)
    with pytest.raises(ResiliencyConfigError, match="nvrx_straggler.report_time_interval"):
        StragglerDetectionPlugin().setup(task, local())
    StragglerDetectionPlugin(report_time_interval=60).setup(task, local())  # agreeing: fine
    task = partial(workload, tmp_path)
    task.config.rerun_state_machine = run.Config(megatron_bridge.RerunStateMachineConfig, check_for_nan_in_loss=False)
    with pytest.raises(ResiliencyConfigError, match="rerun_state_machine.check_for_nan_in_loss"):
        RerunStateMachinePlugin().setup(task, local())


def test_partial_with_both_plugins_survives_nemo_run_serialization(workload, tmp_path):
    from nemo_run.core.serialization.zlib_json import ZlibJSONSerializer

    task = partial(workload, tmp_path)
    StragglerDetectionPlugin(stop_if_detected=True).setup(task, local())
    RerunStateMachinePlugin().setup(task, local())
    again = ZlibJSONSerializer().deserialize(ZlibJSONSerializer().serialize(task))
    cfg = fdl.build(again).keywords["config"]
    assert cfg.nvrx_straggler.stop_if_detected is True and cfg.rerun_state_machine.rerun_mode == "validate_results"


# ------------------------------------------------------------------- at least as strict as finalize()

values_for_finalize = st.fixed_dictionaries(
    {
        "enabled": st.booleans(),
        "report_time_interval": st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-5, 5)),
        "calc_relative_gpu_perf": st.booleans(),
        "calc_individual_gpu_perf": st.booleans(),
        "gpu_relative_perf_threshold": st.one_of(st.floats(-1, 2), st.just(math.nan)),
        "gpu_individual_perf_threshold": st.one_of(st.floats(-1, 2), st.just(math.nan)),
    }
)


@settings(max_examples=300, deadline=None)
@given(values=values_for_finalize)
def test_everything_finalize_rejects_the_plugin_rejects_too(values, megatron_bridge):
    try:
        megatron_bridge.NVRxStragglerDetectionConfig(**values).finalize()
        mb_ok = True
    except ValueError:
        mb_ok = False
    try:
        plugin = StragglerDetectionPlugin(**values)
    except ResiliencyConfigError:
        return
    assert mb_ok, f"plugin accepted {values} that Megatron Bridge's finalize() rejects"
    # And what the plugin passes on is valid in Megatron Bridge, enabled or not.
    megatron_bridge.NVRxStragglerDetectionConfig(**{**plugin.config_values(), "enabled": True}).finalize()
    assert all(math.isfinite(v) for v in plugin.config_values().values() if isinstance(v, float))
