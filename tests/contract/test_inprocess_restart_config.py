"""InProcessRestartPlugin against the installed Megatron Bridge and NVRx: its fields are
``InProcessRestartConfig``'s, its output parses into a real config that Megatron Bridge's in-process code turns
into an NVRx wrapper, its validation agrees with NVRx's, and what its docstring says Megatron Bridge ignores is
still ignored."""

from __future__ import annotations

import dataclasses
import datetime
import inspect
import os

import fiddle as fdl
import nemo_run as run
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nemo_resiliency_plugins import ResiliencyConfigError
from nemo_resiliency_plugins.inprocess_restart import MB_DEFAULT_DISTRIBUTED_TIMEOUT_MINUTES, InProcessRestartPlugin

pytestmark = pytest.mark.contract


def script_args(plugin: InProcessRestartPlugin, *args: str) -> list[str]:
    task = run.Script(path="train.py", entrypoint="python", args=list(args))
    plugin.setup(task, run.LocalExecutor(ntasks_per_node=2))
    return task.args


def test_fields_and_defaults_are_megatron_bridges(megatron_bridge):
    mb = {f.name: f.default for f in dataclasses.fields(megatron_bridge.InProcessRestartConfig)}
    ours = {f.name: f.default for f in dataclasses.fields(InProcessRestartPlugin) if f.init}
    assert set(ours) == set(mb)
    assert {k: v for k, v in ours.items() if k != "enabled"} == {k: v for k, v in mb.items() if k != "enabled"}
    assert mb["enabled"] is False and ours["enabled"] is True  # the one documented difference


def test_watchdog_default_is_megatron_bridges(megatron_bridge):
    fields = {f.name: f for f in dataclasses.fields(megatron_bridge.DistributedInitConfig)}
    assert fields["distributed_timeout_minutes"].default == MB_DEFAULT_DISTRIBUTED_TIMEOUT_MINUTES


@pytest.mark.parametrize(
    "plugin",
    [
        InProcessRestartPlugin(),
        InProcessRestartPlugin(
            granularity="rank",
            soft_timeout=20,
            hard_timeout=900,
            barrier_timeout=1000,
            heartbeat_interval=2,
            heartbeat_timeout=20,
            completion_timeout=60,
            active_world_size=1,
            empty_cuda_cache=False,
            max_rank_faults=3,
            last_call_wait=0.5,
            termination_grace_time=5,
        ),
    ],
)
def test_script_overrides_build_a_real_config(plugin, workload, apply_overrides, megatron_bridge):
    cfg = apply_overrides(workload.reference_config("/tmp/nrp-ck"), script_args(plugin))
    ipr = cfg.inprocess_restart
    assert type(ipr) is megatron_bridge.InProcessRestartConfig
    for name, value in plugin.config_values().items():
        assert getattr(ipr, name) == value, name
        assert type(getattr(ipr, name)) is type(value), name
    assert cfg.dist.distributed_timeout_minutes == plugin.watchdog_minutes()
    assert cfg.dist.distributed_timeout_minutes * 60 > plugin.hard_timeout


def test_partial_builds_a_real_config(workload, megatron_bridge):
    task = run.Partial(workload.pretrain, config=workload.reference_config_buildable("/tmp/nrp-ck"))
    InProcessRestartPlugin(granularity="rank").setup(task, run.LocalExecutor(ntasks_per_node=2))
    cfg = fdl.build(task.config)
    assert type(cfg.inprocess_restart) is megatron_bridge.InProcessRestartConfig
    assert cfg.inprocess_restart.enabled is True and cfg.inprocess_restart.granularity == "rank"
    assert cfg.dist.distributed_timeout_minutes == MB_DEFAULT_DISTRIBUTED_TIMEOUT_MINUTES


def test_megatron_bridge_turns_the_config_into_an_nvrx_wrapper(workload, apply_overrides, monkeypatch):
    """Megatron Bridge's own inprocess_restart() accepts what the plugin writes (NVRx checks it on construction)."""
    from megatron.bridge.training.inprocess_restart import inprocess_restart
    from megatron.bridge.training.state import GlobalState

    monkeypatch.setenv("MASTER_PORT", "29400")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    plugin = InProcessRestartPlugin(granularity="rank", max_rank_faults=2)
    cfg = apply_overrides(workload.reference_config("/tmp/nrp-ck"), script_args(plugin))
    wrapped = inprocess_restart(lambda **_: None, cfg.inprocess_restart, GlobalState())
    wrapper = inspect.getclosurevars(wrapped).nonlocals["self"]
    assert wrapper.hard_timeout == datetime.timedelta(seconds=plugin.hard_timeout)
    assert wrapper.soft_timeout == datetime.timedelta(seconds=plugin.soft_timeout)
    assert wrapper.heartbeat_interval == datetime.timedelta(seconds=plugin.heartbeat_interval)


def test_fields_documented_as_not_passed_on_are_still_not_passed_on(megatron_bridge):
    """If Megatron Bridge starts passing these, the plugin must stop refusing non-default values."""
    import megatron.bridge.training.inprocess_restart as mb_ipr

    source = inspect.getsource(mb_ipr)
    assert "max_iterations" not in source
    assert "progress_watchdog_interval" not in source
    # monitor_process_logdir only on SLURM_PROCID 0 (why the plugin refuses it where no rank has SLURM_PROCID).
    assert "config.monitor_process_logdir" in source and 'os.environ.get("SLURM_PROCID")' in source
    # The adapter has no annotated CallWrapper parameter, so NVRx injects nothing (the workload counts iterations).
    assert "def _adapter(*args, **kwargs):" in source


TIMES = (
    "monitor_thread_interval",
    "monitor_process_interval",
    "heartbeat_interval",
    "soft_timeout",
    "hard_timeout",
    "heartbeat_timeout",
    "barrier_timeout",
)
positive_seconds = st.floats(min_value=0.01, max_value=400, allow_nan=False)


@settings(max_examples=200, deadline=None)
@given(values=st.fixed_dictionaries({}, optional={name: positive_seconds for name in TIMES}))
def test_plugin_accepts_exactly_what_nvrx_accepts(values):
    import nvidia_resiliency_ext.inprocess as inprocess

    assert "LOCAL_RANK" not in os.environ  # else NVRx adds NVML health checks at construction
    try:
        plugin = InProcessRestartPlugin(**values)
        ours = True
    except ResiliencyConfigError:
        ours = False
        plugin = None
    if plugin is None:
        defaults = InProcessRestartPlugin()
        settings_ = {name: values.get(name, getattr(defaults, name)) for name in TIMES}
    else:
        settings_ = {name: getattr(plugin, name) for name in TIMES}
    try:
        inprocess.Wrapper(
            **{name: datetime.timedelta(seconds=v) for name, v in settings_.items()},
            progress_watchdog_interval=datetime.timedelta(seconds=1.0),
        )
        theirs = True
    except ValueError:
        theirs = False
    assert ours == theirs, settings_
