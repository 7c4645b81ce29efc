"""InProcessRestartPlugin: validation, and what setup() does to real NeMo-Run tasks and executors through
``Experiment.add`` (the guard must fire there, before anything is launched)."""

from __future__ import annotations

import dataclasses

import nemo_run as run
import pytest
from nemo_run.core.execution.launcher import FaultTolerance

from nemo_resiliency_plugins import FaultTolerancePlugin, ResiliencyConfigError
from nemo_resiliency_plugins.inprocess_restart import InProcessRestartPlugin
from tests.helpers import TRAIN, add_job, launch_command, local, slurm

IPR_TARGET = "++inprocess_restart._target_=megatron.bridge.training.config.InProcessRestartConfig"


def script(*args, env=None):
    return run.Script(path=TRAIN, entrypoint="python", args=list(args), env=dict(env or {}))


def partial_task():
    """A run.Partial whose config is a fiddle tree of Megatron Bridge classes (nothing is built here)."""
    from nemo_resiliency_plugins.testing.te_compat import ensure_megatron_bridge_importable

    ensure_megatron_bridge_importable()
    from nemo_resiliency_plugins.testing import workload

    return run.Partial(workload.pretrain, config=workload.reference_config_buildable("/tmp/nrp-ck"))


# ------------------------------------------------------------------------------------------- validation

MB_DEFAULTS = {
    "max_iterations": None,
    "monitor_thread_interval": 1.0,
    "monitor_process_interval": 1.0,
    "progress_watchdog_interval": 1.0,
    "heartbeat_interval": 30.0,
    "soft_timeout": 60.0,
    "hard_timeout": 90.0,
    "heartbeat_timeout": 60.0,
    "barrier_timeout": 120.0,
    "completion_timeout": 120.0,
    "last_call_wait": 1.0,
    "termination_grace_time": 1.0,
    "granularity": "node",
    "active_world_size": None,
    "empty_cuda_cache": True,
    "max_rank_faults": None,
    "monitor_process_logdir": None,
}


def test_defaults_are_megatron_bridges_and_enabled_is_the_switch():
    plugin = InProcessRestartPlugin()
    values = {f.name: getattr(plugin, f.name) for f in dataclasses.fields(plugin) if f.name in MB_DEFAULTS}
    assert values == MB_DEFAULTS
    assert plugin.enabled is True


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("enabled", "yes"),
        ("max_iterations", 0),
        ("monitor_thread_interval", 0),
        ("monitor_process_interval", -1.0),
        ("heartbeat_interval", float("nan")),
        ("soft_timeout", True),
        ("hard_timeout", "90"),
        ("heartbeat_timeout", float("inf")),
        ("barrier_timeout", None),
        ("completion_timeout", 0.0),
        ("last_call_wait", -0.5),
        ("termination_grace_time", [1]),
        ("granularity", "gpu"),
        ("granularity", "Node"),
        ("active_world_size", 0),
        ("active_world_size", 2.0),
        ("empty_cuda_cache", 1),
        ("max_rank_faults", -1),
        ("monitor_process_logdir", "relative/dir"),
        ("monitor_process_logdir", "/tmp/$(rm -rf ~)"),
    ],
)
def test_bad_values_name_plugin_field_and_value(field, value):
    with pytest.raises(ResiliencyConfigError) as info:
        InProcessRestartPlugin(**{field: value})
    assert f"InProcessRestartPlugin.{field}" in str(info.value)
    assert info.value.field == field


@pytest.mark.parametrize(
    ("settings", "field", "other"),
    [
        ({"soft_timeout": 90.0}, "soft_timeout", "hard_timeout"),
        ({"hard_timeout": 120.0}, "hard_timeout", "barrier_timeout"),
        ({"heartbeat_interval": 60.0}, "heartbeat_interval", "heartbeat_timeout"),
        ({"heartbeat_timeout": 130.0, "heartbeat_interval": 5.0}, "heartbeat_timeout", "barrier_timeout"),
        ({"monitor_process_interval": 60.0}, "monitor_process_interval", "heartbeat_timeout"),
        ({"monitor_thread_interval": 60.0}, "monitor_thread_interval", "soft_timeout"),
        (
            {"soft_timeout": 10.0, "monitor_process_interval": 20.0, "heartbeat_interval": 5.0},
            "monitor_process_interval",
            "soft_timeout",
        ),
    ],
)
def test_timeout_ordering_is_checked_with_both_numbers(settings, field, other):
    with pytest.raises(ResiliencyConfigError) as info:
        InProcessRestartPlugin(**settings)
    message = str(info.value)
    assert info.value.field == field
    assert f"{field} < {other}" in message
    other_value = settings.get(other, MB_DEFAULTS[other])
    assert f"less than {other} ({other_value})" in message, message


