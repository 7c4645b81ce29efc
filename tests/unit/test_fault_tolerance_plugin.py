"""FaultTolerancePlugin: validation and what setup() does to real NeMo-Run tasks and executors."""

import dataclasses
from pathlib import Path

import nemo_run as run
import pytest
from nemo_run.core.execution.launcher import FaultTolerance

from nemo_resiliency_plugins import FaultTolerancePlugin, ResiliencyConfigError
from tests.helpers import TRAIN, add_job, launch_command, local, slurm


def script(*args):
    return run.Script(path=TRAIN, entrypoint="python", args=list(args))


# ------------------------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("num_in_job_restarts", -1),
        ("num_in_job_restarts", True),
        ("num_job_retries_on_failure", 1.5),
        ("initial_rank_heartbeat_timeout", 0),
        ("simulated_fault_type", "rank_exploded"),
        ("simulated_fault_rank", -2),
        ("workload_style", "pings"),
        ("section_timeouts", {"step": -1}),
        ("section_timeouts", {"bad name": 3}),
        ("out_of_section_timeout", float("inf")),
        ("workload_check_interval", 0),
        ("rank_termination_signal", "SIGNOPE"),
        ("log_level", "LOUD"),
        ("max_no_progress_cycles", -5),
        ("script_args_converter_fn", "not callable"),
    ],
)
def test_bad_values_name_plugin_field_and_value(field, value):
    with pytest.raises(ResiliencyConfigError) as info:
        FaultTolerancePlugin(**{field: value})
    assert f"FaultTolerancePlugin.{field}" in str(info.value)


def test_calc_ft_timeouts_needs_the_megatron_bridge_sections_declared():
    with pytest.raises(ResiliencyConfigError, match="KeyError"):
        FaultTolerancePlugin(section_timeouts={"step": 30})
    FaultTolerancePlugin(section_timeouts={"step": 30}, calc_ft_timeouts=False)


def test_simulated_fault_needs_the_ft_package():
    with pytest.raises(ResiliencyConfigError, match="simulate_fault"):
        FaultTolerancePlugin(simulate_fault=True, enable_ft_package=False)


# -------------------------------------------------------------------------------------- LocalExecutor


def test_local_launcher_env_and_config_file():
    job = add_job(script(), local(), [FaultTolerancePlugin(num_in_job_restarts=2, num_job_retries_on_failure=1)])
    launcher = job.executor.launcher
    assert isinstance(launcher, FaultTolerance)
    assert launcher.max_restarts == 2
    assert launcher.initial_rank_heartbeat_timeout is None and launcher.rank_heartbeat_timeout is None
    assert job.executor.retries == 1
    env = job.executor.env_vars
    assert env["GROUP_RANK"] == "0" and env["PET_MAX_RESTARTS"] == "2"
    content = Path(env["PET_FT_CFG_PATH"]).read_text()
    assert "step: 180.0" in content and "rank_out_of_section_timeout: 300.0" in content
    assert "initial_rank_heartbeat_timeout: null" in content

    entrypoint, args, role_env = launch_command(job)
    assert entrypoint == "ft_launcher"
    assert "--max-restarts" in args and args[args.index("--max-restarts") + 1] == "2"
    assert not any("heartbeat" in a for a in args)
    assert "--ignore-missing-fault-tol-cfg" not in args
    assert role_env["PET_FT_CFG_PATH"] == env["PET_FT_CFG_PATH"]


def test_diagnostics_stops_a_hung_rank_with_sigabrt_and_turns_on_pythons_faulthandler():
    job = add_job(script(), local(), [FaultTolerancePlugin(diagnostics=True)])
    _, args, env = launch_command(job)
    assert args[args.index("--ft-rank_termination_signal") + 1] == "SIGABRT"
    assert "rank_termination_signal: SIGABRT" in Path(env["PET_FT_CFG_PATH"]).read_text()
    assert env["PYTHONFAULTHANDLER"] == "1"
    # Off (the default): SIGKILL, and the ranks' environment is left alone.
    _, args, env = launch_command(add_job(script(), local(), [FaultTolerancePlugin()]))
    assert args[args.index("--ft-rank_termination_signal") + 1] == "SIGKILL" and "PYTHONFAULTHANDLER" not in env
    # A signal that would end the rank without a dump is refused; SIGABRT said twice is fine.
    with pytest.raises(ResiliencyConfigError, match=r"rank_termination_signal = 'SIGTERM'.*stack dump"):
        FaultTolerancePlugin(diagnostics=True, rank_termination_signal="SIGTERM")
    assert FaultTolerancePlugin(diagnostics=True, rank_termination_signal="sigabrt").termination_signal() == "SIGABRT"
    with pytest.raises(ResiliencyConfigError, match="PYTHONFAULTHANDLER"):  # the user's own value is not overwritten
        add_job(script(), local(env_vars={"PYTHONFAULTHANDLER": ""}), [FaultTolerancePlugin(diagnostics=True)])


