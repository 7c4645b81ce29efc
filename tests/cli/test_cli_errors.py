"""Every nemo-resiliency command on every kind of bad argument: one line on stderr naming what was wrong and
a non-zero exit, never a traceback, never silence. Driven through the real entry point (``cli.main``)
in-process, so the matrix stays fast; nothing is launched (a bad argument stops a command before any run).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import nemo_run as run
import pytest

from nemo_resiliency_plugins import FaultTolerancePlugin
from nemo_resiliency_plugins.tools import cli
from nemo_resiliency_plugins.tools.cli import main
from tests.helpers import HANG_GUARD_S


def call(capsys, *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as done:
        main(list(args))
    out = capsys.readouterr()
    return done.value.code, out.out, out.err


BAD = [
    # (argv, what the one line must mention)
    (["list", "--bogus"], "--bogus"),
    (["show"], "name"),
    (["show", "nope"], "unknown recipe 'nope'"),
    (["explain", "nope"], "unknown recipe 'nope'"),
    (["explain", "local-smoke", "--executor", "bogus"], "--executor 'bogus'"),
    (["explain", "local-smoke", "--time", "bad time"], "--time 'bad time'"),
    (["explain", "local-smoke", "--time", "10\n"], "--time"),
    (["explain", "local-smoke", "--save-time", "-5"], "--save-time"),
    (["explain", "local-smoke", "--step-time", "nan"], "--step-time"),
    (["explain", "local-smoke", "--step-time", "inf"], "--step-time"),
    (["explain", "local-smoke", "--step-time", "abc"], "--step-time"),
    (["explain", "local-smoke", "--nodes", "0"], "--nodes"),
    (["explain", "local-smoke", "--nodes", "x"], "--nodes"),
    (["explain", "local-smoke", "--ntasks-per-node", "-1"], "--ntasks-per-node"),
    (["doctor", "local-smok"], "unknown recipe 'local-smok'"),
    (["doctor", "/nonexistent/experiment"], "/nonexistent/experiment"),
    (["doctor", "/"], "'/'"),
    (["doctor", "local-smoke", "--executor", "bogus"], "--executor 'bogus'"),
    (["doctor", "local-smoke", "--executor", "kuberay"], "--executor 'kuberay'"),
    (["doctor", "local-smoke", "--save-time", "-1"], "--save-time"),
    (["doctor", "local-smoke", "--step-time", "nan"], "--step-time"),
    (["rehearse", "local-smoke", "--set", "X.y=[unclosed"], "X.y=[unclosed"),
    (["rehearse", "local-smoke", "--set", "noequals"], "noequals"),
    (["rehearse", "local-smoke", "--set", "FaultTolerancePlugin.nope=1"], "nope"),
    (["rehearse", "local-smoke", "--set", "FaultTolerancePlugin.num_in_job_restarts=-1"], "num_in_job_restarts"),
    (["rehearse", "local-smoke", "--set", "NoSuchPlugin.x=1"], "NoSuchPlugin"),
    (["rehearse", "nope"], "unknown recipe 'nope'"),
    (["rehearse", "/nonexistent/experiment"], "/nonexistent/experiment"),
    (["rehearse", "local-smoke", "--ranks", "1"], "ranks"),
    (["rehearse", "local-smoke", "--ranks", "0"], "--ranks"),
    (["rehearse", "local-smoke", "--faults", "bogus"], "faults"),
    (["rehearse", "local-smoke", "--step-time", "-2"], "--step-time"),
    (["report"], "experiment"),
    (["report", "/nonexistent/experiment"], "/nonexistent/experiment"),
    (["report", "/"], "'/'"),
    (["report", "/", "--bogus"], "--bogus"),
    (["report", "/", "--timeline", "t.svg"], "--timeline 't.svg'"),
    (["report", "/", "--timeline", "/nonexistent/dir/t.png"], "--timeline"),
    (["rehearse", "local-smoke", "--timeline", "t.svg"], "--timeline 't.svg'"),
]


@pytest.mark.parametrize(("argv", "mentions"), BAD, ids=[" ".join(a) for a, _ in BAD])
def test_a_bad_argument_is_one_line_and_a_non_zero_exit(capsys, argv, mentions):
    code, out, err = call(capsys, *argv)
    assert code not in (0, None), (out, err)
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert re.match(r"nemo-resiliency( \w+)?: error: ", lines[0]), lines[0]
    assert mentions in lines[0], lines[0]
    assert "Traceback" not in out + err


def test_a_directory_that_is_not_an_experiment(capsys, tmp_path):
    for command in ("doctor", "rehearse"):
        code, _, err = call(capsys, command, str(tmp_path))
        assert code == 2 and "EXPERIMENT_DIR" in err and str(tmp_path) in err, err
        assert len(err.strip().splitlines()) == 1


def test_doctor_reports_a_missing_ft_launcher_as_a_fail_line(capsys, monkeypatch):
    """The README says a launching host without ft_launcher is fine for Slurm; for a local job it is a FAIL."""
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    code, out, err = call(capsys, "doctor", "local-smoke", "--executor", "local", "--json")
    assert code == 1, (out, err)
    assert "Traceback" not in out + err
    assert '"plugins set up the job"' in out and "ft_launcher" in out and '"FAIL"' in out
    code, out, err = call(capsys, "doctor", "local-smoke", "--executor", "slurm", "--json")
    assert "Traceback" not in out + err and '"checks"' in out


def test_doctor_reads_an_experiment_whose_task_args_have_a_null_timeout(capsys, tmp_path):
    task = run.Script(
        path="train.py", entrypoint="python", args=["checkpoint.save=/ckpt", "dist.distributed_timeout_minutes=null"]
    )
    with run.Experiment("nullexp", base_dir=str(tmp_path), log_level="ERROR") as exp:
        exp.add(task, executor=run.LocalExecutor(ntasks_per_node=2), plugins=[FaultTolerancePlugin()], name="train")
        exp.dryrun(log=False, delete_exp_dir=False)
        exp_dir = exp._exp_dir
    code, out, err = call(capsys, "doctor", exp_dir, "--json")
    assert "Traceback" not in out + err and code in (0, 1), err
    assert '"launcher is ft_launcher"' in out


def test_explain_into_a_file_writes_a_valid_sbatch_script(capsys, tmp_path, monkeypatch):
    # NeMo-Run's Slurm packaging runs a shell command that reads stdin; pytest's captured stdin refuses reads.
    monkeypatch.setattr(sys, "stdin", open(os.devnull))  # noqa: SIM115 - closed with the test process
    # What a redirected stdout gets: rich's default 80 columns (the test session sets COLUMNS=200).
    monkeypatch.setattr(cli.console, "width", 80)
    code, out, err = call(capsys, "explain", "slurm-pretraining", "--executor", "slurm")
    assert code == 0, err
    script = out[out.index("#!/bin/bash") :]
    assert max(len(line) for line in script.splitlines()) > 80, "a long line must survive unwrapped"
    path = tmp_path / "sbatch.sh"
    path.write_text(script)
    parsed = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    assert parsed.returncode == 0, parsed.stderr
    assert "#SBATCH --signal=B:TERM@60" in script.splitlines()


def test_the_installed_entry_point_reports_a_typo_on_stderr():
    """As a user runs it (a subprocess): the typo that used to exit 2 with no output at all."""
    out = subprocess.run(
        [sys.executable, "-m", "nemo_resiliency_plugins.tools.cli", "doctor", "local-smok"],
        capture_output=True,
        cwd="/",  # not the checkout: `python -m` puts the working directory first, and the installed package is tested
        text=True,
        timeout=HANG_GUARD_S,
    )
    assert out.returncode == 2
    assert out.stderr.strip().startswith("nemo-resiliency doctor: error: unknown recipe 'local-smok'"), out.stderr


def test_help_still_works_and_no_arguments_show_it(capsys):
    code, out, _ = call(capsys, "doctor", "--help")
    assert code == 0 and "Usage: nemo-resiliency doctor" in out
    code, out, _ = call(capsys)
    assert code == 2 and "Usage: nemo-resiliency" in out
