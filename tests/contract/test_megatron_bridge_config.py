"""Every plugin setting, through Megatron Bridge's own override parser and fiddle, lands as intended."""

from __future__ import annotations

import dataclasses
import typing

import fiddle as fdl
import nemo_run as run
import pytest

from nemo_resiliency_plugins import FaultTolerancePlugin
from nemo_resiliency_plugins.core.task_config import SECTIONS

pytestmark = pytest.mark.contract


def local_executor():
    return run.LocalExecutor(ntasks_per_node=2)


def test_section_table_matches_config_container(megatron_bridge):
    container = megatron_bridge.ConfigContainer
    hints = typing.get_type_hints(container)
    fields = {f.name: f for f in dataclasses.fields(container)}
    for section in SECTIONS.values():
        cls = getattr(megatron_bridge, section.class_name)
        annotation = hints[section.name]
        members = typing.get_args(annotation) or (annotation,)
        assert cls in members, f"{section.name}: {annotation} does not name {cls}"
        field = fields[section.name]
        default_none = field.default is None
        assert section.optional == default_none, section.name
        assert section.class_path == f"{cls.__module__}.{cls.__qualname__}"


FT_CASES = [
    FaultTolerancePlugin(),
    FaultTolerancePlugin(
        calc_ft_timeouts=False,
        simulate_fault=True,
        simulated_fault_type="rank_killed",
        simulated_fault_rank=1,
        simulated_fault_base_delay=12.5,
    ),
    FaultTolerancePlugin(enable_ft_package=False, calc_ft_timeouts=False),
]


def expected_ft(plugin: FaultTolerancePlugin) -> dict:
    return {
        "enable_ft_package": plugin.enable_ft_package,
        "calc_ft_timeouts": plugin.calc_ft_timeouts,
        "simulate_fault": plugin.simulate_fault,
        "simulated_fault_type": plugin.simulated_fault_type,
        "simulated_fault_rank": plugin.simulated_fault_rank,
        "simulated_fault_base_delay": plugin.simulated_fault_base_delay,
    }


@pytest.mark.parametrize("plugin", FT_CASES, ids=["defaults", "simulated-fault", "package-off"])
def test_script_overrides_give_a_real_fault_tolerance_config(
    plugin, megatron_bridge, apply_overrides, workload, tmp_path
):
    task = run.Script(path="/tmp/train.py", entrypoint="python", args=["train.train_iters=7"])
    plugin.setup(task, local_executor())
    cfg = workload.reference_config(str(tmp_path))
    assert cfg.ft is None, "ConfigContainer's default sub-config is None: the trap we must handle"
    apply_overrides(cfg, task.args)
    assert isinstance(cfg.ft, megatron_bridge.FaultToleranceConfig)
    assert {k: getattr(cfg.ft, k) for k in expected_ft(plugin)} == expected_ft(plugin)
    assert type(cfg.ft.enable_ft_package) is bool and cfg.train.train_iters == 7


def test_script_overrides_keep_a_recipe_that_already_set_ft(megatron_bridge, apply_overrides, workload, tmp_path):
    task = run.Script(path="/tmp/train.py", entrypoint="python")
    FaultTolerancePlugin(calc_ft_timeouts=False).setup(task, local_executor())
    cfg = workload.reference_config(str(tmp_path))
    cfg.ft = megatron_bridge.FaultToleranceConfig(simulated_fault_type="rank_hung")
    apply_overrides(cfg, task.args)
    assert isinstance(cfg.ft, megatron_bridge.FaultToleranceConfig)
    assert cfg.ft.enable_ft_package is True and cfg.ft.calc_ft_timeouts is False


def test_the_plain_form_megatron_bridge_emits_fails_on_a_none_section(apply_overrides, workload, tmp_path):
    """Why the mechanism writes ++ft._target_: Megatron Bridge's own plugin form does not parse here."""
    from megatron.bridge.training.utils.omegaconf_utils import OverridesError

    with pytest.raises(OverridesError):
        apply_overrides(workload.reference_config(str(tmp_path)), ["ft.enable_ft_package=true"])


@pytest.mark.parametrize("plugin", FT_CASES, ids=["defaults", "simulated-fault", "package-off"])
def test_partial_path_builds_the_same_values(plugin, megatron_bridge, workload, tmp_path):
    task = run.Partial(workload.pretrain, config=workload.reference_config_buildable(str(tmp_path)))
    plugin.setup(task, local_executor())
    built = fdl.build(task)
    cfg = built.keywords["config"]
    assert isinstance(cfg, megatron_bridge.ConfigContainer)
    assert isinstance(cfg.ft, megatron_bridge.FaultToleranceConfig)
    assert {k: getattr(cfg.ft, k) for k in expected_ft(plugin)} == expected_ft(plugin)


def test_partial_conflict_with_the_users_own_value(megatron_bridge, workload, tmp_path):
    from nemo_resiliency_plugins import ResiliencyConfigError

    config = workload.reference_config_buildable(str(tmp_path))
    config.ft = run.Config(megatron_bridge.FaultToleranceConfig, calc_ft_timeouts=False)
    task = run.Partial(workload.pretrain, config=config)
    with pytest.raises(ResiliencyConfigError, match="ft.calc_ft_timeouts"):
        FaultTolerancePlugin().setup(task, local_executor())


def test_partial_survives_nemo_run_serialization(workload, tmp_path):
    from nemo_run.core.serialization.zlib_json import ZlibJSONSerializer

    task = run.Partial(workload.pretrain, config=workload.reference_config_buildable(str(tmp_path)))
    FaultTolerancePlugin().setup(task, local_executor())
    again = ZlibJSONSerializer().deserialize(ZlibJSONSerializer().serialize(task))
    assert fdl.build(again).keywords["config"].ft.enable_ft_package is True


def test_drop_in_for_megatron_bridges_plugin(megatron_bridge, mb_run_plugins):
    run_plugins = mb_run_plugins
    theirs = {f.name: f for f in dataclasses.fields(run_plugins.FaultTolerancePlugin)}
    ours = {f.name: f for f in dataclasses.fields(FaultTolerancePlugin)}
    for name, field in theirs.items():
        assert name in ours, name
        assert ours[name].default == field.default, name
    for field in dataclasses.fields(megatron_bridge.FaultToleranceConfig):
        assert field.name in ours, f"FaultToleranceConfig.{field.name} has no plugin field"
    converted = run_plugins._default_fault_tolerance_converter(FaultTolerancePlugin().script_args())
    assert converted == ["ft.enable_ft_package=true", "ft.calc_ft_timeouts=true"]