def test_diagnostics_on_slurm_has_every_rank_line_say_its_global_rank(tmp_path):
    """Slurm: one rank per node makes every node's lines "[default0]:"; the guard's srun function (which alone can
    write torch elastic's ${...} template without the sbatch script expanding it) adds the global rank when
    NRP_RANK_LOG_PREFIX=1, unless the user set a template of their own. Off Slurm (one host) nothing is added."""
    executor = add_job(script(), slurm(tmp_path), [FaultTolerancePlugin(diagnostics=True)]).executor
    assert executor.env_vars["NRP_RANK_LOG_PREFIX"] == "1"
    assert "NRP_RANK_LOG_PREFIX" not in add_job(script(), slurm(tmp_path), [FaultTolerancePlugin()]).executor.env_vars
    _, _, env = launch_command(add_job(script(), local(), [FaultTolerancePlugin(diagnostics=True)]))
    assert "NRP_RANK_LOG_PREFIX" not in env
    from tests.unit.test_silent_node_evidence import run_bash

    srun = "NRP_SRUN_CAPTURED=true; NRP_SRUN_ERR=/dev/null; "  # the guard's srun function, around a stand-in
    show = 'srun ft_launcher x; echo "[$TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE]"'
    template = "[${role_name}${local_rank}]:[rank${rank}]:"
    assert run_bash(f"{srun}NRP_RANK_LOG_PREFIX=1; {show}").stdout.strip() == f"[{template}]"
    mine = "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE='<${rank}>'; "
    assert run_bash(f"{srun}NRP_RANK_LOG_PREFIX=1; {mine}{show}").stdout.strip() == "[<${rank}>]"
    assert run_bash(f"{srun}{show}").stdout.strip() == "[]"


def test_diagnostics_sets_the_flight_recorder_to_dump_into_the_job_directory(tmp_path):
    # Local: the Experiment's job directory; Slurm: the job's folder under the tunnel's job_dir, /nemo_run in a
    # container. The dump files are <prefix><rank>, where `nemo-resiliency report` looks for them.
    job = add_job(script(), local(), [FaultTolerancePlugin(diagnostics=True)])
    _, _, env = launch_command(job)
    prefix = f"{job.executor.job_dir}/flight_recorder_rank_"
    assert env["TORCH_FR_DUMP_TEMP_FILE"] == env["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"] == prefix
    assert env["TORCH_FR_BUFFER_SIZE"] == "2000" and env["TORCH_NCCL_DUMP_ON_TIMEOUT"] == "1"
    assert "TORCH_NCCL_TRACE_BUFFER_SIZE" not in env  # the old name: a deprecation warning on every rank of a new torch
    executor = add_job(script(), slurm(tmp_path), [FaultTolerancePlugin(diagnostics=True)]).executor
    folder = f"{executor.tunnel.job_dir}/{Path(executor.job_dir).name}"  # where the sbatch script and logs go
    assert folder.startswith(f"{tmp_path}/slurm-jobs/")
    assert executor.env_vars["TORCH_FR_DUMP_TEMP_FILE"] == f"{folder}/flight_recorder_rank_"
    executor = add_job(
        script(), slurm(tmp_path, container_image="nvcr.io/nvidia/nemo:25.11"), [FaultTolerancePlugin(diagnostics=True)]
    ).executor
    assert executor.env_vars["TORCH_FR_DUMP_TEMP_FILE"] == "/nemo_run/flight_recorder_rank_"
    # The user's buffer size and dump path are theirs to choose (kept); the dump-on-timeout switch is required.
    kept = {"TORCH_FR_BUFFER_SIZE": "20000", "TORCH_FR_DUMP_TEMP_FILE": "/scratch/fr_"}
    _, _, env = launch_command(add_job(script(), local(env_vars=dict(kept)), [FaultTolerancePlugin(diagnostics=True)]))
    assert {k: env[k] for k in kept} == kept
    with pytest.raises(ResiliencyConfigError, match=r"TORCH_NCCL_DUMP_ON_TIMEOUT"):
        add_job(script(), local(env_vars={"TORCH_NCCL_DUMP_ON_TIMEOUT": "0"}), [FaultTolerancePlugin(diagnostics=True)])
    # Off: none of it.
    _, _, env = launch_command(add_job(script(), local(), [FaultTolerancePlugin()]))
    assert not {k for k in env if k.startswith("TORCH_FR_") or k.startswith("TORCH_NCCL_")}