def test_megatron_bridges_own_functional_test_timeouts_are_accepted():
    # tests/functional_tests/.../test_inprocess_restart.py in Megatron Bridge uses these.
    InProcessRestartPlugin(
        heartbeat_interval=5,
        heartbeat_timeout=60,
        soft_timeout=120,
        hard_timeout=180,
        barrier_timeout=240,
        completion_timeout=200,
        monitor_process_interval=10,
        monitor_thread_interval=10,
        granularity="rank",
    )


def test_fields_megatron_bridge_does_not_pass_on_are_refused_not_ignored():
    with pytest.raises(ResiliencyConfigError, match="does not pass max_iterations") as info:
        InProcessRestartPlugin(max_iterations=5)
    assert "max_rank_faults" in str(info.value)
    with pytest.raises(ResiliencyConfigError, match="does not pass progress_watchdog_interval"):
        InProcessRestartPlugin(progress_watchdog_interval=0.5)
    InProcessRestartPlugin(progress_watchdog_interval=1)  # the value that takes effect


# -------------------------------------------------------------------------------------- run.Script


def test_script_task_gets_the_section_watchdog_and_env():
    job = add_job(script("train.train_iters=5"), local(), [InProcessRestartPlugin(granularity="rank")])
    args = job.task.args
    assert IPR_TARGET in args
    for expected in (
        "++inprocess_restart.enabled=true",
        "++inprocess_restart.granularity=rank",
        "++inprocess_restart.hard_timeout=90.0",
        "++inprocess_restart.max_iterations=null",
        "dist.distributed_timeout_minutes=10",
    ):
        assert expected in args, args
    env = job.executor.env_vars
    assert env["TORCH_CPP_LOG_LEVEL"] == "error"
    assert env["TORCH_NCCL_RETHROW_CUDA_ERRORS"] == "0"
    assert env["NCCL_NVLS_ENABLE"] == "0"
    _, _, role_env = launch_command(job)
    assert role_env["TORCH_CPP_LOG_LEVEL"] == "error", "the env must reach the launched role"


def test_watchdog_timeout_grows_with_hard_timeout():
    plugin = InProcessRestartPlugin(hard_timeout=900, barrier_timeout=1000, completion_timeout=1000)
    job = add_job(script(), local(), [plugin])
    assert "dist.distributed_timeout_minutes=16" in job.task.args  # ceil((900 + 60) / 60)


def test_user_watchdog_timeout_that_exceeds_hard_timeout_is_kept():
    job = add_job(script("dist.distributed_timeout_minutes=2"), local(), [InProcessRestartPlugin()])
    assert [a for a in job.task.args if "distributed_timeout_minutes" in a] == ["dist.distributed_timeout_minutes=2"]


def test_user_watchdog_timeout_below_hard_timeout_is_refused_with_the_numbers():
    with pytest.raises(ResiliencyConfigError) as info:
        add_job(script("dist.distributed_timeout_minutes=1"), local(), [InProcessRestartPlugin()])
    message = str(info.value)
    assert "dist.distributed_timeout_minutes=1" in message
    assert "60 s" in message and "90 s" in message
    assert "at least 3" in message  # ceil((90 + 60) / 60)


def test_user_value_of_an_inprocess_field_is_never_overwritten():
    with pytest.raises(ResiliencyConfigError, match="inprocess_restart.soft_timeout"):
        add_job(script("++inprocess_restart.soft_timeout=30"), local(), [InProcessRestartPlugin()])


@pytest.mark.parametrize("level", ["error", "fatal"])
def test_quiet_cpp_log_level_of_the_user_is_kept(level):
    job = add_job(script(), local(env_vars={"TORCH_CPP_LOG_LEVEL": level}), [InProcessRestartPlugin()])
    assert job.executor.env_vars["TORCH_CPP_LOG_LEVEL"] == level


