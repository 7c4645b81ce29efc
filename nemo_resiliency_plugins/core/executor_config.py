"""The one place plugins change a NeMo-Run executor: env vars, launcher, retries, Slurm fields, and files
the job must read.

What differs between executors (which env reaches the job, whether retries are honoured, how a config file
gets there, the node's infrastructure rank, what is refused) is decided by one small rules class per
executor in :mod:`nemo_resiliency_plugins.core.executors`; the functions here are the mechanism plugins call.

Every setter refuses to overwrite a different value the user already set (``ResiliencyConfigError`` naming
both values) and is a no-op when the same value is already there, so plugins compose and a plugin listed
twice is harmless.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import shutil
from typing import Any

import nemo_run as run
from nemo_run.core.execution.launcher import FaultTolerance, Launcher, Torchrun

from nemo_resiliency_plugins.core.executors import (  # noqa: F401  (node counts: for plugins)
    for_executor,
    node_count,
    training_node_count,
)
from nemo_resiliency_plugins.core.slurm_script import (  # noqa: F401  (the sbatch-script blocks, re-exported)
    forward_batch_signal_to_tasks,
    guard_ft_requeue,
    slurm_time_limit_seconds,
)
from nemo_resiliency_plugins.core.slurm_script import install_spare_nodes_block as _spare_nodes_block
from nemo_resiliency_plugins.core.validation import SHELL_WORD_TEXT, is_shell_word
from nemo_resiliency_plugins.errors import ResiliencyConfigError

# Used with re.fullmatch only (``$`` would accept a trailing newline).
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_FILE_NAME = re.compile(r"[A-Za-z0-9_.-]+")
#: NeMo-Run's job-retry count reaches bash arithmetic (``$(( TORCHX_MAX_RETRIES + 1 ))``, ``-eq``), which is
#: 64-bit: far below any overflow, and far above any sensible number of Slurm requeues.
MAX_JOB_RETRIES = 1_000_000

logger = logging.getLogger(__name__)


def is_slurm(executor: Any) -> bool:
    return isinstance(executor, run.SlurmExecutor)


def executor_kind(executor: Any) -> str:
    return type(executor).__name__


def set_env(task: Any, executor: Any, name: str, value: str, *, plugin: str, field: str | None = None) -> None:
    """Set ``name=value`` in the job's environment unless the user set it to something else.

    Where NeMo-Run writes env vars into a shell script as ``export NAME=value`` *without quotes* (Slurm's
    sbatch script, DGX Cloud's and Kubeflow's launch scripts, SkyPilot's run script), a value is accepted
    only when bash reads it as exactly itself (:data:`validation.SHELL_WORD`): a ``(``, ``&``, tab or ``|``
    would run part of it as a command, in a background subshell, or make the script unparsable, and
    ft_launcher would silently get no config. The value goes to ``executor.env_vars``, the env every
    executor passes on (Lepton and Kubeflow drop ``run.Script(env=...)``).
    """
    if not isinstance(name, str) or _ENV_NAME.fullmatch(name) is None:
        raise ResiliencyConfigError(plugin, field, name, "an environment variable name")
    if not isinstance(value, str) or any(c in value for c in "\n\r\0"):
        raise ResiliencyConfigError(plugin, field or name, value, "a single-line string value for env var " + name)
    rules = for_executor(executor, plugin=plugin)
    if rules.env_in_shell and not is_shell_word(value):
        script = "the sbatch script" if is_slurm(executor) else f"the {rules.label} job's launch script"
        raise ResiliencyConfigError(
            plugin,
            field or name,
            value,
            f"a value made of {SHELL_WORD_TEXT}",
            detail=f"NeMo-Run writes 'export {name}=<value>' into {script} without quotes",
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
    or ``fatal``) and must not overwrite the one the user chose. On an executor that drops
    ``run.Script(env=...)`` (Lepton, Kubeflow) a value only there never reaches the job: that is an error
    saying where to move it, not a setting the plugin may count on.
    """
    if isinstance(task, run.Script) and task.env and name in task.env:
        rules = for_executor(executor)
        if not rules.task_env_reaches_job and str(executor.env_vars.get(name)) != str(task.env[name]):
            raise ResiliencyConfigError(
                "nemo-resiliency",
                f"task.env[{name!r}]",
                task.env[name],
                detail=(
                    f"NeMo-Run's {rules.label} drops run.Script(env=...) (only executor.env_vars reach the job), so "
                    f"this value would never be seen; move it to executor.env_vars"
                ),
            )
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


def claim_plugin(executor: Any, plugin: Any) -> None:
    """Record that ``plugin`` set up this job; a second plugin of the same class with other settings is an error
    naming both. Identical ones are one (a plugin listed twice is harmless); differing ones would each write part
    of the job (``FaultTolerancePlugin(spare_nodes=1)`` beside a plain one: spares and the silent-node timeout that
    must stay off with them), and which part wins would depend on their order."""
    name = type(plugin).__name__
    mine = {f.name: getattr(plugin, f.name) for f in dataclasses.fields(plugin) if f.init}
    claims = _claims(executor)
    key = f"plugin:{type(plugin).__module__}.{name}"
    if key in claims and claims[key][0] != mine:
        theirs = claims[key][0]
        differ = [f for f in mine if mine[f] != theirs.get(f)]
        shown = ", ".join(f"{f}={theirs.get(f)!r} vs {mine[f]!r}" for f in differ[:4])
        raise ResiliencyConfigError(
            name,
            differ[0],
            mine[differ[0]],
            f"the same settings as the other {name} on this job, or one {name}",
            detail=f"two {name}s with different settings on one job ({shown}): remove one or make them agree",
        )
    claims[key] = (mine, name)


def set_retries(executor: Any, retries: int, *, plugin: str, field: str, default: int | None = None) -> None:
    """Job-level retries (Slurm requeues), only where the executor honours them.

    Where it does not (every executor but Slurm and Local; on Docker ``retries > 0`` even stops the
    container from being created), nothing is set: the plugin's ``default`` value gets a logged note, any
    other value greater than 0 is a ``ResiliencyConfigError`` (the user asked for something that cannot
    happen there). (A user value equal to the default cannot be told from the default.)

    What "never silently overwritten" means for a value NeMo-Run cannot tell from its default: the executor's
    ``retries`` defaults to 0, so ``retries=0`` written by the user and no ``retries`` at all look the same on
    the executor, and both are read as "not set": the plugin's ``num_job_retries_on_failure`` applies. To
    have no job retries, set ``num_job_retries_on_failure=0`` on the plugin. Any other executor value the
    plugin's disagrees with is an error. Between plugins nothing is ambiguous: the value a plugin set is
    recorded, so two plugins asking for different retries (0 and 2 included) is an error naming both.
    """
    if isinstance(retries, bool) or not isinstance(retries, int) or not 0 <= retries <= MAX_JOB_RETRIES:
        raise ResiliencyConfigError(plugin, field, retries, f"an integer in [0, {MAX_JOB_RETRIES}]")
    rules = for_executor(executor, plugin=plugin)
    if not rules.honours_retries:
        current = getattr(executor, "retries", 0) or 0
        if current and rules.retries_break_job:
            raise ResiliencyConfigError(
                plugin, "executor.retries", current, "0 on " + rules.label, detail=rules.retries_note
            )
        if retries == 0:
            return
        if retries == default:
            # Megatron Bridge's default (2) on every executor: an error would break every drop-in use off Slurm,
            # so it is a warning naming why, never silence (explain/doctor show the same rule).
            logger.warning(
                "%s: %s=%s not applied on %s: %s. Set %s.%s=0 to silence this",
                plugin,
                field,
                retries,
                rules.label,
                rules.retries_note,
                plugin,
                field,
            )
            return
        raise ResiliencyConfigError(
            plugin, field, retries, f"0 on {rules.label}", detail=f"{rules.retries_note}; set {plugin}.{field}=0"
        )
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
    executor: Any,
    wanted: FaultTolerance,
    *,
    plugin: str,
    must_stay_unset: dict[str, str] | None = None,
    plugin_fields: dict[str, str] | None = None,
) -> FaultTolerance:
    """Make ``executor.launcher`` NVRx's ft_launcher with ``wanted``'s settings.

    A plain torchrun launcher (``"torchrun"``, ``run.Torchrun``) is upgraded, keeping its rendezvous and
    nsys settings. An existing ``run.FaultTolerance`` keeps its values, and any that contradict ``wanted``
    are reported. ``must_stay_unset`` names launcher fields (with the reason) that the plugin leaves unset on
    purpose: a user's value there would reach ft_launcher and is refused rather than passed on.
    ``plugin_fields`` maps a launcher field to the plugin field that sets it (``max_restarts`` ->
    ``num_in_job_restarts``), so a conflict names the field the user can change on the plugin. An executor
    set-up where ft_launcher cannot work is refused first (its rules class says why). Last, the executor's
    rules give the launcher a rendezvous port of the job's own where NeMo-Run's default would be shared
    (:meth:`~nemo_resiliency_plugins.core.executors.base.ExecutorRules.own_rendezvous_port`).
    """
    check_fault_tolerance(executor, plugin=plugin)
    launcher = _merge_ft_launcher(
        executor, wanted, plugin=plugin, must_stay_unset=must_stay_unset, plugin_fields=plugin_fields
    )
    for_executor(executor, plugin=plugin).own_rendezvous_port(launcher, plugin=plugin)
    return launcher


def _merge_ft_launcher(
    executor: Any,
    wanted: FaultTolerance,
    *,
    plugin: str,
    must_stay_unset: dict[str, str] | None,
    plugin_fields: dict[str, str] | None,
) -> FaultTolerance:
    """:func:`install_ft_launcher`'s merge of ``wanted`` into the executor's launcher."""
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
            ours = (plugin_fields or {}).get(f.name)
            if ours is None:
                raise ResiliencyConfigError(
                    plugin,
                    f"launcher.{f.name}",
                    mine,
                    detail=f"the executor's run.FaultTolerance launcher already has {f.name}={theirs!r}",
                )
            raise ResiliencyConfigError(
                plugin,
                ours,
                mine,
                f"{theirs!r}, the executor's run.FaultTolerance({f.name}={theirs!r})",
                detail=(
                    f"{plugin}.{ours} sets ft_launcher's {f.name}, and the executor's launcher already has "
                    f"{f.name}={theirs!r}: set {plugin}({ours}={theirs!r}), or remove {f.name} from "
                    "run.FaultTolerance (a user value is never silently replaced)"
                ),
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
    if hasattr(current, "template_inline") or hasattr(current, "template_path"):
        raise ResiliencyConfigError(
            plugin,
            "executor.launcher",
            type(current).__name__,
            "None, 'torchrun', run.Torchrun or run.FaultTolerance",
            detail=template_launcher_cost(current),
        )
    raise ResiliencyConfigError(
        plugin,
        "executor.launcher",
        current,
        "None, 'torchrun', run.Torchrun or run.FaultTolerance",
        detail=f"{plugin} replaces the launcher with NVRx's ft_launcher and cannot merge a {type(current).__name__}",
    )


#: What the fix of the SlurmTemplate refusal costs on Megatron Bridge's performance executor (docs/dropin.md
#: quotes it; tests/contract/test_dropin_round2.py checks that the page and the refusal say the same).
NUMA_BINDING_LOST = (
    "the NUMA binding is lost: Megatron Bridge's slurm_executor ends pre_cmds with 'numactl --cpunodebind=... "
    "--membind=...', a prefix of the training command that binds each rank's CPUs and memory to its GPU's NUMA "
    "node. ft_launcher starts the ranks itself, a prefix has no command to run in setup_lines, and this package "
    "binds no rank: the ranks run unbound, with no error (slower host-to-GPU copies and data loading)"
)


def template_launcher_cost(launcher: Any) -> str:
    """Why a ``SlurmTemplate``-style launcher (a ``bash -c '<pre_cmds> <command>'`` wrapper) is refused, its fix,
    and exactly what the fix drops: a ``numactl`` prefix in its ``pre_cmds`` binds the ranks, and nothing of
    ft_launcher's keeps that binding."""
    pre = str((getattr(launcher, "template_vars", None) or {}).get("pre_cmds", "") or "")
    commands = [c.strip() for c in pre.split(";") if c.strip()]
    prefixes = [c for c in commands if c.split()[0] == "numactl"]
    others = [c for c in commands if c not in prefixes]
    text = (
        f"executor.launcher is a {type(launcher).__name__}: ft_launcher cannot run inside its bash -c wrapper, and "
        "Megatron Bridge's plugin silently replaces the wrapper (and its pre_cmds) with run.FaultTolerance. Fix: "
        "executor.launcher = None (or 'torchrun')"
    )
    if others:
        text += ", and move the other pre_cmds into executor.setup_lines (" + " ; ".join(others)[:300] + ")"
    if prefixes:
        text += f". What the fix costs here: {NUMA_BINDING_LOST}. Found: {prefixes[0]!r}"
    return text


def deliver_file(executor: Any, name: str, content: str, *, plugin: str) -> str:
    """Make ``content`` readable by the job as a file of its own; returns the path the job sees.

    NeMo-Run has no hook that ships an extra file with a job, and ``Experiment.dryrun()`` deletes the
    experiment directory, so only executors with a route of their own have one (see their rules classes):
    LocalExecutor writes it here, content-addressed under ``$NEMORUN_HOME/resiliency/``; SlurmExecutor has the
    sbatch script write it into the job directory (a quoted heredoc in ``setup_lines``).
    """
    if _FILE_NAME.fullmatch(name) is None:
        raise ResiliencyConfigError(plugin, None, detail=f"internal: bad file name {name!r}")
    return for_executor(executor, plugin=plugin).deliver_file(name, content, plugin=plugin)


def ships_files(executor: Any, *, plugin: str) -> bool:
    """Whether :func:`deliver_file` can get a file of this package to ``executor``'s job."""
    return for_executor(executor, plugin=plugin).ships_files


def deliver_ft_config(executor: Any, name: str, content: str, *, plugin: str) -> str:
    """Make NVRx's config file (``content``, with a ``fault_tolerance:`` mapping) reach ft_launcher; returns
    the path for ``PET_FT_CFG_PATH``.

    Local and Slurm: :func:`deliver_file`. Every other executor: the mapping rides in the launcher
    (:class:`~nemo_resiliency_plugins.core.executors.FaultToleranceWithSections`), which NeMo-Run writes to
    ``<job_dir>/configs/<job>_executor.yaml`` and ships with the job; the path is where that file is on the
    node (each executor's rules class says).
    """
    if _FILE_NAME.fullmatch(name) is None:
        raise ResiliencyConfigError(plugin, None, detail=f"internal: bad file name {name!r}")
    return for_executor(executor, plugin=plugin).deliver_ft_config(content, plugin=plugin)


def set_infrastructure_rank(task: Any, executor: Any, *, plugin: str) -> None:
    """Give NVRx a unique infrastructure rank per node, or none at all.

    ``GROUP_RANK=0`` is set only where the job is one node and the executor sets no rank of its own
    (Slurm: ``SLURM_PROCID``; DGX Cloud's template exports ``GROUP_RANK`` per node). On several nodes the
    variable is left unset, so NVRx assigns ranks itself; a constant ``GROUP_RANK`` the user put in the env
    of a multi-node job is refused (NVRx fails with "Duplicate infrastructure ranks detected").
    """
    rules = for_executor(executor, plugin=plugin)
    value = rules.group_rank()
    if value is not None:
        set_env(task, executor, "GROUP_RANK", value, plugin=plugin)
        return
    if rules.sets_group_rank or rules.infra_rank_env:
        return
    user = get_env(task, executor, "GROUP_RANK")
    if user is not None:
        raise ResiliencyConfigError(
            plugin,
            "GROUP_RANK",
            user,
            f"unset on a {rules.nodes()}-node {rules.label} job",
            detail=(
                "one GROUP_RANK in the job's env is the same on every node, and NVRx's rendezvous then fails with "
                "'Duplicate infrastructure ranks detected'; remove it (NVRx assigns ranks itself)"
            ),
        )


def add_spare_nodes(executor: Any, spares: int, *, plugin: str, field: str, task: Any = None) -> None:
    """Hold ``spares`` nodes as NVRx hot spares (Slurm: the allocation, srun's flags and ft_launcher's ``--nnodes``
    range; refused elsewhere by the executor's rules). Call before the launcher is installed: a one-node job with a
    spare is a multi-node launch (its rendezvous port and infrastructure ranks follow from the node count)."""
    if spares == 0:
        return
    task_env = dict(task.env or {}) if isinstance(task, run.Script) else None
    for_executor(executor, plugin=plugin).add_spare_nodes(spares, plugin=plugin, field=field, task_env=task_env)


def install_spare_nodes_block(executor: Any, spares: int, *, plugin: str) -> None:
    """The sbatch block that turns ft_launcher's node count into the active:all range (after the requeue guard)."""
    if spares == 0:
        return
    _spare_nodes_block(executor, plugin=plugin)


def check_fault_tolerance(executor: Any, *, plugin: str) -> None:
    """Refuse, by name with the reason and the alternative, an executor set-up where ft_launcher cannot work."""
    rules = for_executor(executor, plugin=plugin)
    rules.check_fault_tolerance(plugin)
    if rules.state_note:
        logger.info("%s: %s", plugin, rules.state_note)


def set_diagnostics_env(task: Any, executor: Any, *, plugin: str, field: str) -> None:
    """Give the ranks what makes a hang attributable (:mod:`.diagnostics`), in the job directory as the job sees it
    (the executor's rules say where).

    ``PYTHONFAULTHANDLER`` and the dump-on-timeout switch are required (a user value that turns them off is refused
    by :func:`set_env`). The flight recorder's buffer size and dump path are the user's where the user set them:
    a bigger buffer is theirs to choose, and a dump path of theirs is kept and logged (``report`` then does not
    find the dumps in the job directory)."""
    from nemo_resiliency_plugins.core import diagnostics

    rules = for_executor(executor, plugin=plugin)
    job_dir = rules.job_dir_in_job()
    logger.info("%s: %s", plugin, diagnostics.flight_recorder_note(job_dir))
    if rules.rank_log_prefix_env:  # Slurm: the ranks' lines name their global rank (the guard reads the dumps)
        set_env(task, executor, rules.rank_log_prefix_env, "1", plugin=plugin, field=field)
    for name, value in diagnostics.diagnostics_env(job_dir).items():
        user = get_env(task, executor, name)
        if user is not None and user != value and name in diagnostics.BUFFER_VARS + diagnostics.DUMP_FILE_VARS:
            logger.info("%s: %s=%s kept (the user's; %s would set %s)", plugin, name, user, field, value)
            continue
        set_env(task, executor, name, value, plugin=plugin, field=field)


def platform_stop(executor: Any, *, plugin: str) -> tuple[float | None, str]:
    """How the platform stops this executor's job: (SIGTERM -> SIGKILL grace in seconds if the executor says,
    a sentence for the user). For plugins whose mechanism depends on that signal (preemption)."""
    rules = for_executor(executor, plugin=plugin)
    return rules.grace_period_s(plugin), rules.preemption_note


def note_no_effect(executor: Any, *, plugin: str, field: str, why: str) -> None:
    """Say (in the log) that a plugin setting does nothing on this executor, and why; never silence."""
    rules = for_executor(executor, plugin=plugin)
    logger.info("%s.%s has no effect on %s: %s", plugin, field, rules.label, why)


def require_program(task: Any, executor: Any, program: str, *, plugin: str, fix: str) -> None:
    """On executors that run here, fail at setup (not as a FAILED job) when ``program`` is not on PATH."""
    if not for_executor(executor, plugin=plugin).runs_here:
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
