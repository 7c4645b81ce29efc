"""Issue 47, item 1 nearby: every command that reads an experiment directory (doctor, rehearse, plan --plugins,
plan --from, report) reads it as data only. Each crafted directory holds a serialized file whose loading by
NeMo-Run's own loader (``Experiment._from_config`` / ``fdl.build``) would run ``touch MARKER``; each command gives
its answer or one line naming the directory, and the marker is never there."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import fiddle as fdl
import nemo_run as run
import pytest
from nemo_run.core.serialization.zlib_json import ZlibJSONSerializer

from nemo_resiliency_plugins import FaultTolerancePlugin
from nemo_resiliency_plugins.tools.cli import main, plugins_for
from nemo_resiliency_plugins.tools.doctor import jobs_from_experiment_dir

SERIALIZER = ZlibJSONSerializer()


def marker_call(marker: Path) -> fdl.Config:
    """What NeMo-Run's loader would build from a crafted file: a call that leaves ``marker`` behind."""
    return fdl.Config(subprocess.call, ["touch", str(marker)])


def saved_experiment(tmp_path: Path) -> Path:
    """A real experiment NeMo-Run saved (dry run): a run.Script task on a LocalExecutor with FaultTolerancePlugin."""
    task = run.Script(path="train.py", entrypoint="python", args=["checkpoint.save=/ckpt"])
    with run.Experiment("crafted", base_dir=str(tmp_path / "home"), log_level="ERROR") as exp:
        exp.add(task, executor=run.LocalExecutor(ntasks_per_node=2), plugins=[FaultTolerancePlugin()], name="train")
        exp.dryrun(log=False, delete_exp_dir=False)
        return Path(exp._exp_dir)


def craft_config(exp: Path, marker: Path) -> None:
    """The experiment's own ``_CONFIG`` with one argument replaced by the call (built first by fiddle)."""
    config = SERIALIZER.deserialize((exp / "_CONFIG").read_text())
    config.log_level = marker_call(marker)
    (exp / "_CONFIG").write_text(SERIALIZER.serialize(config))


def craft_job(exp: Path, marker: Path, part: str) -> None:
    """The experiment's own job in ``_TASKS`` with its ``part`` (task, executor or plugins) replaced by the call."""
    entries = json.loads((exp / "_TASKS").read_text())
    job = SERIALIZER.deserialize(entries[0][0])
    if part == "task":
        entries[0][1] = SERIALIZER.serialize(marker_call(marker))  # NeMo-Run saves [job, task] per job
    elif part == "executor":
        job.executor = marker_call(marker)
    elif part == "executor-field":
        job.executor.launcher = marker_call(marker)
    else:
        job.plugins = [marker_call(marker)]
    entries[0][0] = SERIALIZER.serialize(job)
    (exp / "_TASKS").write_text(json.dumps(entries))


def cli(capsys, *args: str) -> tuple[int, str]:
    capsys.readouterr()  # what saving the experiment printed is not the command's output
    with pytest.raises(SystemExit) as done:
        main(list(args))
    captured = capsys.readouterr()
    return done.value.code, captured.out + captured.err


def test_the_saved_job_is_read_back_as_data(tmp_path):
    exp = saved_experiment(tmp_path)
    ((task, executor, plugins),) = jobs_from_experiment_dir(str(exp))
    assert isinstance(task, run.Script) and task.args[:2] == ["checkpoint.save=/ckpt", "checkpoint.load=/ckpt"]
    assert isinstance(executor, run.LocalExecutor) and executor.ntasks_per_node == 2
    assert isinstance(executor.launcher, run.FaultTolerance)
    assert [type(p) for p in plugins] == [FaultTolerancePlugin]


def test_a_crafted_config_never_runs_and_every_command_still_answers(tmp_path, capsys):
    exp = saved_experiment(tmp_path)
    marker = tmp_path / "ran"
    craft_config(exp, marker)
    code, out = cli(capsys, "doctor", str(exp), "--json")
    assert code in (0, 1) and '"launcher is ft_launcher"' in out, out
    assert [type(p) for p in plugins_for(str(exp))()] == [FaultTolerancePlugin]
    code, out = cli(capsys, "plan", "--gpus", "8", "--step-time", "1", "--save-time", "10", "--plugins", str(exp))
    assert code == 0 and "Traceback" not in out, out
    assert not marker.exists()


