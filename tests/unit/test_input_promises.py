"""The README's promises, one test group per way issue 17 found them broken (numbers refer to the issue).

Everything goes through the real NeMo-Run (Experiment.add runs the plugins; dry runs render the scripts).
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import nemo_run as run
import pytest

from nemo_resiliency_plugins import (
    FaultTolerancePlugin,
    InProcessRestartPlugin,
    PreemptionPlugin,
    RerunStateMachinePlugin,
    ResiliencyConfigError,
    StragglerDetectionPlugin,
)
from nemo_resiliency_plugins.core import executor_config as ec
from nemo_resiliency_plugins.core.hydra_overrides import format_value, parse_value, same_value
from nemo_resiliency_plugins.recipes import RECIPES, get_recipe
from tests.helpers import HANG_GUARD_S, TRAIN, add_job, launch_command, local, slurm


def script(*args: str) -> run.Script:
    return run.Script(path=TRAIN, entrypoint="python", args=list(args) or ["checkpoint.save=/ckpt"])


def module_level_converter(args) -> list[str]:
    """A converter NeMo-Run can serialize (importable by module and name)."""
    return ["--ft" if args.enable_ft_package else "--no-ft"]


# ------------------------------------------------------------------------------------ 1. unquoted export


def test_1_set_env_on_slurm_refuses_a_value_bash_would_not_read_as_itself(tmp_path):
    with pytest.raises(ResiliencyConfigError) as info:
        ec.set_env(script(), slurm(tmp_path), "NRP_X", "a(b)", plugin="P", field="f")
    assert info.value.plugin == "P" and info.value.field == "f" and "export NRP_X" in str(info.value)
    executor = local()
    ec.set_env(script(), executor, "NRP_X", "a b", plugin="P")  # LocalExecutor passes env without a shell
    assert executor.env_vars["NRP_X"] == "a b"


# ----------------------------------------------------------------------- 2. user heartbeats, section job


def test_2_a_users_heartbeat_timeout_on_the_launcher_is_refused_for_a_section_job():
    executor = local()
    executor.launcher = run.FaultTolerance(rank_heartbeat_timeout=60)
    with pytest.raises(ResiliencyConfigError) as info:
        add_job(script(), executor, [FaultTolerancePlugin()])
    assert info.value.field == "executor.launcher.rank_heartbeat_timeout" and info.value.value == 60
    assert "healthy job" in str(info.value)


def test_2_heartbeat_style_jobs_still_take_the_users_heartbeat_timeout():
    executor = local()
    executor.launcher = run.FaultTolerance(rank_heartbeat_timeout=60)
    job = add_job(script(), executor, [FaultTolerancePlugin(workload_style="heartbeats", rank_heartbeat_timeout=60)])
    _, args, _ = launch_command(job)
    assert "--ft-rank_heartbeat_timeout" in args


# --------------------------------------------------------------------------------- 4. full-match checks


@pytest.mark.parametrize(
    "build",
    [
        lambda: StragglerDetectionPlugin(logger_name="x\n"),
        lambda: FaultTolerancePlugin(calc_ft_timeouts=False, section_timeouts={"step\n": 10.0}),
        lambda: FaultTolerancePlugin(log_level="INFO\n"),
        lambda: FaultTolerancePlugin(rank_termination_signal="SIGKILL\n"),
        lambda: InProcessRestartPlugin(monitor_process_logdir="/logs\n"),
    ],
)
def test_4_a_trailing_newline_is_refused(build):
    with pytest.raises(ResiliencyConfigError):
        build()


def test_4_trailing_newline_in_env_names_and_time_limits():
    with pytest.raises(ResiliencyConfigError):
        ec.set_env(script(), local(), "NAME\n", "1", plugin="P")
    with pytest.raises(ValueError):
        ec.slurm_time_limit_seconds("10\n")


# --------------------------------------------------------------------------- 5. traps and functions chain


USER_SETUP = (
    "trap 'touch user_exit' EXIT\n"
    "trap 'touch user_term' TERM\n"
    'srun() { touch user_srun; command srun "$@"; }\n'
    'scontrol() { touch user_scontrol; command scontrol "$@"; }'
)


def test_5_the_blocks_chain_a_users_traps_and_functions(tmp_path):
    executor = slurm(tmp_path, setup_lines=USER_SETUP)
    job = add_job(script(), executor, [FaultTolerancePlugin(), PreemptionPlugin()])
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for program in ("srun", "scontrol"):  # no Slurm here: no-op programs
        (bin_dir / program).write_text("#!/bin/sh\nexit 0\n")
        (bin_dir / program).chmod(0o755)
    body = job.executor.setup_lines + "\nsrun true\nkill -TERM $$\nexitcode=3\nscontrol requeue 1\n"
    work = tmp_path / "work"
    work.mkdir()
    done = subprocess.run(
        ["bash", "-c", body],
        cwd=work,
        env={"PATH": f"{bin_dir}:/usr/bin:/bin", "SLURM_JOB_ID": "1"},
        capture_output=True,
        text=True,
        timeout=HANG_GUARD_S,
    )
    made = sorted(p.name for p in work.iterdir())
    assert made == ["user_exit", "user_scontrol", "user_srun", "user_term"], (made, done.stderr[-2000:])
    assert done.returncode == 3, "the guard's EXIT trap still ends the job with the step's exit code"
    assert "forwarding it to the step tasks" in done.stdout


# ------------------------------------------------------------------------------------- 6. recipe copies


def test_6_mutating_a_built_plugin_does_not_change_later_recipes():
    first = get_recipe("local-smoke")[0]
    first.section_timeouts["step"] = 1.0
    assert get_recipe("local-smoke")[0].section_timeouts["step"] == 10.0
    assert RECIPES["local-smoke"].plugins["FaultTolerancePlugin"]["section_timeouts"]["step"] == 10.0
    override = {"section_timeouts": {"setup": 100.0, "step": 9.0, "checkpointing": 50.0}}
    built = get_recipe("local-smoke", FaultTolerancePlugin=override)[0]
    built.section_timeouts["step"] = 2.0
    assert override["section_timeouts"]["step"] == 9.0


# ---------------------------------------------------------------------------------------- 7. ft=null, ~ft


@pytest.mark.parametrize("arg", ["ft=null", "~ft", "++ft=null"])
def test_7_removing_the_section_is_refused_whichever_way_it_is_written(arg):
    with pytest.raises(ResiliencyConfigError) as info:
        add_job(script("checkpoint.save=/ckpt", arg), local(), [FaultTolerancePlugin()])
    assert info.value.plugin == "FaultTolerancePlugin" and info.value.field == "ft"
    assert arg in str(info.value)


@pytest.mark.parametrize("arg", ["train=null", "~train"])
def test_7_the_same_rule_for_sections_megatron_bridge_always_creates(arg):
    with pytest.raises(ResiliencyConfigError) as info:
        add_job(script("checkpoint.save=/ckpt", arg), local(), [PreemptionPlugin()])
    assert info.value.plugin == "PreemptionPlugin" and info.value.field == "train"


def test_7_a_whole_section_override_that_disagrees_is_refused():
    with pytest.raises(ResiliencyConfigError) as info:
        add_job(script("checkpoint.save=/ckpt", "train={exit_signal_handler:false}"), local(), [PreemptionPlugin()])
    assert info.value.field == "train.exit_signal_handler"


# --------------------------------------------------------------------------- 8. Hydra's parser, both ways


@pytest.mark.parametrize("plugin", [FaultTolerancePlugin(), PreemptionPlugin(), StragglerDetectionPlugin()])
def test_8_a_malformed_override_is_one_error_naming_plugin_and_key(plugin):
    with pytest.raises(ResiliencyConfigError) as info:
        add_job(script("checkpoint.save='/ckpt"), local(), [plugin])
    assert info.value.plugin == type(plugin).__name__
    assert info.value.field == "task.args[checkpoint.save]"


def test_8_what_we_read_is_what_hydra_reads():
    from hydra.core.override_parser.overrides_parser import OverridesParser

    for text in ["'a b'", "[1,2]", "{a:1}", "3.0", "null", "", "'\\''", "/x/y", "1e3"]:
        (hydra,) = OverridesParser.create().parse_overrides([f"k={text}"])
        assert same_value(parse_value(text), hydra.value()), text


@pytest.mark.parametrize("value", ["a\\b", "a\\", "it's", "x${y}", "\\${y}", "a\\'b", "'", "\\\\"])
def test_8_written_strings_read_back_exactly(value):
    assert parse_value(format_value(value)) == value


# ------------------------------------------------------------------------------------ 11. exit codes 16/17


def test_11_the_determinism_recipe_says_16_is_reproduced_and_17_transient():
    text = RECIPES["determinism-debugging"].description
    assert "transient fault (exit 17" in text and "reproducible result (exit 16" in text
    assert "transient fault (exit 16" not in text


# ------------------------------------------------------------------------------- 12. terminating signals


@pytest.mark.parametrize("name", ["SIGSTOP", "SIGCONT", "SIGCHLD", "SIGWINCH", "SIGURG", "SIGTSTP"])
def test_12_signals_that_do_not_end_a_process_are_refused(name):
    with pytest.raises(ResiliencyConfigError, match="rank_termination_signal"):
        FaultTolerancePlugin(rank_termination_signal=name)


@pytest.mark.parametrize("name", ["SIGKILL", "SIGTERM", "SIGINT", "SIGABRT", "SIGUSR1"])
def test_12_terminating_signals_are_accepted(name):
    assert FaultTolerancePlugin(rank_termination_signal=name).rank_termination_signal == name


# ------------------------------------------------------------------------------------- 13. converters


@pytest.mark.parametrize("cls", [FaultTolerancePlugin, PreemptionPlugin, StragglerDetectionPlugin])
def test_13_a_lambda_or_nested_converter_is_refused_at_construction(cls):
    def nested(args):
        return []

    with pytest.raises(ResiliencyConfigError, match="lambda"):
        cls(script_args_converter_fn=lambda args: [])
    with pytest.raises(ResiliencyConfigError, match="inside another function"):
        cls(script_args_converter_fn=nested)


def test_13_a_module_level_converter_survives_nemo_runs_serialization():
    plugin = FaultTolerancePlugin(script_args_converter_fn=module_level_converter)
    with run.Experiment("t-converter", executor=local(), log_level="ERROR") as exp:
        exp.add(script(), executor=local(), plugins=[plugin], name="train")
        exp.dryrun(log=False)
        assert exp.jobs[0].task.args[-1] == "--ft"


# --------------------------------------------------------------------------------------- 14. huge retries


def test_14_retries_too_large_for_the_guards_shell_arithmetic_are_refused():
    with pytest.raises(ResiliencyConfigError, match="num_job_retries_on_failure"):
        FaultTolerancePlugin(num_job_retries_on_failure=sys.maxsize)
    limit = ec.MAX_JOB_RETRIES
    assert FaultTolerancePlugin(num_job_retries_on_failure=limit).num_job_retries_on_failure == limit
    out = subprocess.run(
        ["bash", "-c", f"TORCHX_MAX_RETRIES={limit}; echo $(( TORCHX_MAX_RETRIES + 1 ))"],
        capture_output=True,
        text=True,
    )
    assert out.stdout.strip() == str(limit + 1)


# ---------------------------------------------------------------------------------- 15. get_recipe types


@pytest.mark.parametrize(
    "call",
    [
        lambda: get_recipe(123),
        lambda: get_recipe(None),
        lambda: get_recipe(["local-smoke"]),
        lambda: get_recipe("local-smoke", FaultTolerancePlugin=5),
        lambda: get_recipe("local-smoke", FaultTolerancePlugin=["num_in_job_restarts"]),
    ],
)
def test_15_bad_get_recipe_arguments_are_our_error(call):
    with pytest.raises(ResiliencyConfigError):
        call()


# ---------------------------------------------------------------------------------- 16. huge integers


FLOAT_FIELDS = [
    (FaultTolerancePlugin, "initial_rank_heartbeat_timeout"),
    (FaultTolerancePlugin, "rank_heartbeat_timeout"),
    (FaultTolerancePlugin, "simulated_fault_base_delay"),
    (FaultTolerancePlugin, "out_of_section_timeout"),
    (FaultTolerancePlugin, "workload_check_interval"),
    (StragglerDetectionPlugin, "report_time_interval"),
    (StragglerDetectionPlugin, "gpu_relative_perf_threshold"),
    (RerunStateMachinePlugin, "spiky_loss_factor"),
    (InProcessRestartPlugin, "soft_timeout"),
    (InProcessRestartPlugin, "hard_timeout"),
]


@pytest.mark.parametrize(("cls", "field"), FLOAT_FIELDS, ids=lambda v: getattr(v, "__name__", v))
def test_16_an_int_too_large_for_a_float_is_refused_not_overflowerror(cls, field):
    with pytest.raises(ResiliencyConfigError) as info:
        cls(**{field: 10**400})
    assert info.value.field == field


def test_16_section_timeouts_and_task_values_too():
    with pytest.raises(ResiliencyConfigError, match="section_timeouts"):
        FaultTolerancePlugin(calc_ft_timeouts=False, section_timeouts={"step": 10**400})
    with pytest.raises(ResiliencyConfigError, match="distributed_timeout_minutes"):
        add_job(
            script("checkpoint.save=/c", f"dist.distributed_timeout_minutes={10**400}"),
            local(),
            [InProcessRestartPlugin()],
        )


# ---------------------------------------------------------------------------------- 17. time="0"


@pytest.mark.parametrize("text", ["0", "00:00:00", "0-0"])
def test_17_a_zero_slurm_time_is_no_limit(text, tmp_path):
    assert ec.slurm_time_limit_seconds(text) is None
    executor = slurm(tmp_path)
    executor.time = text
    job = add_job(script(), executor, [PreemptionPlugin(preempt_time=600)])
    assert job.executor.signal == "B:TERM@600"


# ------------------------------------------------------------------------------------- 19. retries


def test_19_executor_retries_zero_is_nemo_runs_default_and_takes_the_plugins_value(tmp_path):
    executor = slurm(tmp_path)
    executor.retries = 0
    job = add_job(script(), executor, [FaultTolerancePlugin(num_job_retries_on_failure=2)])
    assert job.executor.retries == 2


def test_19_two_plugins_with_different_retries_are_an_error_even_when_one_is_zero(tmp_path):
    with pytest.raises(ResiliencyConfigError) as info:
        add_job(
            script(),
            slurm(tmp_path),
            [FaultTolerancePlugin(num_job_retries_on_failure=0), FaultTolerancePlugin(num_job_retries_on_failure=2)],
        )
    # Both plugins' values are named (the twin-plugin rule of core/executor_config.claim_plugin).
    assert "FaultTolerancePlugin.num_job_retries_on_failure = 2" in str(info.value), info.value
    assert "(num_job_retries_on_failure=0 vs 2)" in str(info.value), info.value
    job = add_job(
        script(),
        slurm(tmp_path),
        [FaultTolerancePlugin(num_job_retries_on_failure=0), FaultTolerancePlugin(num_job_retries_on_failure=0)],
    )
    assert job.executor.retries == 0


def test_19_a_users_non_default_retries_is_never_overwritten(tmp_path):
    executor = slurm(tmp_path)
    executor.retries = 5
    with pytest.raises(ResiliencyConfigError, match="retries=5"):
        add_job(script(), executor, [FaultTolerancePlugin(num_job_retries_on_failure=2)])


def test_retries_claim_is_not_serialized(tmp_path):
    """The record of which plugin set retries lives outside the executor's fields (NeMo-Run serializes those)."""
    job = add_job(script(), slurm(tmp_path), [FaultTolerancePlugin()])
    assert "_nrp_claims" not in {f.name for f in dataclasses.fields(job.executor)}
    assert job.executor.__dict__["_nrp_claims"]["retries"] == (2, "FaultTolerancePlugin.num_job_retries_on_failure")


def test_3_doctor_turns_an_override_hydra_rejects_into_a_fail_check():
    from nemo_resiliency_plugins.tools.doctor import check_job

    checks = check_job(script("checkpoint.save='/ckpt"), local(), [])
    assert [(c.verdict, c.name) for c in checks] == [("FAIL", "task.args parse with Hydra's override parser")]
    assert "checkpoint.save='/ckpt" in checks[0].detail
