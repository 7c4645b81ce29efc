"""FaultTolerancePlugin(launcher_args=...): extra ft_launcher flags, checked against the installed NVRx's own parser
and put on the Slurm launch line (issue 49 item 4). Real NeMo-Run dry runs, real NVRx parser, real bash."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys

import nemo_run as run
import pytest

from nemo_resiliency_plugins import FaultTolerancePlugin, ResiliencyConfigError
from nemo_resiliency_plugins.core import launcher_args, slurm_script
from nemo_resiliency_plugins.tools.doctor import check_job
from tests.helpers import TRAIN, add_job, local, slurm

FLAGS = {"term-timeout": 600, "ft-enable-log-server": "true"}


def _dry_run_sbatch(tmp_path, plugin) -> tuple[str, object]:
    """The sbatch script of a real ``run.Experiment(...).dryrun`` of a one-node Slurm job with ``plugin``, and the
    job. NeMo-Run's packaging shell reads stdin, which pytest refuses: /dev/null meanwhile (as executor_jobs does)."""
    executor = slurm(tmp_path)
    with contextlib.chdir(tmp_path), open(os.devnull) as devnull:
        saved, sys.stdin = sys.stdin, devnull
        try:
            with run.Experiment("t-launcher-args", executor=executor, log_level="ERROR") as exp:
                exp.add(run.Script(path=TRAIN, entrypoint="python"), executor=executor, plugins=[plugin], name="train")
                exp.dryrun(log=False)
                job = exp.jobs[0]
                return str(job._dryrun_info.request.materialize()), job
        finally:
            sys.stdin = saved


def _launch_argv(tmp_path, script: str) -> list[str]:
    """What srun gets when the sbatch script's ft_launcher line runs after its launcher-args block: real bash, with a
    stand-in srun (after the block, as a user's own srun function would be) that writes its arguments."""
    line = next(x for x in script.splitlines() if x.startswith("srun ") and " ft_launcher " in x)
    array = next(x for x in script.splitlines() if x.startswith(launcher_args.ARRAY_NAME + "="))
    assert launcher_args._SHIM in script
    out = tmp_path / "argv"
    program = "\n".join(
        [
            slurm_script._CHAIN_HELPERS,
            f'srun() {{ printf "%s\\n" "$@" > {out}; }}',
            array,
            launcher_args._SHIM,
            line,
        ]
    )
    subprocess.run(["bash", "-c", program], check=True, capture_output=True, text=True, timeout=60)
    return out.read_text().split("\n")[:-1]


def test_a_slurm_dry_run_carries_the_flags_and_nvrx_s_parser_reads_them(tmp_path):
    script, _ = _dry_run_sbatch(tmp_path, FaultTolerancePlugin(launcher_args=FLAGS))
    assert f"{launcher_args.ARRAY_NAME}=(--term-timeout 600 --ft-enable-log-server true)" in script
    argv = _launch_argv(tmp_path, script)
    words = argv[argv.index("ft_launcher") + 1 :]
    assert words[:4] == ["--term-timeout", "600", "--ft-enable-log-server", "true"]
    parser, why = launcher_args.nvrx_parser()
    assert why is None
    parsed = parser.parse_args(words)
    assert parsed.term_timeout == 600.0
    assert str(parsed.ft_enable_log_server).lower() == "true"
    assert parsed.training_script == TRAIN  # the flags sit before the script, not among its arguments
    assert "--max-restarts" in words  # NeMo-Run's own flags are still there


def test_without_launcher_args_the_sbatch_script_has_no_block(tmp_path):
    script, _ = _dry_run_sbatch(tmp_path, FaultTolerancePlugin())
    assert launcher_args.ARRAY_NAME not in script


def test_doctor_says_the_flags_reach_ft_launcher(tmp_path):
    plugin = FaultTolerancePlugin(launcher_args=FLAGS)
    _, job = _dry_run_sbatch(tmp_path, plugin)
    checks = {c.name: c for c in check_job(job.task, job.executor, plugins=[plugin])}
    check = checks["launcher_args reach ft_launcher"]
    assert check.verdict == "pass", check
    assert "--term-timeout 600" in check.detail


def test_a_bool_value_is_written_as_nvrx_reads_it():
    words = FaultTolerancePlugin(launcher_args={"ft-enable-log-server": False}).launcher_words()
    assert words == ["--ft-enable-log-server", "false"]
    parser, _ = launcher_args.nvrx_parser()
    assert str(parser.parse_args([*words, "train.py"]).ft_enable_log_server).lower() == "false"


