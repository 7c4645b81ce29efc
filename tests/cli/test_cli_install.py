"""What the command says about the installation itself (issue 29): ``--version``, ``python -m
nemo_resiliency_plugins``, and a module missing here -- exit code 3 with one line saying what to install, never
2 (a bad argument) and never a traceback. The launching-host tier (tests/install/) runs the same without
matplotlib and the training stack."""

from __future__ import annotations

import subprocess
import sys

import pytest

import nemo_resiliency_plugins
from nemo_resiliency_plugins.tools.cli import main
from nemo_resiliency_plugins.tools.requirements import EXIT_MISSING_MODULE


def call(capsys, *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as done:
        main(list(args))
    out = capsys.readouterr()
    return done.value.code, out.out, out.err


def test_version(capsys):
    code, out, _ = call(capsys, "--version")
    assert code == 0 and out.strip() == f"nemo-resiliency {nemo_resiliency_plugins.__version__}"


def test_python_dash_m_runs_the_command():
    out = subprocess.run(
        [sys.executable, "-m", "nemo_resiliency_plugins", "list", "--json"], capture_output=True, text=True, cwd="/"
    )
    assert out.returncode == 0 and '"slurm-pretraining"' in out.stdout, out.stderr


def test_a_module_of_the_package_missing_is_exit_3_with_one_line_saying_to_reinstall(capsys, monkeypatch):
    # As a wheel missing a subpackage looked (issue 29): the import of a module of ours fails inside a command.
    monkeypatch.setitem(sys.modules, "nemo_resiliency_plugins.tools.timeout_chain", None)
    code, _, err = call(capsys, "explain", "local-smoke")
    assert code == EXIT_MISSING_MODULE == 3
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "installation of nemo-resiliency-plugins is incomplete" in err and "pip install --force-reinstall" in err


def test_a_missing_optional_piece_is_named_before_any_work(capsys, monkeypatch, tmp_path):
    # matplotlib made unimportable: the check runs before the simulation, and no file is written.
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    png = tmp_path / "g.png"
    code, out, err = call(capsys, "plan", "--gpus", "8", "--step-time", "1", "--save-time", "10", "--plot", str(png))
    assert code == 3 and "pip install 'nemo-resiliency-plugins[plot]'" in err and not png.exists() and out == ""
