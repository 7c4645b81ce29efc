"""What each rank runs first: a program of ours put in front of the task's own, with the same arguments.

Two mechanisms need it: the warm-reserve rank keeper (:mod:`nemo_resiliency_plugins.job.rank_keeper`, installed by
InProcessRestartPlugin) and the local-checkpoint guard (:mod:`nemo_resiliency_plugins.job.local_checkpoint_guard`,
installed by LocalCheckpointPlugin). Both re-target a ``run.Script`` through :func:`put_in_front`, which keeps
one description of the whole chain in the job's environment (``NRP_FRONT_CHAIN``: each program in turn, then the
task's own). Each program hands over to the next entry and drops its own, so any order of plugins gives the same
job, the task's program starts exactly once with exactly its arguments, and every plugin still reads and writes
its Hydra overrides in the task's arguments.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass
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
_CHAIN_ENTRY = re.compile(r"([a-z_]+):(module|path):([^,:]+)")


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


#: The order front programs run in, outermost (the process the launcher starts) first, whatever order the plugins
#: that install them were listed in. The rank keeper must be the launcher's own worker process: it passes the
#: launcher's signals on, outlives a killed rank, and finds the other keepers of its node by their command line.
#: The guard then checks the rank's files in the rank's own process, right before the task's program.
FRONT_ORDER = (rank_keeper.ROLE, local_checkpoint_guard.ROLE)
#: The job's env var that describes the chain (one definition per job file, which must agree with this one).
CHAIN_ENV = rank_keeper.CHAIN_ENV
#: Env vars by which front programs found their successor before ``NRP_FRONT_CHAIN`` (still read by them, for
#: jobs saved then and by hand): a value the user sets would be ignored under a chain, so it is refused.
OLD_TARGET_ENVS = (rank_keeper.MODULE_ENV, rank_keeper.SCRIPT_ENV, local_checkpoint_guard.TARGET_ENV)


@dataclass(frozen=True)
class Program:
    """One entry of the chain: what runs (``python -m name`` or ``python name``) and who put it there."""

    role: str
    kind: str  # "module" or "path"
    name: str

    def entry(self) -> str:
        return f"{self.role}:{self.kind}:{self.name}"


def _task_program(task: Any, *, plugin: str, field: str, why: str) -> Program:
    """The program ``task`` runs now; refuses (naming ``field`` and ``why``) one nothing can be put in front of."""
    problem = front_program_problem(task)
    if problem is not None:
        raise ResiliencyConfigError(plugin, field, None, detail=f"{why}; {problem}")
    name = str(task.path)
    if task.m:
        if MODULE_NAME.fullmatch(name) is None:
            raise ResiliencyConfigError(plugin, "task.path", name, "a Python module name (letters, digits, _ and .)")
        return Program("task", "module", name)
    if SCRIPT_PATH.fullmatch(name) is None:
        raise ResiliencyConfigError(plugin, "task.path", name, "a .py path of letters, digits, '_', '.', '/', '-'")
    return Program("task", "path", name)


def front_chain(task: Any, executor: Any, *, plugin: str) -> list[Program] | None:
    """The chain a front program of this package put on ``task`` (what each rank runs, in order, ending with the
    task's own program), or None when there is none."""
    text = executor.env_vars.get(CHAIN_ENV)
    if text is None:
        return None
    entries = [_CHAIN_ENTRY.fullmatch(part) for part in str(text).split(",")]
    if None in entries or len(entries) < 2 or entries[-1].group(1) != "task":  # type: ignore[union-attr]
        raise ResiliencyConfigError(
            plugin, f"executor.env_vars[{CHAIN_ENV!r}]", text, detail=f"{CHAIN_ENV} is set by this package's plugins"
        )
    chain = [Program(*e.groups()) for e in entries]  # type: ignore[union-attr]
    head = chain[0]
    if (head.kind == "module") != bool(task.m) or head.name != str(task.path):
        raise ResiliencyConfigError(
            plugin,
            "task.path",
            task.path,
            f"{head.name!r} (m={head.kind == 'module'}), the program a plugin put in front",
            detail=f"task.path changed after a plugin put a program in front of it ({CHAIN_ENV}={text!r})",
        )
    return chain


def put_in_front(
    task: Any,
    executor: Any,
    program: Program,
    *,
    plugin: str,
    field: str,
    why: str,
) -> None:
    """Make each rank of the ``run.Script`` run ``program`` before the task's own program, with the task's arguments
    untouched (every plugin still reads and writes its overrides there).

    Order-free and idempotent: the chain of programs (``NRP_FRONT_CHAIN``, read by each program as it hands over,
    see ``job/rank_keeper.pop_front_chain``) is kept in :data:`FRONT_ORDER` whatever order the plugins run in,
    the task's own program is always its last entry (so it starts exactly once, with exactly its arguments), and
    a program already in the chain is not added again. Refuses, naming ``field`` and ``why`` the plugin needs it,
    a task that cannot be re-targeted.
    """
    if program.role not in FRONT_ORDER:
        raise ResiliencyConfigError(plugin, None, detail=f"internal: unknown front program {program.role!r}")
    problem = front_program_problem(task)
    if problem is not None:
        raise ResiliencyConfigError(plugin, field, None, detail=f"{why}; {problem}")
    _check_program_name(program, plugin=plugin, field=field)
    for name in (CHAIN_ENV, *OLD_TARGET_ENVS):
        if isinstance(task, run.Script) and name in (task.env or {}):
            raise ResiliencyConfigError(
                plugin, f"task.env[{name!r}]", task.env[name], "unset", detail=f"{name} is set by {plugin} ({why})"
            )
    for name in OLD_TARGET_ENVS:
        if name in executor.env_vars:
            raise ResiliencyConfigError(
                plugin,
                f"executor.env_vars[{name!r}]",
                executor.env_vars[name],
                "unset",
                detail=f"{plugin} names the program each rank runs in {CHAIN_ENV} ({why}); {name} would be ignored",
            )
    chain = front_chain(task, executor, plugin=plugin)
    if chain is None:
        chain = [_task_program(task, plugin=plugin, field=field, why=why)]
    same_role = [p for p in chain if p.role == program.role]
    if same_role:
        if same_role[0] == program:
            return  # the plugin was listed twice: already in place
        raise ResiliencyConfigError(
            plugin,
            field,
            program.name,
            detail=f"each rank already runs {same_role[0].name} as {program.role} ({CHAIN_ENV}); two cannot be chained",
        )
    rank = FRONT_ORDER.index(program.role)
    at = next((i for i, p in enumerate(chain) if p.role == "task" or FRONT_ORDER.index(p.role) > rank), len(chain))
    chain = [*chain[:at], program, *chain[at:]]
    if CHAIN_ENV in executor.env_vars:  # ours (front_chain checked it): rewritten whole
        del executor.env_vars[CHAIN_ENV]
    text = ",".join(p.entry() for p in chain)
    executor_config.set_env(task, executor, CHAIN_ENV, text, plugin=plugin, field=field)
    task.path, task.m = chain[0].name, chain[0].kind == "module"
    logger.info("%s: each rank runs %s", plugin, " -> ".join(f"{p.name} ({p.role})" for p in chain))


def _check_program_name(program: Program, *, plugin: str, field: str) -> None:
    pattern = MODULE_NAME if program.kind == "module" else SCRIPT_PATH
    if pattern.fullmatch(program.name) is None:
        raise ResiliencyConfigError(
            plugin,
            field,
            program.name,
            "a module name or a .py path of letters, digits, '_', '.', '/', '-'",
            detail=f"the path of {program.role} goes into {CHAIN_ENV}; a NEMORUN_HOME or job directory with other "
            "characters cannot be named there",
        )


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
    if front_program_problem(task) is None and executor_config.ships_files(executor, plugin=plugin):
        path = executor_config.deliver_file(executor, KEEPER_FILE, keeper_source(), plugin=plugin)
        keeper = Program(rank_keeper.ROLE, "path", path)
    else:
        keeper = Program(rank_keeper.ROLE, "module", rank_keeper.KEEPER_MODULE)
    put_in_front(task, executor, keeper, plugin=plugin, field=field, why=why)
    if keeper.kind == "module":
        for line in image_needs(task):
            logger.warning("%s: %s", plugin, line)


def image_needs(task: Any) -> list[str]:
    """What the job's image must have installed of this package for ``task`` as the plugins left it (one sentence
    each; empty when the job needs nothing of it). For the plugin's log, ``explain`` and ``doctor``."""
    if not isinstance(task, run.Script) or not task.m or str(task.path) not in rank_keeper.KEEPER_NAMES:
        return []
    from nemo_resiliency_plugins._version import __version__

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
    program = Program(local_checkpoint_guard.ROLE, "path", guard)
    put_in_front(task, executor, program, plugin=plugin, field=field, why=why)
    executor_config.set_env(task, executor, local_checkpoint_guard.DIR_ENV, local_dir, plugin=plugin, field=dir_field)
