"""The launching-host tier (issue 29): the wheel in a fresh venv with only its declared dependencies -- no torch,
NVRx or Megatron Bridge, as on a laptop or a login node that submits to a cluster -- on Python 3.10 and 3.12
(issue 29's acceptance; NRP_INSTALL_MINORS="3.10 3.11 3.12 3.13" chooses others).

In each venv: the user's example (three plugins on a SlurmExecutor with a LocalTunnel, dry run) renders an sbatch
script bash can parse, and ``list``/``show``/``explain``/``doctor``/``plan`` run on every recipe with no traceback;
a missing optional piece (matplotlib, for ``plan --plot``) is named before any work, with exit code 3.

The venvs are built once per session (module-scoped fixture; INSTALLERS says which installer builds which); the
interpreters come from pyenv (``pyenv versions``; NRP_INSTALL_PYTHONS="3.10.13 3.12.1" chooses others).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.install

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
MINORS = tuple(os.environ.get("NRP_INSTALL_MINORS", "3.10 3.12").split())
#: Who installs the wheel into each venv. pip, the installer users run (its resolver included), on 3.12, the Python
#: of Megatron Bridge's containers; uv (.ci/uv-install: the same indexes and constraints as pip here, the same
#: declared dependencies) on the others, which prove the dependency ranges and the code on that Python. pip takes
#: about 60 s of CPU for this wheel (resolving, then compiling ~130 packages), uv about 10.
INSTALLERS = dict(item.split("=", 1) for item in os.environ.get("NRP_INSTALLERS", "3.12=pip").split())
#: What a launching host must NOT need; the venv holds none of them (checked, so the tier proves it).
TRAINING_STACK = ("torch", "nvidia_resiliency_ext", "megatron")


def _interpreter(minor: str) -> str:
    """The newest pyenv CPython ``minor``.x, or ``python<minor>`` on PATH; the test fails when there is none."""
    wanted = os.environ.get("NRP_INSTALL_PYTHONS", "").split()
    pyenv = shutil.which("pyenv")
    if pyenv:
        bare = subprocess.run([pyenv, "versions", "--bare"], capture_output=True, text=True).stdout.split()
        found = [v for v in bare if re.fullmatch(rf"{re.escape(minor)}\.\d+", v) and (not wanted or v in wanted)]
        if found:
            version = max(found, key=lambda v: int(v.rsplit(".", 1)[1]))
            prefix = subprocess.run([pyenv, "prefix", version], capture_output=True, text=True).stdout.strip()
            return f"{prefix}/bin/python{minor}"
    path = shutil.which(f"python{minor}")
    assert path, f"no Python {minor} here (pyenv install {minor}, or put python{minor} on PATH)"
    return path


@pytest.fixture(scope="module")
def wheel() -> Path:
    """This checkout's wheel (.ci/build-dist), or the one NRP_WHEEL names (e.g. a release candidate)."""
    if os.environ.get("NRP_WHEEL"):
        return Path(os.environ["NRP_WHEEL"])
    out = subprocess.run(
        ["bash", str(REPO / ".ci" / "build-dist")],
        capture_output=True,
        text=True,
        env=os.environ | {"NRP_BUILD_PYTHON": sys.executable},
        timeout=900,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return Path(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module", params=MINORS, ids=[f"py{m}" for m in MINORS])
def host(request, wheel, tmp_path_factory) -> dict:
    """A fresh venv of the wheel and its declared dependencies; {python, bin, minor, seconds, work}."""
    minor = request.param
    root = tmp_path_factory.mktemp(f"host-py{minor}")
    venv = root / "venv"
    started = time.monotonic()
    made = subprocess.run([_interpreter(minor), "-m", "venv", str(venv)], capture_output=True, text=True)
    assert made.returncode == 0, made.stderr
    python = str(venv / "bin" / "python")
    installer = INSTALLERS.get(minor, "uv")
    if installer == "pip":
        pip = [python, "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        # The pip a venv starts with is the interpreter's bundled one (23.0 on 3.10.13), whose resolver backtracks
        # for minutes over NeMo-Run's dependencies: a current pip first, as a user's would be.
        upgraded = subprocess.run([*pip, "--upgrade", "pip"], capture_output=True, text=True, timeout=600)
        assert upgraded.returncode == 0, upgraded.stderr[-3000:]
    else:
        pip = ["bash", str(REPO / ".ci" / "uv-install"), python]
    done = subprocess.run([*pip, str(wheel)], capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, f"{installer} install of {wheel.name} on Python {minor} failed:\n{done.stderr[-4000:]}"
    seconds = time.monotonic() - started
    version = subprocess.run(
        [python, "-c", "import sys; print(sys.version.split()[0])"], capture_output=True, text=True
    )
    print(
        f"\nlaunching-host venv: Python {version.stdout.strip()}, {wheel.name} + declared dependencies by {installer},"
        f" {seconds:.0f} s"
    )
    return {"python": python, "bin": str(venv / "bin"), "minor": minor, "work": root}


def _env(host: dict, home: Path) -> dict[str, str]:
    # Only the venv and the system: nothing of the developers' .venv, no PYTHONPATH into the checkout.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "NRP_", "PYENV"))}
    return env | {"PATH": f"{host['bin']}:/usr/local/bin:/usr/bin:/bin", "NEMORUN_HOME": str(home), "COLUMNS": "200"}


def test_the_venv_has_the_wheel_and_no_training_stack(host):
    code = (
        "import importlib.util, json, nemo_resiliency_plugins as p;"
        f"print(json.dumps([p.__file__, [m for m in {TRAINING_STACK!r} if importlib.util.find_spec(m)],"
        "importlib.util.find_spec('matplotlib') is not None]))"
    )
    out = subprocess.run([host["python"], "-c", code], capture_output=True, text=True, cwd=host["work"])
    assert out.returncode == 0, out.stderr
    location, present, matplotlib = json.loads(out.stdout)
    assert location.startswith(str(host["work"])) and "site-packages" in Path(location).parts
    assert present == [], f"the launching-host venv pulled in {present} through a declared dependency"
    assert matplotlib is False  # so the `plot` extra's message below is really exercised


def test_the_users_example_renders_an_sbatch_script_bash_parses(host, tmp_path):
    script = tmp_path / "train.sbatch"
    out = subprocess.run(
        [host["python"], str(HERE / "user_example.py"), str(script)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=_env(host, tmp_path / "home"),
        stdin=subprocess.DEVNULL,
        timeout=600,
    )
    assert out.returncode == 0 and "Traceback" not in out.stdout + out.stderr, out.stdout[-3000:] + out.stderr[-3000:]
    text = script.read_text()
    parsed = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert parsed.returncode == 0, parsed.stderr
    # The three plugins acted: NVRx's launcher, the requeue guard, Slurm's signal before the time limit, the
    # straggler overrides.
    assert "ft_launcher" in text and "nemo-resiliency-plugins: requeue guard" in text
    assert "#SBATCH --signal" in text
    assert "++nvrx_straggler.enabled=true" in text


def test_the_cli_runs_every_command_on_every_recipe_without_a_traceback(host, tmp_path):
    env = _env(host, tmp_path / "home")
    for argv in (["nemo-resiliency", "--version"], ["nemo-resiliency", "list"]):  # the installed script itself
        out = subprocess.run([f"{host['bin']}/{argv[0]}", *argv[1:]], capture_output=True, text=True, env=env)
        assert out.returncode == 0 and "Traceback" not in out.stdout + out.stderr, out
    out = subprocess.run(
        [host["python"], str(HERE / "cli_on_every_recipe.py")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,
        timeout=900,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    results = json.loads(out.stdout.strip().splitlines()[-1])
    commands = {" ".join(r["argv"][:2]) for r in results}
    assert {
        "list --json",
        "show slurm-pretraining",
        "explain slurm-pretraining",
        "doctor slurm-pretraining",
    } <= commands
    plot, written = results[-2], results[-1]
    for r in results[:-2]:
        where = (
            f"nemo-resiliency {' '.join(r['argv'])} (Python {host['minor']}): exit {r['code']}\n{r['stderr'][-2000:]}"
        )
        assert "Traceback" not in r["stdout"] + r["stderr"], where
        # 0, or 1 where a plugin refused the job on that executor / doctor found a FAIL: never 2 (bad argument) or
        # 3 (a module missing) on a launching host.
        allowed = (0, 1) if r["argv"][0] in ("explain", "doctor") else (0,)
        if r["code"] == 3 and r["argv"][0] == "explain" and r["argv"][3] in ("skypilot", "skypilot-jobs", "kubeflow"):
            # NeMo-Run's own extras, not this package's dependencies: the one line names them.
            assert "pip install 'nemo_run[" in r["stderr"] and r["stderr"].count("\n") == 1, where
            continue
        assert r["code"] in allowed, where
        if r["argv"][0] in ("list", "show", "explain", "doctor", "plan") and "--json" in r["argv"]:
            json.loads(r["stdout"])  # the JSON output is JSON
    assert plot["code"] == 3 and "nemo-resiliency-plugins[plot]" in plot["stderr"], plot
    assert written["code"] == 0, "plan --plot simulated and wrote something although matplotlib is missing"
    # The installed wheel's catalog is the checkout's recipes/ folder (issue 53): one recipe per recipe file.
    listed = next(r for r in results if r["argv"] == ["list", "--json"])
    assert {r["name"] for r in json.loads(listed["stdout"])} == _checkout_recipe_names()


def _checkout_recipe_names() -> set[str]:
    """The recipes of the checkout's top-level recipes/, read from its files (each assigns RECIPE)."""
    return {
        path.stem.replace("_", "-")
        for path in (REPO / "recipes").glob("*.py")
        if not path.name.startswith("_") and re.search(r"^RECIPE = ", path.read_text(), re.MULTILINE)
    }