def test_zero_restarts_really_means_zero():
    job = add_job(script(), local(), [FaultTolerancePlugin(num_in_job_restarts=0)])
    _, args, env = launch_command(job)
    # NeMo-Run drops a falsy --max-restarts; the env fallback carries the 0 instead.
    assert "--max-restarts" not in args
    assert env["PET_MAX_RESTARTS"] == "0"
    assert "--ignore-missing-fault-tol-cfg" not in args


def test_heartbeat_style_passes_heartbeat_timeouts_and_no_sections():
    plugin = FaultTolerancePlugin(
        workload_style="heartbeats", initial_rank_heartbeat_timeout=60, rank_heartbeat_timeout=10
    )
    job = add_job(script(), local(), [plugin])
    _, args, env = launch_command(job)
    assert args[args.index("--ft-rank_heartbeat_timeout") + 1] == "10"
    assert "rank_section_timeouts: {}" in Path(env["PET_FT_CFG_PATH"]).read_text()


def test_torchrun_launcher_is_upgraded_keeping_its_settings():
    executor = local(launcher=run.Torchrun(rdzv_port=31337, nsys_profile=True))
    job = add_job(script(), executor, [FaultTolerancePlugin()])
    assert isinstance(job.executor.launcher, FaultTolerance)
    assert job.executor.launcher.rdzv_port == 31337 and job.executor.launcher.nsys_profile is True


def test_conflicting_user_settings_are_reported_not_overwritten():
    with pytest.raises(ResiliencyConfigError, match="max_restarts=7"):
        add_job(script(), local(launcher=run.FaultTolerance(max_restarts=7)), [FaultTolerancePlugin()])
    with pytest.raises(ResiliencyConfigError, match="retries=5"):
        add_job(script(), local(retries=5), [FaultTolerancePlugin()])
    with pytest.raises(ResiliencyConfigError, match="GROUP_RANK"):
        add_job(script(), local(env_vars={"GROUP_RANK": "3"}), [FaultTolerancePlugin()])
    with pytest.raises(ResiliencyConfigError, match="calc_ft_timeouts"):
        add_job(script("ft.calc_ft_timeouts=false"), local(), [FaultTolerancePlugin()])


def test_missing_ft_launcher_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ResiliencyConfigError, match="ft_launcher.*nvidia-resiliency-ext"):
        add_job(script(), local(), [FaultTolerancePlugin()])


def test_python_file_with_bash_entrypoint_is_a_clear_error(tmp_path):
    train = tmp_path / "train.py"
    train.write_text("print('hi')\n")
    with pytest.raises(ResiliencyConfigError, match="entrypoint='python'"):
        add_job(run.Script(path=str(train)), local(), [FaultTolerancePlugin()])
    train.write_text("#!/usr/bin/env python\nprint('hi')\n")
    train.chmod(0o755)
    add_job(run.Script(path=str(train)), local(), [FaultTolerancePlugin()])


# -------------------------------------------------------------------------------------- SlurmExecutor


def test_slurm_writes_the_config_in_the_sbatch_script_and_sets_no_group_rank(tmp_path):
    job = add_job(script(), slurm(tmp_path), [FaultTolerancePlugin()])
    executor = job.executor
    assert "GROUP_RANK" not in executor.env_vars
    path = executor.env_vars["PET_FT_CFG_PATH"]
    assert path.startswith(str(tmp_path / "slurm-jobs"))
    assert f"cat > '{path}' <<'NRP_FILE_EOF'" in executor.setup_lines
    assert "    step: 180.0" in executor.setup_lines
    assert executor.retries == 2


def test_slurm_container_sees_the_file_under_nemo_run_mount(tmp_path):
    job = add_job(script(), slurm(tmp_path, container_image="nvcr.io/x:y"), [FaultTolerancePlugin()])
    assert job.executor.env_vars["PET_FT_CFG_PATH"].startswith("/nemo_run/")


def test_unknown_executor_type_is_refused_by_name():
    """An executor this package has no rules class for is refused naming it, before anything is changed."""

    @dataclasses.dataclass(kw_only=True)
    class HomeGrownExecutor(run.Executor):
        pass

    executor = HomeGrownExecutor()
    with pytest.raises(ResiliencyConfigError, match="HomeGrownExecutor is not an executor this package"):
        FaultTolerancePlugin().setup(script(), executor)
    assert executor.launcher is None and executor.env_vars == {}
