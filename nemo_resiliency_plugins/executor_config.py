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

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_UNSAFE_IN_FILE_PATH = re.compile(r"[\n\r\0'\"$`;\\ ]")


def is_slurm(executor: Any) -> bool:
    return isinstance(executor, run.SlurmExecutor)


def executor_kind(executor: Any) -> str:
    return type(executor).__name__


def set_env(task: Any, executor: Any, name: str, value: str, *, plugin: str, field: str | None = None) -> None:
    """Set ``name=value`` in the job's environment unless the user set it to something else."""
    if not _ENV_NAME.match(name):
        raise ResiliencyConfigError(plugin, field, name, "an environment variable name")
    if not isinstance(value, str) or any(c in value for c in "\n\r\0"):
        raise ResiliencyConfigError(plugin, field, value, "a single-line string value for env var " + name)
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


def set_retries(executor: Any, retries: int, *, plugin: str, field: str) -> None:
    """Job-level retries (Slurm requeues); 0 on the executor means 'not set by the user'."""
    current = getattr(executor, "retries", 0) or 0
    if current not in (0, retries):
        raise ResiliencyConfigError(
            plugin,
            field,
            retries,
            detail=f"the executor already has retries={current}; set {plugin}.{field}={current} or remove one",
        )
    executor.retries = retries


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


def install_ft_launcher(executor: Any, wanted: FaultTolerance, *, plugin: str) -> FaultTolerance:
    """Make ``executor.launcher`` NVRx's ft_launcher with ``wanted``'s settings.

    A plain torchrun launcher (``"torchrun"``, ``run.Torchrun``) is upgraded, keeping its rendezvous and
    nsys settings. An existing ``run.FaultTolerance`` keeps its values, and any that contradict ``wanted``
    are reported.
    """
    current = executor.launcher
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
    if not re.match(r"^[A-Za-z0-9_.-]+$", name):
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
        if _UNSAFE_IN_FILE_PATH.search(host_dir):
            raise ResiliencyConfigError(
                plugin,
                "executor.tunnel.job_dir",
                host_dir,
                "a job directory without spaces, quotes, '$', '`', ';' or backslashes",
            )
        host_path = os.path.join(host_dir, filename)
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


# ------------------------------------------------------------------------------------- Slurm time limit

_SLURM_TIME = re.compile(r"^(?:(?P<d>\d+)-)?(?P<a>\d+)(?::(?P<b>\d+))?(?::(?P<c>\d+))?$")


def slurm_time_limit_seconds(value: Any) -> int | None:
    """Seconds in a Slurm ``--time`` value; None for no limit (``UNLIMITED``/``INFINITE``, empty).

    Slurm's forms: ``M``, ``M:S``, ``H:M:S``, ``D-H``, ``D-H:M``, ``D-H:M:S``. Raises ``ValueError`` for
    anything else, so a plugin can report the executor's value instead of guessing.
    """
    if value is None:
        return None
    text = str(value).strip()
    if text == "" or text.upper() in ("UNLIMITED", "INFINITE"):
        return None
    m = _SLURM_TIME.match(text)
    if not m:
        raise ValueError(f"not a Slurm time limit: {value!r}")
    d, a, b, c = (int(m.group(k)) if m.group(k) is not None else None for k in ("d", "a", "b", "c"))
    if d is not None:  # D-H, D-H:M, D-H:M:S
        return ((d * 24 + a) * 60 + (b or 0)) * 60 + (c or 0)
    if c is not None:  # H:M:S
        return (a * 60 + b) * 60 + c
    if b is not None:  # M:S
        return a * 60 + b
    return a * 60  # M


# ------------------------------------------------------------- NeMo-Run's ft_launcher template and requeue

_REQUEUE_GUARD_MARK = "# nemo-resiliency-plugins: requeue guard"

_REQUEUE_GUARD = (
    _REQUEUE_GUARD_MARK
    + r"""
# NeMo-Run's ft_launcher sbatch template ends with `scontrol requeue` unless a "finished flag" file exists
# or the failure limit is reached. Megatron Bridge never writes that flag, so a job that SUCCEEDED would be
# requeued again and again. This function stands in for scontrol in that one call: when the training step
# exited 0 and this batch shell did not get a preemption signal (NRP_PREEMPTION_SIGNAL, set by the
# signal forwarding of PreemptionPlugin), training is finished: it writes the flag and does not requeue.
# A failed step, a step that exited 0 after the preemption signal, and any other call go to scontrol.
# The template also counts the run that just failed against TORCHX_MAX_RETRIES (retries=N allowed N-1
# requeues after failures, and retries=0 none at all, not even to continue after a preemption): one more
# makes N mean N requeues after failed runs, as num_job_retries_on_failure says.
TORCHX_MAX_RETRIES=$(( TORCHX_MAX_RETRIES + 1 ))
# When no retry is left the template falls off its end and the job ends COMPLETED with exit code 0:
# end it with the training step's exit code instead, so Slurm reports the failure.
trap '[ "${exitcode:-0}" = 0 ] || exit "$exitcode"' EXIT
scontrol() {
  if [ "${1:-}" = requeue ] && [ "${exitcode:-1}" = 0 ] && [ "${ANY_JOB_STEP_FAILED:-1}" = 0 ]; then
    if [ -z "${NRP_PREEMPTION_SIGNAL:-}" ]; then
      touch "$(dirname "$JOB_RESULTS_FILE")/$(basename "$FAULT_TOL_FINISHED_FLAG_FILE")"
      echo "nemo-resiliency-plugins: step exited 0 without a preemption signal: finished, not requeued"
      return 0
    fi
    echo "nemo-resiliency-plugins: step exited 0 after SIG${NRP_PREEMPTION_SIGNAL}: preempted, requeue"
  fi
  command scontrol "$@"
}"""
)


