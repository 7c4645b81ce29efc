"""What each rank runs first: a program of ours put in front of the task's own, with the same arguments.

Two mechanisms need it: the warm-reserve rank keeper (:mod:`nemo_resiliency_plugins.job.rank_keeper`, installed by
InProcessRestartPlugin) and the local-checkpoint guard (:mod:`nemo_resiliency_plugins.job.local_checkpoint_guard`,
installed by LocalCheckpointPlugin). Both re-target a ``run.Script`` here and pass the program it ran before in
the job's environment, so they chain in either order and every plugin still reads and writes its Hydra
overrides in the task's arguments.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import Any

import nemo_run as run

from nemo_resiliency_plugins.core import executor_config
from nemo_resiliency_plugins.errors import ResiliencyConfigError
from nemo_resiliency_plugins.job import local_checkpoint_guard, rank_keeper

logger = logging.getLogger(__name__)

#: What may name the task's own Python program in an env var, which NeMo-Run exports unquoted on some executors
#: (full match): a dotted module name, or a plain relative or absolute ``.py`` path.
MODULE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
SCRIPT_PATH = re.compile(r"[A-Za-z0-9_./-]+\.py")


def front_program_problem(task: Any) -> str | None:
    """Why no program can be started in front of ``task``'s own, or None when one can."""
    if not isinstance(task, run.Script):
        return (
            f"a {type(task).__name__} runs through NeMo-Run's own fdl_runner entry, which nothing can be put in "
            "front of; launch the training as run.Script(path=..., entrypoint='python')"
        )
    if task.inline:
        return "an inline run.Script is a shell program"
    if task.entrypoint != "python":
        return f"task.entrypoint={task.entrypoint!r} does not start it with Python; use entrypoint='python'"
    return None


def run_program_first(
    task: Any, *, plugin: str, field: str, why: str, module: str | None = None, path: str | None = None
) -> tuple[str, str]:
    """Make the ``run.Script`` start ``module`` (``python -m``) or the Python file ``path`` in place of its own
    program, with the same arguments (every plugin still reads and writes its overrides there).

    Returns the program it ran before, as ``("module", name)`` or ``("path", file)``, for the front program to
    run next (its caller passes it on in the job's environment, hence the full-match checks). Programs put in
    front by different plugins chain: the later one runs the earlier one. Refuses, naming ``field`` and
    ``why`` the plugin needs it, a task that cannot be re-targeted.
    """
    problem = front_program_problem(task)
    if problem is not None:
        raise ResiliencyConfigError(plugin, field, None, detail=f"{why}; {problem}")
    name = str(task.path)
    if task.m:
        if MODULE_NAME.fullmatch(name) is None:
            raise ResiliencyConfigError(plugin, "task.path", name, "a Python module name (letters, digits, _ and .)")
        original = ("module", name)
    else:
        if SCRIPT_PATH.fullmatch(name) is None:
            raise ResiliencyConfigError(plugin, "task.path", name, "a .py path of letters, digits, '_', '.', '/', '-'")
        original = ("path", name)
    if (module is None) == (path is None):
        raise ResiliencyConfigError(plugin, None, detail="internal: run_program_first needs a module or a path")
    task.path, task.m = (module, True) if module is not None else (path, False)
    logger.info("%s: each rank runs %s first (then %s %s)", plugin, task.path, *original)
    return original


def check_script_entrypoint(task: Any, *, plugin: str) -> None:
    """A launcher execs ``run.Script(path=...)`` directly unless its entrypoint is ``python``.

    NeMo-Run's default entrypoint is ``bash``, which makes torchrun/ft_launcher run ``--no-python x.py``:
    a non-executable Python file then fails with 'Permission denied' on every rank. Say so before launch.
    """
    if not isinstance(task, run.Script) or task.inline or task.m or task.entrypoint == "python":
        return
    path = task.path
    if not path.endswith(".py"):
        return
    executable = os.path.exists(path) and os.access(path, os.X_OK)
    if executable:
        with open(path, "rb") as handle:
            if handle.read(2) == b"#!":
                return
    raise ResiliencyConfigError(
        plugin,
        "task.entrypoint",
        task.entrypoint,
        "'python' for a Python script",
        detail=(
            f"run.Script(path={path!r}) with entrypoint={task.entrypoint!r} makes the launcher exec the file "
            "directly (--no-python) and every rank fails with 'Permission denied'. Use "
            f"run.Script(path={path!r}, entrypoint='python')"
        ),
    )


