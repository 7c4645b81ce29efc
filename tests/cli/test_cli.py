"""The nemo-resiliency CLI driven as a user would: its entry point with real recipes and NeMo-Run's real dry
run. The commands run in this process (``cli.main``: the same argument parsing, output and exit codes as the
installed command, without a fresh interpreter importing NeMo-Run for each case); one test here and one in
tests/cli/test_cli_errors.py run the command as a subprocess.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import nemo_run as run
import pytest

from nemo_resiliency_plugins.recipes import RECIPES
from nemo_resiliency_plugins.tools.cli import main
from nemo_resiliency_plugins.tools.explain import EXTRA_EXECUTOR_KINDS
from tests.helpers import HANG_GUARD_S


def cli(*args: str) -> subprocess.CompletedProcess:
    """``nemo-resiliency ARGS`` through the entry point in this process: its exit code, stdout and stderr."""
    out, err = io.StringIO(), io.StringIO()
    # NeMo-Run's Slurm packaging runs a shell command that reads stdin, which pytest's captured stdin refuses:
    # an empty one, as a command run from a script without input has.
    with open(os.devnull) as devnull, contextlib.ExitStack() as stack:
        saved, sys.stdin = sys.stdin, devnull
        stack.callback(setattr, sys, "stdin", saved)
        stack.enter_context(contextlib.redirect_stdout(out))
        stack.enter_context(contextlib.redirect_stderr(err))
        try:
            main(list(args))
            code = 0
        except SystemExit as done:
            code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
    return subprocess.CompletedProcess(["nemo-resiliency", *args], code, out.getvalue(), err.getvalue())


def test_the_command_runs_as_a_subprocess_too():
    out = subprocess.run(
        [sys.executable, "-m", "nemo_resiliency_plugins.tools.cli", "list", "--json"],
        capture_output=True,
        cwd="/",  # not the checkout: `python -m` puts the working directory first, and the installed package is tested
        text=True,
        timeout=HANG_GUARD_S,
    )
    assert out.returncode == 0, out.stderr
    assert {r["name"] for r in json.loads(out.stdout)} == set(RECIPES)


def test_list_names_every_recipe():
    out = cli("list", "--json")
    assert out.returncode == 0, out.stderr
    names = {r["name"] for r in json.loads(out.stdout)}
    assert names == set(RECIPES)


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_show_lists_fields_and_changes(name):
    out = cli("show", name, "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert [p["plugin"] for p in data["plugins"]] == list(RECIPES[name].plugins)
    for entry in data["plugins"]:
        assert entry["fields"], entry
        assert entry["changes"]["error"] is None
        assert entry["changes"]["task_changes"] or entry["changes"]["executor_changes"], entry


#: Every (recipe, executor) a recipe claims, except executors NeMo-Run builds only with its extras: those are
#: explained and doctored in tests/contract/test_executors_ft_sky_kubeflow.py, which runs where they are installed.
CLAIMS = [(n, kind) for n, r in sorted(RECIPES.items()) for kind in r.executors if kind not in EXTRA_EXECUTOR_KINDS]


@pytest.mark.parametrize(("name", "executor"), CLAIMS)
def test_every_recipe_dry_runs_on_every_executor_it_claims(name, executor):
    out = cli("explain", name, "--executor", executor, "--json")
    assert out.returncode == 0, out.stdout + out.stderr
    data = json.loads(out.stdout)
    assert all(e["error"] is None for e in data["effects"])
    assert data["command"], "NeMo-Run's dry run produced no command"
    if "FaultTolerancePlugin" in RECIPES[name].plugins:
        assert "ft_launcher" in data["command"]
        assert "--ft-initial_rank_heartbeat_timeout" not in data["command"]
        assert "--ft-rank_heartbeat_timeout" not in data["command"]
        if executor == "slurm":
            assert "PET_FT_CFG_PATH" in data["command"] and "rank_section_timeouts:" in data["command"]
    if "PreemptionPlugin" in RECIPES[name].plugins and executor == "slurm":
        assert "TERM@60" in data["command"] and "#SBATCH --signal=" in data["command"]


@pytest.mark.parametrize(("name", "executor"), CLAIMS)
def test_doctor_passes_every_recipe_on_every_executor_it_claims(name, executor):
    out = cli("doctor", name, "--executor", executor, "--json")
    data = json.loads(out.stdout)
    assert out.returncode == 0, [c for c in data["checks"] if c["verdict"] == "FAIL"]
    if "FaultTolerancePlugin" in RECIPES[name].plugins:
        verdicts = {c["name"]: c["verdict"] for c in data["checks"]}
        assert verdicts["section timeouts declared"] == "pass"
        assert verdicts["max restarts reach ft_launcher"] == "pass"


def test_explain_shows_the_section_timeouts_and_the_chain_in_text_form():
    out = cli("explain", "local-smoke", "--executor", "local", "--step-time", "0.5", "--save-time", "90")
    assert out.returncode == 0, out.stderr
    assert "step: 10.0" in out.stdout and "ft_launcher" in out.stdout
    # 60 s checkpointing timeout vs a 90 s save: the chain says so.
    assert "FAIL" in out.stdout and "60 s vs 90 s" in out.stdout


def test_explain_reports_a_refusal_with_the_plugins_message():
    out = cli("explain", "inprocess-restart", "--executor", "slurm", "--json")
    assert out.returncode == 1
    data = json.loads(out.stdout)
    assert "SlurmExecutor" in data["effects"][0]["error"]


def test_doctor_passes_a_good_recipe():
    out = cli("doctor", "local-smoke", "--executor", "local", "--json")
    data = json.loads(out.stdout)
    assert out.returncode == 0, [c for c in data["checks"] if c["verdict"] == "FAIL"]
    names = {c["name"] for c in data["checks"]}
    assert {"launcher is ft_launcher", "section timeouts declared", "ft_launcher resolvable"} <= names


def plant(kind: str, tmp_path: Path) -> str:
    """A saved experiment (NeMo-Run dry run, kept on disk) with one planted mistake; its directory."""
    args = ["ft.enable_ft_package=true", "ft.calc_ft_timeouts=true", f"checkpoint.save={tmp_path}/ckpt"]
    if kind == "heartbeats-only":  # what Megatron Bridge's own FaultTolerancePlugin produces
        launcher = run.FaultTolerance(max_restarts=3, initial_rank_heartbeat_timeout=1800, rank_heartbeat_timeout=300)
    elif kind == "torchrun":
        launcher = "torchrun"
    elif kind == "bare-ft":  # launcher="ft": NeMo-Run emits --ignore-missing-fault-tol-cfg
        launcher = run.FaultTolerance()
    executor = run.LocalExecutor(ntasks_per_node=2, launcher=launcher)
    task = run.Script(path="train.py", entrypoint="python", args=args)
    with run.Experiment(kind, base_dir=str(tmp_path)) as exp:
        exp.add(task, executor=executor, name="train")
        exp.dryrun(log=False, delete_exp_dir=False)
        return exp._exp_dir


def failing(out: subprocess.CompletedProcess) -> set[str]:
    return {c["name"] for c in json.loads(out.stdout)["checks"] if c["verdict"] == "FAIL"}


def test_doctor_finds_heartbeats_without_sections(tmp_path):
    out = cli("doctor", plant("heartbeats-only", tmp_path), "--json")
    assert out.returncode == 1
    assert {"section timeouts declared", "no heartbeat timeouts on a section-based job"} <= failing(out)


def test_doctor_finds_torchrun_with_ft_enabled(tmp_path):
    out = cli("doctor", plant("torchrun", tmp_path), "--json")
    assert out.returncode == 1 and "launcher is ft_launcher" in failing(out)


def test_doctor_finds_the_flag_nvrx_rejects(tmp_path):
    out = cli("doctor", plant("bare-ft", tmp_path), "--json")
    assert out.returncode == 1
    assert "launcher flags accepted by NVRx >= 0.5" in failing(out)


def test_doctor_finds_absurdly_tight_computed_timeouts(tmp_path):
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    state = {
        "current_timeouts": {
            "section": {
                "section": {"setup": 0.16, "step": 0.6, "checkpointing": 0.08},
                "out_of_section": 4.9,
                "calculated_sections": ["step"],
                "is_out_of_section_calculated": True,
            }
        }
    }
    (ckpt / "ft_state.json").write_text(json.dumps(state))
    out = cli(
        "doctor", "local-smoke", "--executor", "local", "--checkpoint-dir", str(ckpt), "--save-time", "30", "--json"
    )
    assert out.returncode == 1
    assert {"computed checkpointing timeout", "computed setup timeout"} <= failing(out)
    (ckpt / "ft_state.json").write_text("{not json")
    out = cli("doctor", "local-smoke", "--executor", "local", "--checkpoint-dir", str(ckpt), "--json")
    assert out.returncode == 1 and "ft_state.json" in failing(out)
