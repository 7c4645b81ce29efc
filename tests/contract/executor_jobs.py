"""Render a real NeMo-Run job for an executor and read back what ft_launcher would be given, with NVRx's parser.

Nothing is launched and nothing remote is called: the job goes through ``Experiment.add`` (plugins) and
``Experiment.dryrun(delete_exp_dir=False)`` (NeMo-Run's packaging and the executor's scheduler dry run, which
writes ``<job_dir>/configs``). The rendered command is then run by bash exactly as the executor's launch script
would run it, with ``ft_launcher`` resolved to a recorder on PATH that writes down its argv and environment;
those are parsed by NVRx's own ``get_args_parser()`` and ``FaultToleranceConfig.from_args``, with the job's
config path mapped from where the node sees it to where the dry run wrote it.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nemo_run as run

RECORDER = textwrap.dedent(
    """\
    #!{python}
    import json, os, sys
    with open(os.environ["NRP_RECORD"], "a") as out:
        out.write(json.dumps({{"argv": sys.argv[1:], "env": dict(os.environ)}}) + "\\n")
    """
)

#: What the tests put in every task: a Megatron-Bridge-style script taking Hydra overrides.
TRAIN_PATH = "/workspace/train.py"


def script_task() -> run.Script:
    return run.Script(path=TRAIN_PATH, entrypoint="python", args=["checkpoint.save=/ckpt"], env={"TASK_VAR": "t"})


@dataclass
class RenderedJob:
    """A dry-run job: the executor after plugins, the scheduler's request and the job directory on disk."""

    executor: Any
    task: Any
    request: Any
    job_dir: str
    experiment_dir: str
    launches: list[dict[str, Any]] = field(default_factory=list)


def render(executor: Any, plugins: list[Any], task: Any = None, *, title: str = "exec-ft") -> RenderedJob:
    with run.Experiment(title, executor=executor, log_level="ERROR") as exp:
        exp.add(task if task is not None else script_task(), executor=executor, plugins=plugins, name="train")
        exp.dryrun(log=False, delete_exp_dir=False)
        job = exp.jobs[0]
        info = job._dryrun_info
        return RenderedJob(job.executor, job.task, info.request, job.executor.job_dir, job.executor.experiment_dir)


def render_sbatch(executor: Any, plugins: list[Any], task: Any, cwd: Path) -> str:
    """The sbatch script NeMo-Run's dry run writes for ``task`` on a SlurmExecutor with ``plugins``. Run from
    ``cwd``; NeMo-Run's packaging shell reads stdin, which pytest refuses, so stdin is /dev/null meanwhile."""
    with contextlib.chdir(cwd), open(os.devnull) as devnull:
        saved, sys.stdin = sys.stdin, devnull
        try:
            with run.Experiment("coupling", executor=executor, log_level="ERROR") as exp:
                exp.add(task, plugins=plugins, name="train")
                exp.dryrun(log=False)
                return str(exp.jobs[0]._dryrun_info.request.materialize())
        finally:
            sys.stdin = saved


def run_as_node(workdir: Path, command: str, env: dict[str, str]) -> dict[str, Any]:
    """Run ``command`` with bash in a clean environment (``env`` + PATH), ``ft_launcher`` being the recorder;
    returns what the recorder saw: ``{"argv": [...], "env": {...}}``."""
    bindir = workdir / "bin"
    bindir.mkdir(parents=True, exist_ok=True)
    recorder = bindir / "ft_launcher"
    recorder.write_text(RECORDER.format(python=sys.executable))
    recorder.chmod(0o755)
    record = workdir / f"record-{len(list(workdir.glob('record-*')))}.jsonl"
    full_env = {"PATH": f"{bindir}:/usr/bin:/bin", "HOME": str(workdir), "NRP_RECORD": str(record), **env}
    done = subprocess.run(["bash", "-c", command], env=full_env, cwd=workdir, capture_output=True, text=True)
    assert record.exists(), f"ft_launcher was never started:\n{done.stdout}\n{done.stderr}"
    lines = record.read_text().splitlines()
    assert len(lines) == 1, lines
    return json.loads(lines[0])


@dataclass
class LauncherView:
    """What NVRx makes of one ft_launcher start."""

    argv: list[str]
    args: Any  # argparse.Namespace from NVRx's own parser
    config: Any  # nvidia_resiliency_ext.fault_tolerance.config.FaultToleranceConfig
    env: dict[str, str]
    local_cfg_path: str | None


def parse_launch(seen: dict[str, Any], remote_root: str, local_root: str, monkeypatch: Any) -> LauncherView:
    """Parse the recorded argv with NVRx's parser under the recorded env (PET_* env fallbacks included),
    reading the config file where the dry run wrote it (``remote_root`` on the node = ``local_root`` here)."""
    from nvidia_resiliency_ext.fault_tolerance.config import FaultToleranceConfig
    from nvidia_resiliency_ext.fault_tolerance.launcher import get_args_parser

    env = seen["env"]
    for name in [n for n in os.environ if n.startswith("PET_")]:
        monkeypatch.delenv(name)
    for name, value in env.items():
        if name.startswith("PET_"):
            monkeypatch.setenv(name, value)
    local = None
    if "PET_FT_CFG_PATH" in env:
        remote = env["PET_FT_CFG_PATH"]
        assert remote.startswith(remote_root.rstrip("/") + "/"), (remote, remote_root)
        local = local_root.rstrip("/") + remote[len(remote_root.rstrip("/")) :]
        assert os.path.isfile(local), f"the job would read {remote}, which the dry run did not write ({local})"
        monkeypatch.setenv("PET_FT_CFG_PATH", local)
    args = get_args_parser().parse_args(seen["argv"])
    return LauncherView(seen["argv"], args, FaultToleranceConfig.from_args(args), env, local)


def env_and_launch_lines(script: str) -> str:
    """The ``export`` lines and the ``ft_launcher`` line of a rendered launch script (DGX Cloud's
    ``torchrun_job.sh``, Kubeflow's ``launch.sh``): what decides ft_launcher's argv and env, without the
    script's other steps (symlinks under ``/nemo_run``, finished-flag files) that belong on the node."""
    lines = [line for line in script.splitlines() if line.startswith("export ") or line.startswith("ft_launcher ")]
    assert lines and lines[-1].startswith("ft_launcher "), script
    return "\n".join(lines)


def shell_join(cmd: list[str]) -> str:
    """How the launch scripts of Docker, Lepton and Kubeflow put a command list into bash: joined by spaces
    (the args are already quoted by NeMo-Run where it quotes them)."""
    return " ".join(cmd)


__all__ = ["RenderedJob", "env_and_launch_lines", "parse_launch", "render", "run_as_node", "script_task", "shell_join"]
