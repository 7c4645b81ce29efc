"""Test helpers that drive the real NeMo-Run code paths (Experiment.add applies plugins, package() builds
the command torchx would launch)."""

from __future__ import annotations

import nemo_run as run
from nemo_run.run.torchx_backend.packaging import package


def add_job(task, executor, plugins, name: str = "train"):
    """Add ``task`` to a real Experiment (which clones it and runs every plugin's setup) and return the job."""
    with run.Experiment(f"t-{name}", executor=executor) as exp:
        exp.add(task, executor=executor, plugins=plugins, name=name)
        return exp.jobs[0]


def launch_command(job) -> tuple[str, list[str], dict[str, str]]:
    """(entrypoint, args, env) of the role NeMo-Run would launch for ``job``."""
    app = package(job.id, job.task, job.executor, serialize_to_file=False)
    role = app.roles[0]
    return role.entrypoint, list(role.args), dict(role.env)
