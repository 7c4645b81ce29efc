"""The one place plugins change a NeMo-Run executor: env vars, launcher, retries, Slurm fields, and files
the job must read.

Every setter refuses to overwrite a different value the user already set (``ResiliencyConfigError`` naming
both values) and is a no-op when the same value is already there, so plugins compose and a plugin listed
twice is harmless.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import shutil
from pathlib import Path
from typing import Any

import nemo_run as run
from nemo_run.config import get_nemorun_home
from nemo_run.core.execution.launcher import FaultTolerance, Launcher, Torchrun

from nemo_resiliency_plugins.errors import ResiliencyConfigError
from nemo_resiliency_plugins.slurm_script import (  # noqa: F401  (the sbatch-script blocks, re-exported)
    forward_batch_signal_to_tasks,
    guard_ft_requeue,
    slurm_time_limit_seconds,
)
from nemo_resiliency_plugins.validation import SHELL_WORD_TEXT, is_shell_word

# Used with re.fullmatch only (``$`` would accept a trailing newline).
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_FILE_NAME = re.compile(r"[A-Za-z0-9_.-]+")
#: NeMo-Run's job-retry count reaches bash arithmetic (``$(( TORCHX_MAX_RETRIES + 1 ))``, ``-eq``), which is
#: 64-bit: far below any overflow, and far above any sensible number of Slurm requeues.
MAX_JOB_RETRIES = 1_000_000


def is_slurm(executor: Any) -> bool:
    return isinstance(executor, run.SlurmExecutor)


def executor_kind(executor: Any) -> str:
    return type(executor).__name__


def set_env(task: Any, executor: Any, name: str, value: str, *, plugin: str, field: str | None = None) -> None:
    """Set ``name=value`` in the job's environment unless the user set it to something else.

    On Slurm, NeMo-Run writes every env var into the sbatch script as ``export NAME=value`` *without quotes*,
    so a value is accepted there only when bash reads it as exactly itself (:data:`validation.SHELL_WORD`):
    a ``(``, ``&``, tab or ``|`` would run part of it as a command, in a background subshell, or make the
    script unparsable, and ft_launcher would silently get no config.
    """
    if not isinstance(name, str) or _ENV_NAME.fullmatch(name) is None:
        raise ResiliencyConfigError(plugin, field, name, "an environment variable name")
    if not isinstance(value, str) or any(c in value for c in "\n\r\0"):
        raise ResiliencyConfigError(plugin, field or name, value, "a single-line string value for env var " + name)
    if is_slurm(executor) and not is_shell_word(value):
        raise ResiliencyConfigError(
            plugin,
            field or name,
            value,
            f"a value made of {SHELL_WORD_TEXT}",
            detail=f"NeMo-Run writes 'export {name}=<value>' into the sbatch script without quotes",
        )
    sources = [("executor.env_vars", executor.env_vars)]
    if isinstance(task, run.Script) and task.env:
        sources.append(("task.env", task.env))
    for where, env in sources:
        if name in env and str(env[name]) != value:
            raise ResiliencyConfigError(
                plugin,
                field or name,
                value,
                detail=(
                    f"{where} already sets {name}={env[name]!r}; {plugin} needs {name}={value!r}. Remove it or make "
                    "them agree (a user value is never silently overwritten)"
                ),
            )
    executor.env_vars[name] = value


def get_env(task: Any, executor: Any, name: str) -> str | None:
    """The value the job will see for ``name`` from the user's settings (``task.env`` wins), or None.

    For plugins that accept more than one user value of a variable (e.g. ``TORCH_CPP_LOG_LEVEL`` ``error``
    or ``fatal``) and must not overwrite the one the user chose.
    """
    if isinstance(task, run.Script) and task.env and name in task.env:
        return str(task.env[name])
    if name in executor.env_vars:
        return str(executor.env_vars[name])
    return None


def default_launcher(executor: Any, launcher: str) -> bool:
    """Give the executor ``launcher`` when the user chose none (a chosen launcher is always kept).

    For mechanisms that need the ``MASTER_ADDR``/``MASTER_PORT``/``RANK``/``WORLD_SIZE`` a launcher exports
    (without one, NeMo-Run's LocalExecutor starts one plain process). ``"torchrun"`` is what
    :func:`install_ft_launcher` upgrades, so plugins compose in either order. Returns True when it set one.
    """
    if getattr(executor, "launcher", None) is None:
        executor.launcher = launcher
        return True
    return False


# Values a plugin of this package wrote on an executor, so a second plugin can tell them from NeMo-Run's
# defaults: {executor field: (value, "Plugin.field")}. Stored on the executor object itself (which NeMo-Run
# clones per job before plugins run), outside its dataclass fields, so it is never serialized.
_CLAIMS_ATTR = "_nrp_claims"


def _claims(executor: Any) -> dict[str, tuple[Any, str]]:
    claims = executor.__dict__.get(_CLAIMS_ATTR)
    if claims is None:
        claims = {}
        executor.__dict__[_CLAIMS_ATTR] = claims
    return claims


def set_retries(executor: Any, retries: int, *, plugin: str, field: str) -> None:
    """Job-level retries (Slurm requeues).

    What "never silently overwritten" means for a value NeMo-Run cannot tell from its default: the executor's
    ``retries`` defaults to 0, so ``retries=0`` written by the user and no ``retries`` at all look the same on
    the executor, and both are read as "not set": the plugin's ``num_job_retries_on_failure`` applies. To
    have no job retries, set ``num_job_retries_on_failure=0`` on the plugin. Any other executor value the
    plugin's disagrees with is an error. Between plugins nothing is ambiguous: the value a plugin set is
    recorded, so two plugins asking for different retries (0 and 2 included) is an error naming both.
    """
    if isinstance(retries, bool) or not isinstance(retries, int) or not 0 <= retries <= MAX_JOB_RETRIES:
        raise ResiliencyConfigError(plugin, field, retries, f"an integer in [0, {MAX_JOB_RETRIES}]")
    claims = _claims(executor)
    if "retries" in claims and claims["retries"][0] != retries:
        value, who = claims["retries"]
        raise ResiliencyConfigError(
            plugin,
            field,
            retries,
            detail=f"{who}={value} already set the executor's retries; make the two plugins agree or remove one",
        )
    current = getattr(executor, "retries", 0) or 0
    if "retries" not in claims and current not in (0, retries):
        raise ResiliencyConfigError(
            plugin,
            field,
            retries,
            detail=f"the executor already has retries={current}; set {plugin}.{field}={current} or remove one",
        )
    executor.retries = retries
    claims["retries"] = (retries, f"{plugin}.{field}")


def set_slurm_field(executor: Any, name: str, value: Any, *, plugin: str, field: str) -> None:
    current = getattr(executor, name)
    if current not in (None, "", value):
        raise ResiliencyConfigError(
            plugin,
            field,
            value,
            detail=f"the SlurmExecutor already has {name}={current!r}; {plugin} would set {value!r}",
        )
    setattr(executor, name, value)


def install_ft_launcher(
    executor: Any, wanted: FaultTolerance, *, plugin: str, must_stay_unset: dict[str, str] | None = None
) -> FaultTolerance:
    """Make ``executor.launcher`` NVRx's ft_launcher with ``wanted``'s settings.

    A plain torchrun launcher (``"torchrun"``, ``run.Torchrun``) is upgraded, keeping its rendezvous and
    nsys settings. An existing ``run.FaultTolerance`` keeps its values, and any that contradict ``wanted``
    are reported. ``must_stay_unset`` names launcher fields (with the reason) that the plugin leaves unset on
    purpose: a user's value there would reach ft_launcher and is refused rather than passed on.
    """
    current = executor.launcher
    for name, why in (must_stay_unset or {}).items():
        theirs = getattr(current, name, None) if isinstance(current, FaultTolerance) else None
        if theirs is not None:
            raise ResiliencyConfigError(
                plugin,
                f"executor.launcher.{name}",
                theirs,
                "None (unset)",
                detail=f"the executor's run.FaultTolerance launcher sets {name}={theirs!r}, and {why}",
            )
    if isinstance(current, str):
        if current not in ("torchrun", "ft"):
            raise ResiliencyConfigError(
                plugin, "executor.launcher", current, "None, 'torchrun', 'ft', run.Torchrun or run.FaultTolerance"
            )
        current = None
    if current is None:
        executor.launcher = wanted
        return wanted
    if isinstance(current, FaultTolerance):
        for f in dataclasses.fields(FaultTolerance):
            mine, theirs = getattr(wanted, f.name), getattr(current, f.name)
            default = f.default if f.default is not dataclasses.MISSING else None
            if theirs in (None, default) or mine in (None, default) or mine == theirs:
                continue
            raise ResiliencyConfigError(
                plugin,
                f"launcher.{f.name}",
                mine,
                detail=f"the executor's run.FaultTolerance launcher already has {f.name}={theirs!r}",
            )
        for f in dataclasses.fields(FaultTolerance):
            if getattr(current, f.name) is None and getattr(wanted, f.name) is not None:
                setattr(current, f.name, getattr(wanted, f.name))
        return current
    if isinstance(current, Torchrun) or type(current) is Launcher:
        carried = {
            f.name: getattr(current, f.name)
            for f in dataclasses.fields(current)
            if f.name in {g.name for g in dataclasses.fields(FaultTolerance)} and f.init
        }
        for name, value in carried.items():
            setattr(wanted, name, value)
        executor.launcher = wanted
        return wanted
    raise ResiliencyConfigError(
        plugin,
        "executor.launcher",
        current,
        "None, 'torchrun', run.Torchrun or run.FaultTolerance",
        detail=f"{plugin} replaces the launcher with NVRx's ft_launcher and cannot merge a {type(current).__name__}",
    )


def deliver_file(executor: Any, name: str, content: str, *, plugin: str) -> str:
    """Make ``content`` readable by the job as a file; returns the path the job sees.

    NeMo-Run has no hook that ships an extra file with a job, and ``Experiment.dryrun()`` deletes the
    experiment directory, so:

    * LocalExecutor: the job runs on this host; the file is written content-addressed under
      ``$NEMORUN_HOME/resiliency/`` (immutable, so re-runs and dry runs cannot invalidate it).
    * SlurmExecutor: the job runs on the cluster; the sbatch script writes the file into the job's
      directory before ``srun`` (appended to ``executor.setup_lines`` as a quoted heredoc, so nothing in it
      is expanded). Inside a container the job directory is mounted at ``/nemo_run``.
    """
    if _FILE_NAME.fullmatch(name) is None:
        raise ResiliencyConfigError(plugin, None, detail=f"internal: bad file name {name!r}")
    digest = hashlib.sha256(content.encode()).hexdigest()[:12]
    filename = f"{digest}-{name}"
    if isinstance(executor, run.LocalExecutor):
        directory = Path(get_nemorun_home()) / "resiliency"
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / filename
        if not path.exists() or path.read_text() != content:
            tmp = path.with_suffix(path.suffix + f".tmp{os.getpid()}")
            tmp.write_text(content)
            os.replace(tmp, path)
        return str(path)
    if is_slurm(executor):
        host_dir = os.path.join(executor.tunnel.job_dir, Path(executor.job_dir).name)
        host_path = os.path.join(host_dir, filename)
        _check_job_path(executor, host_path, plugin=plugin)
        marker = "NRP_FILE_EOF"
        if any(line.strip() == marker for line in content.splitlines()):
            raise ResiliencyConfigError(plugin, None, detail="internal: file content contains the heredoc marker")
        block = (
            f"# {plugin}: write {name} for the job (quoted heredoc: nothing below is expanded)\n"
            f"mkdir -p '{host_dir}'\n"
            f"cat > '{host_path}' <<'{marker}'\n{content.rstrip(chr(10))}\n{marker}"
        )
        existing = executor.setup_lines or ""
        if block not in existing:
            executor.setup_lines = (existing.rstrip("\n") + "\n" if existing else "") + block
        if executor.container_image:
            return f"/nemo_run/{filename}"
        return host_path
    raise ResiliencyConfigError(
        plugin,
        "executor",
        executor_kind(executor),
        "run.LocalExecutor or run.SlurmExecutor",
        detail=(
            f"{plugin} must hand ft_launcher a config file (section timeouts), and there is no supported way to "
            f"ship one with a {executor_kind(executor)} job yet"
        ),
    )


def _check_job_path(executor: Any, host_path: str, *, plugin: str) -> None:
    """The job directory goes into ``export PET_FT_CFG_PATH=<path>`` (NeMo-Run does not quote it): it must be
    a plain shell word. When it is not, name the part to rename: the tunnel's ``job_dir``, the experiment
    title, or the task's name in ``exp.add(..., name=...)``."""
    if is_shell_word(host_path):
        return
    task_name = Path(executor.job_dir).name
    exp_id = os.path.basename(executor.tunnel.job_dir.rstrip("/"))
    title = os.path.basename(os.path.dirname(executor.tunnel.job_dir.rstrip("/")))
    base = os.path.dirname(os.path.dirname(executor.tunnel.job_dir.rstrip("/")))
    parts = (
        ("task name", task_name, "the task's name (exp.add(..., name=...))"),
        ("experiment title", title, "the experiment's title (run.Experiment(title))"),
        ("experiment id", exp_id, "the experiment's id"),
        ("executor.tunnel.job_dir", base, "the tunnel's job_dir"),
    )
    field, part, what = next(
        (p for p in parts if not is_shell_word(p[1])), ("executor.tunnel.job_dir", host_path, "the job directory")
    )
    raise ResiliencyConfigError(
        plugin,
        field,
        part,
        f"a name made of {SHELL_WORD_TEXT}",
        detail=(
            f"rename {what}: it is part of the job directory {host_path!r}, which NeMo-Run writes unquoted into "
            "the sbatch script (export PET_FT_CFG_PATH=...)"
        ),
    )


def require_program(task: Any, executor: Any, program: str, *, plugin: str, fix: str) -> None:
    """On executors that run here, fail at setup (not as a FAILED job) when ``program`` is not on PATH."""
    if not isinstance(executor, run.LocalExecutor):
        return
    paths = []
    for env in (getattr(task, "env", None) or {}, executor.env_vars):
        if "PATH" in env:
            paths.append(str(env["PATH"]))
    paths.append(os.environ.get("PATH", ""))
    if shutil.which(program, path=os.pathsep.join(paths)) is None:
        raise ResiliencyConfigError(
            plugin,
            None,
            detail=f"'{program}' is not on the PATH the local job will see; {fix}",
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
