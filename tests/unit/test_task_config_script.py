"""run.Script side of the shared mechanism (no Megatron Bridge needed: it only writes task.args)."""

import nemo_run as run
import pytest

from nemo_resiliency_plugins import ResiliencyConfigError
from nemo_resiliency_plugins.core.task_config import read_config_field, set_config_fields

FT = "megatron.bridge.training.config.FaultToleranceConfig"


def script(*args):
    return run.Script(path="/tmp/train.py", entrypoint="python", args=list(args))


def test_optional_section_is_created_with_target_and_plus_plus_overrides():
    task = script("train.train_iters=5")
    set_config_fields(task, "ft", {"enable_ft_package": True, "simulated_fault_rank": None}, plugin="P")
    assert task.args == [
        "train.train_iters=5",
        f"++ft._target_={FT}",
        "++ft.enable_ft_package=true",
        "++ft.simulated_fault_rank=null",
    ]


def test_applying_twice_does_not_duplicate():
    task = script()
    for _ in range(2):
        set_config_fields(task, "ft", {"enable_ft_package": True}, plugin="P")
    assert task.args == [f"++ft._target_={FT}", "++ft.enable_ft_package=true"]


def test_agreeing_user_override_is_replaced_not_duplicated():
    task = script("ft.calc_ft_timeouts=True", "other=1")
    set_config_fields(task, "ft", {"calc_ft_timeouts": True}, plugin="P")
    assert task.args == ["other=1", f"++ft._target_={FT}", "++ft.calc_ft_timeouts=true"]


def test_conflicting_user_override_is_reported_with_both_values():
    task = script("+ft.calc_ft_timeouts=false")
    with pytest.raises(ResiliencyConfigError) as info:
        set_config_fields(task, "ft", {"calc_ft_timeouts": True}, plugin="FaultTolerancePlugin")
    text = str(info.value)
    assert "FaultTolerancePlugin" in text and "+ft.calc_ft_timeouts=false" in text and "true" in text
    assert task.args == ["+ft.calc_ft_timeouts=false"], "a failed setup must leave the task untouched"


def test_whole_section_user_dict_is_checked_and_kept():
    task = script("ft={enable_ft_package:false}")
    with pytest.raises(ResiliencyConfigError):
        set_config_fields(task, "ft", {"enable_ft_package": True}, plugin="P")
    task = script("ft={enable_ft_package:true}")
    set_config_fields(task, "ft", {"enable_ft_package": True}, plugin="P")
    assert task.args[0] == "ft={enable_ft_package:true}"


def test_deleting_the_section_is_a_conflict_and_other_target_too():
    with pytest.raises(ResiliencyConfigError, match="deletes"):
        set_config_fields(script("~ft"), "ft", {"enable_ft_package": True}, plugin="P")
    with pytest.raises(ResiliencyConfigError, match="another class"):
        set_config_fields(script("++ft._target_=my.Other"), "ft", {"enable_ft_package": True}, plugin="P")


def test_always_present_section_uses_plain_dotted_overrides():
    task = script("train.exit_signal_handler=true")
    set_config_fields(
        task, "train", {"exit_signal_handler": True, "exit_signal_handler_for_dataloader": False}, plugin="P"
    )
    assert task.args == ["train.exit_signal_handler=true", "train.exit_signal_handler_for_dataloader=false"]
    with pytest.raises(ResiliencyConfigError):
        set_config_fields(script("train.exit_signal_handler=False"), "train", {"exit_signal_handler": True}, plugin="P")


def test_values_that_would_not_survive_nemo_run_quoting_are_refused():
    with pytest.raises(ResiliencyConfigError, match="quote"):
        set_config_fields(script(), "nvrx_straggler", {"logger_name": "has space"}, plugin="P")


def test_converter_escape_hatch_appends_whatever_it_returns():
    task = script("--keep")
    set_config_fields(
        task,
        "ft",
        {"enable_ft_package": True},
        plugin="P",
        script_args={"x": 1},
        script_args_converter_fn=lambda a: ["--ft", str(a["x"])],
    )
    assert task.args == ["--keep", "--ft", "1"]
    with pytest.raises(ResiliencyConfigError, match="script_args_converter_fn"):
        set_config_fields(task, "ft", {}, plugin="P", script_args=None, script_args_converter_fn=lambda a: "oops")


def test_read_config_field_sees_every_form():
    assert (
        read_config_field(
            script("dist.distributed_timeout_minutes=20"), "dist", "distributed_timeout_minutes", plugin="T"
        )
        == 20
    )
    assert read_config_field(script("++ft.calc_ft_timeouts=false"), "ft", "calc_ft_timeouts", plugin="T") is False
    assert read_config_field(script("ft={calc_ft_timeouts:true}"), "ft", "calc_ft_timeouts", plugin="T") is True
    assert read_config_field(script(), "ft", "calc_ft_timeouts", plugin="T") is None


def test_unknown_section_and_task_type():
    with pytest.raises(ResiliencyConfigError, match="unknown"):
        set_config_fields(script(), "nope", {}, plugin="P")
    with pytest.raises(ResiliencyConfigError, match="task of type"):
        set_config_fields("not a task", "ft", {}, plugin="P")