@pytest.mark.parametrize("part", ["task", "executor", "executor-field", "plugins"])
@pytest.mark.parametrize("command", ["doctor", "rehearse", "plan"])
def test_a_crafted_job_never_runs_and_is_one_line(tmp_path, capsys, part, command):
    exp = saved_experiment(tmp_path)
    marker = tmp_path / "ran"
    craft_job(exp, marker, part)
    args = {
        "doctor": ["doctor", str(exp)],
        "rehearse": ["rehearse", str(exp)],
        "plan": ["plan", "--gpus", "8", "--step-time", "1", "--save-time", "10", "--plugins", str(exp)],
    }[command]
    if command != "doctor" and part != "plugins":
        # rehearse and plan read only the plugins, which are still this package's own (no rehearsal launched here)
        assert [type(p) for p in plugins_for(str(exp))()] == [FaultTolerancePlugin]
        assert not marker.exists()
        return
    code, out = cli(capsys, *args)
    assert not marker.exists()
    assert code == 2, out
    assert "Traceback" not in out and str(exp) in out and "read as data only" in out, out
    assert len([line for line in out.splitlines() if line.strip()]) == 1, out


@pytest.mark.parametrize("command", ["report", "plan-from"])
def test_the_report_and_plan_from_never_run_a_crafted_job(tmp_path, capsys, command):
    exp = saved_experiment(tmp_path)
    marker = tmp_path / "ran"
    craft_config(exp, marker)
    craft_job(exp, marker, "plugins")
    args = ["report", str(exp)] if command == "report" else ["plan", "--gpus", "8", "--from", str(exp)]
    code, out = cli(capsys, *args)
    assert not marker.exists()
    assert "Traceback" not in out and code in (0, 1, 2), out


def test_doctor_never_waits_on_a_fifo_named_like_a_file_it_reads(tmp_path):
    """A status file, ft_state.json, or the NVRx config a saved job names, made a FIFO: read as unreadable at once
    (a plain open would wait for a writer for ever)."""
    import os

    from nemo_resiliency_plugins.tools.doctor import _ft_cfg, _ft_state_checks
    from nemo_resiliency_plugins.tools.job_outcome import container_exit_codes

    for name in ("status_c1.out", "ft_state.json", "ft.yaml"):
        os.mkfifo(tmp_path / name)
    assert container_exit_codes(tmp_path) == {"c1": "unreadable: not a regular file of at most 4 KiB"}
    (check,) = _ft_state_checks(tmp_path / "ft_state.json", None)
    assert check.verdict == "FAIL" and "not a regular file" in check.detail
    executor = run.LocalExecutor(env_vars={"PET_FT_CFG_PATH": str(tmp_path / "ft.yaml")})
    path, cfg, problem = _ft_cfg(executor)
    assert cfg is None and "not a regular file" in problem


@pytest.mark.parametrize("kind", ["slurm", "docker"])
def test_a_saved_slurm_or_docker_job_is_read_back_as_data(tmp_path, capsys, monkeypatch, kind):
    """The executors' own nested classes (Slurm's job details, the package's FT launcher) are on the allowlist."""
    import os
    import sys

    from tests.helpers import slurm

    monkeypatch.setattr(sys, "stdin", open(os.devnull))  # noqa: SIM115 - NeMo-Run's Slurm packaging reads stdin
    executor = (
        slurm(tmp_path)
        if kind == "slurm"
        else run.DockerExecutor(container_image="python:3.12", num_gpus=0, ntasks_per_node=2, packager=run.Packager())
    )
    task = run.Script(path="train.py", entrypoint="python", args=["checkpoint.save=/ckpt"])
    with run.Experiment(f"saved{kind}", base_dir=str(tmp_path / "home"), log_level="ERROR") as exp:
        exp.add(task, executor=executor, plugins=[FaultTolerancePlugin()], name="train")
        exp.dryrun(log=False, delete_exp_dir=False)
        exp_dir = exp._exp_dir
    ((task, executor, plugins),) = jobs_from_experiment_dir(exp_dir)
    assert type(executor) is (run.SlurmExecutor if kind == "slurm" else run.DockerExecutor)
    assert isinstance(executor.launcher, run.FaultTolerance) and [type(p) for p in plugins] == [FaultTolerancePlugin]
    code, out = cli(capsys, "doctor", exp_dir, "--json")
    assert code in (0, 1) and '"launcher is ft_launcher"' in out, out
