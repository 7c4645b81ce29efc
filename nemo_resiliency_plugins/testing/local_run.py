"""Run a task with plugins through NeMo-Run's LocalExecutor and collect what happened.

Used by the main example job, the smoke tests and rehearsals: it goes through the real ``run.Experiment``
(plugins applied in ``Experiment.add``), waits for the job, and returns the final torchx state - which
``run.run`` / ``exp.run`` do not raise on - with the job's combined log.
"""

from __future__ import annotations

import glob
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nemo_run as run


@dataclass
class LocalRunResult:
    state: str
    wall_s: float
    job_dir: str
    log: str
    lines: list[str] = field(default_factory=list)

    @property
    def succeeded(self) -> bool:
        return self.state == "SUCCEEDED"

    def grep(self, needle: str) -> list[str]:
        return [line for line in self.lines if needle in line]


def _use_this_environment() -> None:
    """Local jobs resolve ``python`` and ``ft_launcher`` from PATH: make that this interpreter's environment
    (what activating the venv would do), so the job runs with the packages the launching script sees."""
    import sys

    bin_dir = os.path.dirname(sys.executable)
    path = os.environ.get("PATH", "")
    if path.split(os.pathsep)[0] != bin_dir:
        os.environ["PATH"] = bin_dir + os.pathsep + path


def workload_task(overrides: list[str], env: dict[str, str] | None = None) -> run.Script:
    """The reference workload as a ``run.Script`` task (Hydra overrides as Megatron Bridge scripts take)."""
    return run.Script(
        path="nemo_resiliency_plugins.testing.workload",
        m=True,
        entrypoint="python",
        args=list(overrides),
        env=dict(env or {}),
    )


def run_local(
    task: Any,
    plugins: list[Any],
    *,
    name: str,
    ntasks: int = 2,
    env: dict[str, str] | None = None,
    base_dir: str | None = None,
    launcher: Any = None,
) -> LocalRunResult:
    """Launch ``task`` with ``plugins`` on a LocalExecutor with ``ntasks`` ranks; block until it ends."""
    _use_this_environment()
    executor = run.LocalExecutor(ntasks_per_node=ntasks, env_vars=dict(env or {}), launcher=launcher)
    started = time.monotonic()
    with run.Experiment(name, base_dir=base_dir, log_level="WARN") as exp:
        exp.add(task, executor=executor, plugins=plugins, name=name)
        exp.run(sequential=True, detach=False)
    # NeMo-Run waits for the job when the Experiment context exits: the final state exists only after it.
    job = exp.jobs[0]
    state = getattr(job.state, "name", str(job.state))
    job_dir = job.executor.job_dir
    wall = time.monotonic() - started
    logs = sorted(glob.glob(os.path.join(job_dir, "**", "combined.log"), recursive=True))
    text = "\n".join(Path(p).read_text(errors="replace") for p in logs)
    return LocalRunResult(state=state, wall_s=wall, job_dir=job_dir, log=text, lines=text.splitlines())