#: The name :func:`executor_config.deliver_file` ships the rank keeper under (``<digest>-rank_keeper.py``).
KEEPER_FILE = rank_keeper.KEEPER_FILE


def keeper_source() -> str:
    """The text of the rank keeper (standard library only, so the job needs nothing installed)."""
    return Path(rank_keeper.__file__).read_text()


def install_rank_keeper(task: Any, executor: Any, *, plugin: str, field: str) -> None:
    """Make every rank of ``task`` run under the rank keeper; refuse what cannot be kept.

    Only a ``run.Script`` naming a Python module or file can be re-targeted without touching its arguments: a
    ``run.Partial`` runs through NeMo-Run's own ``fdl_runner`` entry, and an inline script is a shell program.

    Where the executor can carry a file of this package to the job (``ships_files``: Local, Slurm) the keeper
    travels as that file, like the local-checkpoint guard, and the job's image needs nothing of this package.
    Elsewhere each rank runs ``python -m nemo_resiliency_plugins.job.rank_keeper``: the log (and so ``explain``)
    and ``doctor`` say the image needs this package (:func:`image_needs`).
    """
    why = (
        "a warm reserve needs each rank to run under nemo_resiliency_plugins.job.rank_keeper, so that a killed rank "
        "does not make the launcher tear the worker group down"
    )
    problem = front_program_problem(task)
    if problem is None and executor_config.ships_files(executor, plugin=plugin):
        keeper = executor_config.deliver_file(executor, KEEPER_FILE, keeper_source(), plugin=plugin)
        kind, name = run_program_first(task, plugin=plugin, field=field, why=why, path=keeper)
    else:
        kind, name = run_program_first(task, plugin=plugin, field=field, why=why, module=rank_keeper.KEEPER_MODULE)
        for line in image_needs(task):
            logger.warning("%s: %s", plugin, line)
    env = rank_keeper.MODULE_ENV if kind == "module" else rank_keeper.SCRIPT_ENV
    executor_config.set_env(task, executor, env, name, plugin=plugin, field=field)


def image_needs(task: Any) -> list[str]:
    """What the job's image must have installed of this package for ``task`` as the plugins left it (one sentence
    each; empty when the job needs nothing of it). For the plugin's log, ``explain`` and ``doctor``."""
    if not isinstance(task, run.Script) or not task.m or str(task.path) not in rank_keeper.KEEPER_NAMES:
        return []
    from nemo_resiliency_plugins import __version__

    return [
        f"each rank runs 'python -m {task.path}' (this executor has no route to ship the rank keeper as a file), so "
        "the job's image must have this package installed: "
        f"pip install --no-deps nemo-resiliency-plugins=={__version__} (the keeper is standard library only, so "
        "--no-deps is enough)"
    ]


#: The name :func:`executor_config.deliver_file` ships the local-checkpoint guard under.
GUARD_FILE = "local_checkpoint_guard.py"


def guard_source() -> str:
    """The text of the local-checkpoint guard (standard library only, so the job needs nothing installed)."""
    return Path(local_checkpoint_guard.__file__).read_text()


def local_guard_problem(task: Any, executor: Any, *, plugin: str) -> str | None:
    """Why the local-checkpoint guard cannot run in front of ``task`` on ``executor``, or None when it can."""
    problem = front_program_problem(task)
    if problem is None and not executor_config.ships_files(executor, plugin=plugin):
        problem = f"{executor_config.executor_kind(executor)} has no route for a file of this package to the job"
    return problem


def install_local_checkpoint_guard(
    task: Any, executor: Any, local_dir: str, *, plugin: str, field: str, dir_field: str
) -> None:
    """Ship the guard with the job and make each rank run it before the task's program."""
    why = "fallback_on_unreadable checks each rank's local checkpoints before the training script starts"
    guard = executor_config.deliver_file(executor, GUARD_FILE, guard_source(), plugin=plugin)
    kind, program = run_program_first(task, plugin=plugin, field=field, why=why, path=guard)
    executor_config.set_env(
        task, executor, local_checkpoint_guard.TARGET_ENV, f"{kind}:{program}", plugin=plugin, field=field
    )
    executor_config.set_env(task, executor, local_checkpoint_guard.DIR_ENV, local_dir, plugin=plugin, field=dir_field)