@pytest.mark.parametrize(
    ("where", "name", "value"),
    [
        ("executor", "TORCH_CPP_LOG_LEVEL", "INFO"),
        ("task", "TORCH_CPP_LOG_LEVEL", "warning"),
        ("executor", "TORCH_NCCL_RETHROW_CUDA_ERRORS", "1"),
        ("task", "NCCL_NVLS_ENABLE", "1"),
    ],
)
def test_contradicting_env_is_an_error_naming_both_values(where, name, value):
    env = {name: value}
    task = script(env=env if where == "task" else None)
    executor = local(env_vars=env if where == "executor" else {})
    with pytest.raises(ResiliencyConfigError) as info:
        add_job(task, executor, [InProcessRestartPlugin()])
    assert name in str(info.value) and repr(value) in str(info.value)


def test_disabled_plugin_writes_enabled_false_and_nothing_else():
    job = add_job(script(), local(), [InProcessRestartPlugin(enabled=False)])
    assert job.task.args == [IPR_TARGET, "++inprocess_restart.enabled=false"]
    assert "NCCL_NVLS_ENABLE" not in job.executor.env_vars


# ------------------------------------------------------------------------------------ run.Partial


def test_partial_task_gets_fiddle_config_and_watchdog():
    job = add_job(partial_task(), local(), [InProcessRestartPlugin(granularity="rank", soft_timeout=45.0)])
    cfg = job.task.config
    assert cfg.inprocess_restart.enabled is True
    assert cfg.inprocess_restart.granularity == "rank"
    assert cfg.inprocess_restart.soft_timeout == 45.0
    assert cfg.dist.distributed_timeout_minutes == 10


def test_partial_task_watchdog_below_hard_timeout_is_refused():
    import fiddle as fdl

    task = partial_task()
    from megatron.bridge.training.config import DistributedInitConfig

    task.config.dist = fdl.Config(DistributedInitConfig, distributed_timeout_minutes=1)
    with pytest.raises(ResiliencyConfigError, match="distributed_timeout_minutes=1"):
        add_job(task, local(), [InProcessRestartPlugin()])


# -------------------------------------------------------------------------------- guard and combinations


def test_slurm_executor_is_refused_at_experiment_add_naming_the_alternatives(tmp_path):
    executor = slurm(tmp_path)
    with run.Experiment("t-ipr-slurm", executor=executor) as exp:
        with pytest.raises(ResiliencyConfigError) as info:
            exp.add(script(), executor=executor, plugins=[InProcessRestartPlugin()], name="train")
        assert exp.jobs == [], "nothing may be added (let alone launched) after the guard fires"
    message = str(info.value)
    assert "run.SlurmExecutor" in message
    assert "--kill-on-bad-exit=1" in message
    assert "srun --kill-on-bad-exit=0" in message and "nvidia_resiliency_ext.inprocess.wait_daemon" in message
    assert "run.LocalExecutor" in message
    assert not (tmp_path / "slurm-jobs").exists() or not any((tmp_path / "slurm-jobs").rglob("*.sh"))


def test_preemption_setup_before_the_plugin_is_refused():
    with pytest.raises(ResiliencyConfigError, match="preemption") as info:
        add_job(script("train.exit_signal_handler=true"), local(), [InProcessRestartPlugin()])
    assert "train.exit_signal_handler=True" in str(info.value)


def test_preemption_setup_on_a_partial_is_refused():
    task = partial_task()
    task.config.train.exit_signal_handler = True
    with pytest.raises(ResiliencyConfigError, match="preemption"):
        add_job(task, local(), [InProcessRestartPlugin()])


def test_exit_signal_handler_false_is_fine():
    add_job(script("train.exit_signal_handler=false"), local(), [InProcessRestartPlugin()])


def test_a_second_inprocess_plugin_is_refused():
    with pytest.raises(ResiliencyConfigError, match="two InProcessRestartPlugins with different settings on one job"):
        add_job(script(), local(), [InProcessRestartPlugin(), InProcessRestartPlugin(granularity="rank")])


