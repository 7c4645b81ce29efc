"""PreemptionPlugin's settings, through Megatron Bridge's own override parser and fiddle, reach a real
``TrainingConfig`` with values Megatron Bridge's ``DistributedSignalHandler`` accepts."""

from __future__ import annotations

import dataclasses
import signal

import fiddle as fdl
import nemo_run as run
import pytest

from nemo_resiliency_plugins.preemption import PreemptionPlugin

pytestmark = pytest.mark.contract


def local_executor():
    return run.LocalExecutor(ntasks_per_node=2)


def installs_handler_for(value, expected: signal.Signals) -> bool:
    """Megatron Bridge's own handler, built from the parsed value, traps ``expected`` (then restored)."""
    from megatron.bridge.training.utils.sig_utils import DistributedSignalHandler

    before = signal.getsignal(expected)
    handler = DistributedSignalHandler(value).__enter__()
    try:
        return signal.getsignal(expected) is not before and callable(signal.getsignal(expected))
    finally:
        handler.release()
        assert signal.getsignal(expected) is before


@pytest.mark.parametrize(("name", "expected"), [("SIGTERM", signal.SIGTERM), ("SIGINT", signal.SIGINT)])
def test_script_overrides_reach_a_training_config_the_signal_handler_accepts(
    apply_overrides, workload, tmp_path, name, expected
):
    task = run.Script(
        path="/tmp/train.py", entrypoint="python", args=["train.train_iters=7", "checkpoint.save=/tmp/ck"]
    )
    PreemptionPlugin(exit_signal=name, enable_exit_handler_for_data_loader=True).setup(task, local_executor())
    cfg = apply_overrides(workload.reference_config(str(tmp_path)), task.args)
    assert cfg.train.exit_signal_handler is True
    assert cfg.train.exit_signal_handler_for_dataloader is True
    assert signal.Signals(cfg.train.exit_signal) is expected and cfg.train.train_iters == 7
    assert installs_handler_for(cfg.train.exit_signal, expected)


def test_why_the_signal_is_written_as_a_number(apply_overrides, workload, tmp_path):
    """The name parses to a str, which Megatron Bridge's handler rejects: the plugin must write the number."""
    cfg = apply_overrides(workload.reference_config(str(tmp_path)), ["train.exit_signal=SIGTERM"])
    assert cfg.train.exit_signal == "SIGTERM"
    with pytest.raises(TypeError):
        installs_handler_for(cfg.train.exit_signal, signal.SIGTERM)


def test_handler_off_leaves_megatron_bridges_defaults(apply_overrides, workload, tmp_path):
    task = run.Script(path="/tmp/train.py", entrypoint="python")
    PreemptionPlugin(enable_exit_handler=False).setup(task, local_executor())
    cfg = apply_overrides(workload.reference_config(str(tmp_path)), task.args)
    assert cfg.train.exit_signal_handler is False


def test_partial_path_builds_a_real_signal(megatron_bridge, workload, tmp_path):
    task = run.Partial(workload.pretrain, config=workload.reference_config_buildable(str(tmp_path)))
    PreemptionPlugin(exit_signal="SIGHUP").setup(task, local_executor())
    cfg = fdl.build(task).keywords["config"]
    assert isinstance(cfg.train, megatron_bridge.TrainingConfig)
    assert cfg.train.exit_signal_handler is True and cfg.train.exit_signal_handler_for_dataloader is False
    assert cfg.train.exit_signal is signal.SIGHUP
    assert installs_handler_for(cfg.train.exit_signal, signal.SIGHUP)


def test_partial_survives_nemo_run_serialization(workload, tmp_path):
    from nemo_run.core.serialization.zlib_json import ZlibJSONSerializer

    task = run.Partial(workload.pretrain, config=workload.reference_config_buildable(str(tmp_path)))
    PreemptionPlugin().setup(task, local_executor())
    again = ZlibJSONSerializer().deserialize(ZlibJSONSerializer().serialize(task))
    assert fdl.build(again).keywords["config"].train.exit_signal == signal.SIGTERM


def test_drop_in_for_megatron_bridges_plugin(mb_run_plugins):
    theirs = {f.name: f for f in dataclasses.fields(mb_run_plugins.PreemptionPlugin)}
    ours = {f.name: f for f in dataclasses.fields(PreemptionPlugin)}
    for name, field in theirs.items():
        assert name in ours, name
        assert ours[name].default == field.default, name
    # A converter written for Megatron Bridge's script args works with ours (a superset).
    converted = mb_run_plugins._default_preemption_converter(PreemptionPlugin().script_args())
    assert converted == ["train.exit_signal_handler=True", "train.exit_signal_handler_for_dataloader=False"]
    task = run.Script(path="/tmp/train.py", entrypoint="python")
    PreemptionPlugin(script_args_converter_fn=mb_run_plugins._default_preemption_converter).setup(
        task, local_executor()
    )
    assert task.args == converted


def test_our_overrides_parse_like_megatron_bridges_plus_the_signal(apply_overrides, workload, tmp_path, mb_run_plugins):
    ours = run.Script(path="/tmp/train.py", entrypoint="python", args=["checkpoint.save=/tmp/ck"])
    theirs = run.Script(path="/tmp/train.py", entrypoint="python", args=["checkpoint.save=/tmp/ck"])
    PreemptionPlugin().setup(ours, local_executor())
    mb_run_plugins.PreemptionPlugin().setup(theirs, local_executor())
    a = apply_overrides(workload.reference_config(str(tmp_path)), ours.args).train
    b = apply_overrides(workload.reference_config(str(tmp_path)), theirs.args).train
    for field in ("exit_signal_handler", "exit_signal_handler_for_dataloader"):
        assert getattr(a, field) == getattr(b, field), field
    assert signal.Signals(a.exit_signal) is signal.SIGTERM