@pytest.mark.parametrize(
    ("flags", "match"),
    [
        ({"--term-timeout": 5}, r"without its leading dashes.*write 'term-timeout', not '--term-timeout'"),
        ({"ft-fact-window": 3}, r"a flag of the installed NVRx 0\.7\.0's ft_launcher.*--ft-fact-window"),
        ({"term-timeout": "5;reboot"}, r"launcher_args\['term-timeout'\].*launch line"),
        ({"ft-nvrx-logfile": "a b"}, r"launcher_args\['ft-nvrx-logfile'\]"),
        ({"ft-nvrx-logfile": "-x"}, r"not starting with '-'"),
        ({"ft_log_level": "DEBUG"}, r"--ft_log_level is not one of its options; did you mean 'ft-log_level'"),
        ({"term-timeout": "abc"}, r"NVRx 0\.7\.0's ft_launcher parser says: argument --term-timeout"),
        ({"max-restarts": 4}, r"set by FaultTolerancePlugin\.num_in_job_restarts"),
        ({"ft-log-level": "DEBUG"}, r"set by FaultTolerancePlugin\.log_level"),
        ({"ft-log_level": "DEBUG"}, r"set by FaultTolerancePlugin\.log_level"),
        ({"rdzv-conf": "is_host=1"}, r"set by FaultTolerancePlugin\.spare_nodes"),
        ({"ft-scheduler-exclusion-dir": "/shared/x"}, r"job arrays run with --no-requeue.*requeue guard"),
    ],
)
def test_bad_flags_are_refused_in_one_line(flags, match):
    with pytest.raises(ResiliencyConfigError, match=match) as err:
        FaultTolerancePlugin(launcher_args=flags)
    assert "\n" not in str(err.value)


def test_a_flag_also_given_in_nvrx_config_is_refused():
    with pytest.raises(ResiliencyConfigError, match=r"nvrx_config\['enable_nic_healthcheck'\] sets the same"):
        FaultTolerancePlugin(
            nvrx_config={"enable_nic_healthcheck": True}, launcher_args={"ft-enable-nic-healthcheck": "true"}
        )


def test_off_slurm_the_flags_are_refused_with_the_reason():
    with pytest.raises(ResiliencyConfigError, match=r"LocalExecutor from an argument list built from run\.Fault"):
        add_job(run.Script(path=TRAIN, entrypoint="python"), local(), [FaultTolerancePlugin(launcher_args=FLAGS)])


def test_with_spare_nodes_both_blocks_reach_ft_launcher(tmp_path):
    """The spare block and this one both stand in for srun: ft_launcher gets the flags and the active:all range."""
    executor = slurm(tmp_path)
    executor.nodes = 2
    plugin = FaultTolerancePlugin(launcher_args={"term-timeout": 600}, spare_nodes=1)
    job = add_job(run.Script(path=TRAIN, entrypoint="python"), executor, [plugin])
    setup = job.executor.setup_lines
    assert setup.index(slurm_script._SPARE_NODES) < setup.index(launcher_args._SHIM)
    out = tmp_path / "argv"
    program = "\n".join(
        [
            "NRP_SPARE_NODES=1 SLURM_JOB_NUM_NODES=3 SLURM_JOB_ID=7 TORCHX_MAX_RETRIES=0",
            slurm_script._CHAIN_HELPERS,
            "squeue() { return 1; }",
            f'srun() {{ printf "%s\\n" "$@" > {out}; }}',
            slurm_script._REQUEUE_GUARD,
            slurm_script._SPARE_NODES,
            f"{launcher_args.ARRAY_NAME}=(--term-timeout 600)",
            launcher_args._SHIM,
            "srun --kill-on-bad-exit=1 ft_launcher --rdzv-backend c10d --nnodes 3 --nproc-per-node 1 train.py",
        ]
    )
    subprocess.run(["bash", "-c", program], check=True, capture_output=True, text=True, timeout=60)
    argv = out.read_text().split("\n")[:-1]
    words = argv[argv.index("ft_launcher") + 1 :]
    assert words == ["--term-timeout", "600", "--rdzv-backend", "c10d", "--nnodes", "2:3", "--nproc-per-node", "1",
                     "train.py"]  # fmt: skip


def test_explain_shows_the_flags_in_the_executor_change_and_the_sbatch_script(tmp_path):
    from nemo_resiliency_plugins.tools.explain import explain, make_executor, make_task

    with contextlib.chdir(tmp_path), open(os.devnull) as devnull:
        saved, sys.stdin = sys.stdin, devnull
        try:
            result = explain(
                [FaultTolerancePlugin(launcher_args={"term-timeout": 600})],
                make_task(),
                make_executor("slurm"),
                executor_kind="slurm",
            )
        finally:
            sys.stdin = saved
    line = f"{launcher_args.ARRAY_NAME}=(--term-timeout 600)"
    assert line in result.command
    assert any(line in change for effect in result.effects for change in effect.executor_changes)
