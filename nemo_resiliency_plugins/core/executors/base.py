"""What every executor's rules class answers: how settings a plugin makes reach the job on that executor.

One small class per NeMo-Run executor (``local.py``, ``slurm.py``, ``docker.py`` ...), looked up by executor
type in :mod:`nemo_resiliency_plugins.core.executors` (the way NeMo-Run's ``core/execution/launcher.py`` maps
names to launcher classes). :mod:`nemo_resiliency_plugins.core.executor_config` keeps the mechanism plugins call
(``set_env``, ``set_retries``, ``install_ft_launcher`` ...) and asks these classes only the questions whose
answer depends on the executor. Each answer below is checked against NeMo-Run 0.11.1 and NVRx 0.7.0; the class
of an executor says where in NeMo-Run's code it comes from.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import yaml
from nemo_run.core.execution.launcher import FaultTolerance

from nemo_resiliency_plugins.core.validation import SHELL_WORD, SHELL_WORD_TEXT
from nemo_resiliency_plugins.errors import ResiliencyConfigError


def node_count(executor: Any) -> int | None:
    """How many nodes the job runs on, as the executor says (``nnodes()``); None when it cannot say.

    The one place the node count is read: a plugin that needs a default uses ``or 1``, a check that cannot be
    made without it says so.
    """
    try:
        return int(executor.nnodes())
    except (AttributeError, NotImplementedError, TypeError, ValueError):
        return None


#: The largest grace period a platform API takes (a signed 64-bit integer in Docker's and Kubernetes' APIs).
MAX_GRACE_S = 2**63 - 1


@dataclass(kw_only=True)
class FaultToleranceWithSections(FaultTolerance):
    """``run.FaultTolerance`` that also carries NVRx's ``fault_tolerance:`` mapping (section timeouts).

    NeMo-Run renders it exactly like ``run.FaultTolerance`` (``packaging.py`` tests ``isinstance``), and
    writes the executor, this launcher and its mapping included, to ``<job_dir>/configs/<job>_executor.yaml``,
    which it ships with the job on every executor that runs elsewhere. NVRx reads the first
    ``fault_tolerance`` mapping at any depth of the YAML that ``PET_FT_CFG_PATH`` names
    (``FaultToleranceConfig._find_fault_tol_section``), so pointing ft_launcher at that file hands the rank
    monitor the section timeouts with no file of our own to ship.
    """

    fault_tolerance: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclass(kw_only=True)
class ExecutorRules:
    """How one kind of executor delivers settings to its job. Subclasses override the class variables and the
    few methods whose answer differs; the defaults describe an executor that runs the job elsewhere.

    Class variables:
        env_in_shell: NeMo-Run writes ``executor.env_vars`` into a shell script as ``export NAME=value``
            without quotes, so a plugin's value must be a plain shell word there.
        task_env_reaches_job: ``run.Script(env=...)`` reaches the job. Lepton and Kubeflow drop it and pass
            only ``executor.env_vars``.
        honours_retries: NeMo-Run resubmits a failed job ``executor.retries`` times.
        retries_note: why not, when it does not.
        runs_here: the job runs on this machine (programs can be looked up on PATH at set-up).
        sets_group_rank: the executor's own launch script sets ``GROUP_RANK`` per node.
        infra_rank_env: the variable NVRx takes the node's infrastructure rank from, when not GROUP_RANK.
        preemption_note: what happens to a job the platform stops (signals, grace period).
        state_note: where NeMo-Run's own job state for this executor can be wrong, and where the truth is.
        default_grace_s: SIGTERM -> SIGKILL grace the platform gives a stopped job by default, if known.
        ships_files: :meth:`deliver_file` has a route for a file of this package to the job.
        retries_break_job: NeMo-Run's resubmission of a failed job breaks it here, so retries are refused.
        pid1_launch_script: the container's first process is NeMo-Run's bash launch script. The platform's
            SIGTERM goes to that process only, and a PID-namespace init with no handler for it never gets it
            (the kernel drops it; measured here with ``unshare --pid``): the ranks see nothing until SIGKILL.
        entry_route: :meth:`install_entry` can put the container entry
            (:mod:`nemo_resiliency_plugins.job.container_entry`) in front of that launch script.
        job_restarts: what brings a failed or stopped job back on this platform, and what stops a crash loop
            (for ``explain`` and the docs; ``retries_note`` says why ``executor.retries`` is not honoured).
        rank_log_prefix_env: with ``diagnostics=True``, the variable (value ``1``) that asks this executor's job
            script to prefix each rank's lines with its global rank, so that a stack dump names its node.
    """

    executor: Any
    label: ClassVar[str] = "executor"
    env_in_shell: ClassVar[bool] = True
    task_env_reaches_job: ClassVar[bool] = True
    honours_retries: ClassVar[bool] = False
    retries_note: ClassVar[str] = "NeMo-Run does not resubmit a failed job on this executor"
    runs_here: ClassVar[bool] = False
    sets_group_rank: ClassVar[bool] = False
    infra_rank_env: ClassVar[str | None] = None
    preemption_note: ClassVar[str] = ""
    state_note: ClassVar[str] = ""
    default_grace_s: ClassVar[float | None] = None
    pid1_launch_script: ClassVar[bool] = False
    ships_files: ClassVar[bool] = False
    retries_break_job: ClassVar[bool] = False
    rank_log_prefix_env: ClassVar[str | None] = None
    entry_route: ClassVar[bool] = False
    job_restarts: ClassVar[str] = ""

    # ------------------------------------------------------------------------------------- the job's shape

    def nodes(self) -> int:
        """The job's node count; 1 when the executor cannot say (one node is what it starts by default)."""
        return node_count(self.executor) or 1

    def grace_period_s(self, plugin: str = "nemo-resiliency") -> float | None:
        """Seconds between the platform's SIGTERM and its SIGKILL for this job, when the executor says.

        Executors whose grace period the user can set override this and read it with :meth:`grace_setting`.
        """
        return self.default_grace_s

    def grace_setting(self, settings: Any, key: str, field: str, *, plugin: str) -> float | None:
        """The grace period ``settings[key]`` sets (``field`` names it for the user), or the platform's default.

        The platforms take a whole number of seconds (Docker's ``StopTimeout`` and Kubernetes'
        ``terminationGracePeriodSeconds`` are integers in their APIs; a JSON ``10.5`` or ``"10"`` is refused when
        the container or pod is created). Anything else is refused here, by name, instead of being compared as a
        number: ``nan`` would pass every comparison silently and ``10**400`` cannot be one.
        """
        if settings is None:
            return self.default_grace_s
        if not isinstance(settings, Mapping):
            raise ResiliencyConfigError(plugin, field.split("[")[0], settings, "a dict (or None)")
        if key not in settings or settings[key] is None:
            return self.default_grace_s
        value = settings[key]
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_GRACE_S:
            raise ResiliencyConfigError(
                plugin,
                field,
                value,
                f"a whole number of seconds from 0 to {MAX_GRACE_S} ({self.label} sends SIGKILL that long after "
                "SIGTERM, and its API takes an integer)",
            )
        return float(value)

    # ------------------------------------------------------------------------------- fault tolerance

    def check_fault_tolerance(self, plugin: str) -> None:
        """Refuse, by name with the reason and the alternative, what cannot work here. Default: nothing."""

    def add_spare_nodes(self, spares: int, *, plugin: str, field: str, task_env: dict | None = None) -> None:
        """Hold ``spares`` nodes more than the job trains on, as NVRx hot spares. Only Slurm implements it."""
        raise ResiliencyConfigError(
            plugin,
            field,
            spares,
            "0 off Slurm",
            detail=(
                f"a hot spare is a node of the job's own allocation that runs NVRx's launcher without training, "
                f"ready to take a lost node's place; NeMo-Run's {self.label} has no such allocation (run.SlurmExecutor "
                "has; elsewhere a lost node is replaced by the platform's own restart)"
            ),
        )

    def group_rank(self) -> str | None:
        """The ``GROUP_RANK`` the plugin sets, or None to leave it alone.

        NVRx takes a node's infrastructure rank from ``SLURM_PROCID``, else ``GROUP_RANK``, else assigns one
        itself (``fault_tolerance/utils.py:get_infrastructure_rank``), and its rendezvous refuses two nodes
        with the same one ("Duplicate infrastructure ranks detected"). One value in the job's env is the
        same on every node, so it is right only for a one-node job.
        """
        if self.sets_group_rank or self.infra_rank_env:
            return None
        return "0" if self.nodes() == 1 else None

    def deliver_file(self, name: str, content: str, *, plugin: str) -> str:
        """A file of our own readable by the job; only executors that have a way to ship one implement it."""
        raise ResiliencyConfigError(
            plugin,
            "executor",
            self.label,
            detail=f"internal: {self.label} has no route for a file of this package; use its launcher config route",
        )

    def install_entry(self, *, plugin: str) -> str:
        """Make the container entry the container's first process, with NeMo-Run's launch command as its
        arguments; return where it runs from (for the log). Only executors with ``entry_route`` implement it.
        Idempotent: a second call leaves the settings as the first made them."""
        raise ResiliencyConfigError(
            plugin, "executor", self.label, detail=f"internal: {self.label} has no route for the container entry"
        )

    def set_command_once(self, settings: dict[str, Any], values: dict[str, Any], field: str, *, plugin: str) -> None:
        """Set the platform's container command keys ``values`` in ``settings`` unless the user set others there.

        A command of the user's there replaces NeMo-Run's launch script on this platform (the job would not run
        what NeMo-Run built), so the entry cannot go in front of it: refused by name (``field``, e.g.
        ``executor.custom_spec``) rather than overwritten, before any key is changed.
        """
        for key, value in values.items():
            current = settings.get(key)
            if current is not None and current != value:
                raise ResiliencyConfigError(
                    plugin,
                    f"{field}[{key!r}]",
                    current,
                    detail=(
                        f"a container command of your own replaces NeMo-Run's launch script on {self.label}, and "
                        "the container entry that passes the platform's SIGTERM to the ranks goes in front of that "
                        "script; leave it unset (put set-up steps in the image or the task)"
                    ),
                )
        settings.update(values)

    def entry_launch_path(self, directory: str, name: str, field: str, *, plugin: str) -> str:
        """``<directory>/<name>``, NeMo-Run's launch script on the job's storage, as one shell word; refused by
        ``field`` when the directory is not assigned yet or holds a character a shell line would split on."""
        self.require_assigned(field, directory, plugin=plugin)
        path = f"{directory.rstrip('/')}/{name}"
        if not path.startswith("/") or not directory or SHELL_WORD.fullmatch(path) is None:
            raise ResiliencyConfigError(
                plugin,
                field,
                directory,
                f"an absolute path of {SHELL_WORD_TEXT}",
                detail=f"the container entry starts NeMo-Run's launch script there in a shell line ({path!r})",
            )
        return path

    def configs_dir(self) -> str:
        """Where the job sees NeMo-Run's ``<job_dir>/configs`` (route of :class:`FaultToleranceWithSections`)."""
        raise NotImplementedError

    def own_rendezvous_port(self, launcher: Any, *, plugin: str) -> None:
        """Give ``launcher`` a rendezvous port of this job's own where the executor's default is one port shared
        by every job (see :class:`~nemo_resiliency_plugins.core.executors.slurm.SlurmRules`). Default: nothing."""

    def job_dir_in_job(self) -> str | None:
        """Where the job's processes see NeMo-Run's job directory (the folder ``nemo-resiliency report`` reads),
        or None where this executor gives them none. Default: the parent of :meth:`configs_dir`."""
        try:
            return os.path.dirname(self.configs_dir().rstrip("/"))
        except NotImplementedError:
            return None

    def deliver_ft_config(self, content: str, *, plugin: str) -> str:
        """Make NVRx's config (``content``, a YAML with a ``fault_tolerance:`` mapping) reach ft_launcher;
        return the path for ``PET_FT_CFG_PATH``.

        Default: carry the mapping in the launcher (:class:`FaultToleranceWithSections`), which NeMo-Run writes
        to ``<job_dir>/configs/<job>_executor.yaml`` and ships with the job. Caveat (NeMo-Run, not fixable
        here): for a ``run.Script`` task that file is written only while the Experiment keeps its default
        ``serialize_metadata_for_scripts=True``; without it ft_launcher stops at start with FileNotFoundError
        naming the path.
        """
        mapping = yaml.safe_load(content)["fault_tolerance"]
        self.require_assigned("executor.job_name", getattr(self.executor, "job_name", None), plugin=plugin)
        attach_ft_mapping(self.executor, mapping, plugin=plugin)
        return f"{self.configs_dir().rstrip('/')}/{self.executor.job_name}_executor.yaml"

    def require_assigned(self, field: str, value: Any, *, plugin: str) -> None:
        """Refuse, naming the real cause, a ``setup()`` on an executor NeMo-Run has not assigned to a job yet.

        ``Experiment.add`` calls ``executor.assign(...)`` before the plugins run; that sets ``job_name`` and the
        job directory on the platform's storage (``pvc_job_dir``, ``lepton_job_dir``), which the job's paths are
        built from. Called directly (as Megatron Bridge's unit tests call ``setup()``), those are not known yet.
        """
        if value:
            return
        raise ResiliencyConfigError(
            plugin,
            field,
            value,
            "a value NeMo-Run's executor.assign() sets when the task is added to an Experiment",
            detail=(
                f"setup() was called on a {self.label} that is not assigned to a job yet, and the paths the job "
                "reads its launch script and NVRx config from depend on the job's directory. Add the task with "
                "run.Experiment(...).add(task, executor=executor, plugins=[...]), or call "
                "executor.assign(exp_id, exp_dir, task_id, task_dir) before setup()"
            ),
        )


def attach_ft_mapping(executor: Any, mapping: dict[str, Any], *, plugin: str) -> None:
    """Turn the executor's ``run.FaultTolerance`` into a :class:`FaultToleranceWithSections` carrying
    ``mapping``, keeping every launcher field the user or a plugin set."""
    current = executor.launcher
    if isinstance(current, FaultToleranceWithSections):
        if current.fault_tolerance and current.fault_tolerance != mapping:
            raise ResiliencyConfigError(
                plugin,
                "executor.launcher.fault_tolerance",
                current.fault_tolerance,
                detail=f"the launcher already carries another NVRx config; {plugin} would write {mapping!r}",
            )
        current.fault_tolerance = dict(mapping)
        return
    if type(current) is not FaultTolerance:
        raise ResiliencyConfigError(
            plugin,
            "executor.launcher",
            type(current).__name__,
            "run.FaultTolerance",
            detail="the section timeouts travel in the launcher here, and a launcher subclass cannot be merged",
        )
    carried = {f.name: getattr(current, f.name) for f in dataclasses.fields(current) if f.init}
    executor.launcher = FaultToleranceWithSections(**carried, fault_tolerance=dict(mapping))