def guard_ft_requeue(executor: Any, *, plugin: str) -> None:
    """Stop NeMo-Run's ft_launcher sbatch template from requeueing a Slurm job that finished.

    The template (``ft_launcher_slurm.j2``) requeues after every run unless the finished-flag file exists or
    ``retries`` failures are in the job's results file. Megatron Bridge never writes the flag, so a
    successful run is requeued forever (each run resumes at the last iteration and succeeds again). The guard
    is a bash function in ``setup_lines`` (the only hook NeMo-Run gives before the template's last lines):
    it intercepts the template's ``scontrol requeue`` and, when the step exited 0 and the batch shell did not
    receive the preemption signal (:func:`forward_batch_signal_to_tasks` records it), writes the flag and
    skips the requeue. A failed step is requeued as before (up to ``retries`` failures); a step that exited 0
    after the preemption signal (saved and exited) is requeued to continue training. If such a job had in
    fact just finished, the next run resumes at the last iteration, exits 0 at once and ends there.
    Two more template traps are fixed in the same block (both seen on the local Slurm): the template counts
    the failed run itself against ``TORCHX_MAX_RETRIES`` (``retries=1`` never requeued; ``retries=0`` not
    even after a preemption), so the block adds one; and a job out of retries fell off the script's end
    and was reported COMPLETED with exit code 0, so an EXIT trap ends it with the step's exit code.
    Trade-off: a Megatron Bridge run that exits 0 on its own before the end (``train.exit_duration_in_mins``,
    ``train.exit_interval``) is treated as finished.
    """
    if not is_slurm(executor):
        return
    existing = executor.setup_lines or ""
    if _REQUEUE_GUARD_MARK in existing:
        return
    executor.setup_lines = (existing.rstrip("\n") + "\n" if existing else "") + _REQUEUE_GUARD


# ------------------------------------------------------------------- Slurm signal to the step's tasks only

_FORWARD_MARK = "# nemo-resiliency-plugins: signal forwarding"

_FORWARD = (
    _FORWARD_MARK
    + r"""
# Slurm's plain --signal=SIG@N signals EVERY process of the job step. Under ft_launcher that includes NVRx's
# rank monitors, which close on SIGTERM; Megatron Bridge's checkpoint-save hooks then fail ("RankMonitorClient
# could not send section update: Broken pipe") and the save-and-exit is lost. With --signal=B:SIG@N only this
# batch shell gets the signal, and it sends it to the steps' *task* processes only (the launcher on each
# node, or the ranks when there is no launcher), which pass it on to their ranks themselves.
nrp_signal_tasks() {
  local nrp_pid
  for nrp_pid in $(scontrol listpids "$SLURM_JOB_ID" 2>/dev/null |
      awk -v own="$SLURM_STEP_ID" 'NR > 1 && $3 ~ /^[0-9]+$/ && $3 != own && $4 ~ /^[0-9]+$/ {print $1}'); do
    kill -s "$1" "$nrp_pid" && echo "nemo-resiliency-plugins: sent SIG$1 to task pid $nrp_pid on $(hostname -s)"
  done
}
export -f nrp_signal_tasks
NRP_SIGNALLED=0
NRP_PREEMPTION_SIGNAL=
nrp_forward_signal() {
  NRP_SIGNALLED=1
  NRP_PREEMPTION_SIGNAL=$1
  echo "nemo-resiliency-plugins: batch shell got SIG$1 at $(date '+%F %T'), forwarding it to the step tasks"
  command srun --overlap --jobid="$SLURM_JOB_ID" --nodes="${SLURM_JOB_NUM_NODES:-1}" --ntasks-per-node=1 \
    bash -c "nrp_signal_tasks $1"
}
# bash runs a trap only between commands, never while a foreground command runs: the template's srun runs
# in the background here and is waited for (again after each trap), returning its own exit status.
srun() {
  command srun "$@" &
  local nrp_srun=$! nrp_rc
  while :; do
    NRP_SIGNALLED=0
    wait "$nrp_srun"
    nrp_rc=$?
    [ "$NRP_SIGNALLED" = 1 ] || return "$nrp_rc"
  done
}"""
)


def forward_batch_signal_to_tasks(executor: Any, signal_name: str, *, plugin: str) -> None:
    """Make a ``--signal=B:<signal_name>@N`` batch-shell signal reach the job steps' task processes only.

    Why not plain ``--signal=<sig>@N``: Slurm then signals every process of the step, including NVRx's rank
    monitors (children of ``ft_launcher``), which close on SIGTERM/SIGINT/SIGUSR1/SIGUSR2; the ranks' next
    section message (Megatron Bridge's ``on_checkpointing_start/end`` around the save) raises
    ``RankMonitorClientError`` and the preemption checkpoint is lost (measured on the local Slurm). Signalling
    only the task processes lets the launcher forward the signal to its ranks and keep the monitors until
    they have saved. ``signal_name`` is a name without ``SIG`` (``TERM``); it goes into shell code, so only
    plain names are accepted.
    """
    if not is_slurm(executor):
        return
    if not re.fullmatch(r"[A-Z][A-Z0-9]*", signal_name or ""):
        raise ResiliencyConfigError(plugin, None, detail=f"internal: bad signal name {signal_name!r}")
    existing = executor.setup_lines or ""
    trap = f"trap 'nrp_forward_signal {signal_name}' {signal_name}"
    if _FORWARD_MARK in existing:
        if trap not in existing:
            raise ResiliencyConfigError(
                plugin,
                None,
                signal_name,
                detail="the job already forwards another batch signal to its tasks; use one exit signal per job",
            )
        return
    executor.setup_lines = (existing.rstrip("\n") + "\n" if existing else "") + _FORWARD + "\n" + trap
