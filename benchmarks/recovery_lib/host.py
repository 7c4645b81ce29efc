"""Case 5, the host side: the cost of importing the plugins and of ``Experiment.add`` with a plugin, in fresh
interpreters.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

_IMPORT_CODE = """
import time
t0 = time.perf_counter()
import nemo_run
t1 = time.perf_counter()
from nemo_resiliency_plugins import *  # every plugin module (the package resolves its names lazily)
t2 = time.perf_counter()
print("IMPORT", t1 - t0, t2 - t1)
"""

_SETUP_CODE = """
import sys, time, tempfile
import nemo_run as run
from nemo_resiliency_plugins import FaultTolerancePlugin

n, reps, base = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]

def task():
    return run.Script(path="nemo_resiliency_plugins.testing.workload", m=True, entrypoint="python",
                      args=["checkpoint.save=/tmp/nrp-bench-ckpt"])

def add_all(with_plugin):
    with run.Experiment("setup-bench", base_dir=base, log_level="ERROR") as exp:
        t = time.perf_counter()
        for i in range(n):
            plugins = [FaultTolerancePlugin()] if with_plugin else None
            exp.add(task(), executor=run.LocalExecutor(ntasks_per_node=2), name=f"t{i}", plugins=plugins)
        return time.perf_counter() - t

def setup_only():
    pairs = [(task(), run.LocalExecutor(ntasks_per_node=2)) for _ in range(n)]
    plugin = FaultTolerancePlugin()
    t = time.perf_counter()
    for tk, ex in pairs:
        plugin.setup(tk, ex)
    return time.perf_counter() - t

add_all(True)  # warm-up: first-use imports and caches
for _ in range(reps):
    print("SETUP", add_all(False), add_all(True), setup_only(), flush=True)
"""


def child_env(home: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["NEMORUN_HOME"] = str(home)
    bin_dir = str(Path(sys.executable).parent)
    env["PATH"] = bin_dir + os.pathsep + env.get("PATH", "")
    return env


def measure_imports(work: Path, reps: int) -> dict[str, list[float]]:
    env = child_env(work / "import-home")
    base, extra = [], []
    for _ in range(reps):
        out = subprocess.run(
            [sys.executable, "-c", _IMPORT_CODE], env=env, capture_output=True, text=True, cwd=work, check=True
        ).stdout
        m = re.search(r"IMPORT ([0-9.e-]+) ([0-9.e-]+)", out)
        base.append(float(m.group(1)))
        extra.append(float(m.group(2)))
    return {"nemo_run": base, "plugins": extra}


def measure_setup(work: Path, n: int, reps: int) -> dict[str, list[float]]:
    home = work / "setup-home"
    home.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        [sys.executable, "-c", _SETUP_CODE, str(n), str(reps), str(home)],
        env=child_env(home),
        capture_output=True,
        text=True,
        cwd=work,
    )
    rows = [line.split()[1:] for line in proc.stdout.splitlines() if line.startswith("SETUP ")]
    if proc.returncode != 0 or not rows:
        raise RuntimeError(f"setup benchmark failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return {
        "without": [float(r[0]) for r in rows],
        "with": [float(r[1]) for r in rows],
        "setup_only": [float(r[2]) for r in rows],
    }