def test_each_experiment_job_gets_its_own_check():
    """The marker lives on the job's cloned executor: two jobs from one executor are both accepted."""
    executor = local()
    with run.Experiment("t-ipr-two-jobs", executor=executor) as exp:
        exp.add(script(), executor=executor, plugins=[InProcessRestartPlugin()], name="a")
        exp.add(script(), executor=executor, plugins=[InProcessRestartPlugin()], name="b")
        assert len(exp.jobs) == 2


def test_with_fault_tolerance_plugin_both_configs_and_ft_launcher():
    job = add_job(
        script(),
        local(),
        [FaultTolerancePlugin(num_in_job_restarts=1), InProcessRestartPlugin(granularity="rank")],
    )
    assert isinstance(job.executor.launcher, FaultTolerance)
    assert "++ft.enable_ft_package=true" in job.task.args
    assert "++inprocess_restart.enabled=true" in job.task.args


def test_active_world_size_beyond_the_executor_is_refused():
    with pytest.raises(ResiliencyConfigError, match="at most the 2 ranks"):
        add_job(script(), local(), [InProcessRestartPlugin(active_world_size=3)])
    add_job(script(), local(), [InProcessRestartPlugin(active_world_size=1, granularity="rank")])


def test_monitor_logdir_is_refused_where_megatron_bridge_would_ignore_it():
    with pytest.raises(ResiliencyConfigError, match="SLURM_PROCID"):
        add_job(script(), local(), [InProcessRestartPlugin(monitor_process_logdir="/tmp/ipr-logs")])
    # Accepted where a rank has SLURM_PROCID. (A run.Script task cannot carry it yet: the shared override writer
    # quotes a string with '/', and refuses quoted values - that refusal is a ResiliencyConfigError too.)
    job = add_job(
        partial_task(),
        local(env_vars={"SLURM_PROCID": "0"}),
        [InProcessRestartPlugin(monitor_process_logdir="/tmp/x")],
    )
    assert job.task.config.inprocess_restart.monitor_process_logdir == "/tmp/x"


def test_a_launcher_is_provided_when_none_was_chosen():
    """Megatron Bridge reads MASTER_ADDR/RANK/WORLD_SIZE raw; a LocalExecutor without launcher starts one process."""
    job = add_job(script(), local(), [InProcessRestartPlugin()])
    assert job.executor.launcher == "torchrun"
    entrypoint, args, _ = launch_command(job)
    assert entrypoint == "torchrun"
    assert args[args.index("--nproc-per-node") + 1] == "2"


def test_a_chosen_launcher_is_kept_and_fault_tolerance_upgrades_in_either_order():
    job = add_job(script(), local(launcher=run.Torchrun(rdzv_backend="static")), [InProcessRestartPlugin()])
    assert isinstance(job.executor.launcher, run.Torchrun) and job.executor.launcher.rdzv_backend == "static"
    job = add_job(script(), local(), [InProcessRestartPlugin(), FaultTolerancePlugin()])
    assert isinstance(job.executor.launcher, FaultTolerance)


def test_the_real_preemption_plugin_listed_first_is_refused():
    from nemo_resiliency_plugins.preemption import PreemptionPlugin

    with pytest.raises(ResiliencyConfigError, match="preemption"):
        add_job(script(), local(), [PreemptionPlugin(), InProcessRestartPlugin()])


def test_megatron_bridges_store_ports_are_stated_at_set_up_and_by_doctor():
    """MASTER_PORT+1/+2 cannot be chosen (no setting of NeMo-Run, torch or Megatron Bridge moves them; docs/races.md):
    the set-up log (what `explain` shows) and doctor say so, with what to do."""
    import logging

    from nemo_resiliency_plugins.tools.doctor import check_job
    from tests.helpers import logged

    plugins = [InProcessRestartPlugin()]
    with logged("nemo_resiliency_plugins.inprocess_restart", logging.INFO) as log:
        job = add_job(script(), local(), plugins)
    assert any("MASTER_PORT+1 and MASTER_PORT+2" in line for line in log.messages), log.messages
    (ports,) = [c for c in check_job(job.task, job.executor, plugins) if c.name == "in-process store ports"]
    assert ports.verdict == "warn" and "EADDRINUSE" in ports.detail and "relaunch" in ports.detail
