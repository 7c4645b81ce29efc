"""FaultTolerancePlugin: NVRx fault tolerance (hang detection, in-job restarts, job retries) for a
Megatron Bridge job, in one line.

Drop-in for ``megatron.bridge.recipes.run_plugins.FaultTolerancePlugin`` (same field names, defaults and
meaning), and more: every ``FaultToleranceConfig`` field, section timeouts that actually reach the rank
monitor, the launcher knobs users tune, and checks for the NeMo-Run <-> NVRx traps.

Sections vs heartbeats. Megatron Bridge's training loop reports *sections* (``setup``, ``step``,
``checkpointing``) to NVRx and never sends heartbeats. NVRx monitors only the sections its launcher was
told about, and applies heartbeat timeouts independently: handing ``initial_rank_heartbeat_timeout`` to a
section-based job gets a healthy job killed once that timeout passes (measured with NVRx 0.7.0), and
``calc_ft_timeouts`` with undeclared sections crashes (``KeyError: 'step'``). So with the default
``workload_style="sections"`` this plugin declares ``section_timeouts`` + ``out_of_section_timeout`` and keeps
``initial_rank_heartbeat_timeout`` / ``rank_heartbeat_timeout`` away from the launcher; they are kept as fields
for drop-in compatibility and are used only with ``workload_style="heartbeats"`` (workloads that call
``RankMonitorClient.send_heartbeat()``, such as custom loops).
"""

from __future__ import annotations

import difflib
import logging
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import nemo_run as run

from nemo_resiliency_plugins.core import autoresume, executor_config, front_program, nvrx_launcher, task_config
from nemo_resiliency_plugins.core import launcher_args as launcher_flags
from nemo_resiliency_plugins.core.known_bugs import guard_known_bugs
from nemo_resiliency_plugins.core.validation import Checker, KnownKeywords
from nemo_resiliency_plugins.errors import ResiliencyConfigError

logger = logging.getLogger(__name__)

MEGATRON_BRIDGE_SECTIONS = ("setup", "step", "checkpointing")


@dataclass
class FaultTolerancePluginScriptArgs:
    """What ``script_args_converter_fn`` receives (a superset of Megatron Bridge's class of this name)."""

    enable_ft_package: bool
    calc_ft_timeouts: bool
    simulate_fault: bool = False
    simulated_fault_type: str = "random"
    simulated_fault_rank: int | None = None
    simulated_fault_base_delay: float = 0


@dataclass(kw_only=True)
class FaultTolerancePlugin(KnownKeywords, run.Plugin):
    """Run the job under NVRx's ``ft_launcher`` with Megatron Bridge's fault tolerance switched on.

    Megatron Bridge's fields (same defaults):
        enable_ft_package: ``ft.enable_ft_package`` - the training loop reports to the rank monitor.
        calc_ft_timeouts: ``ft.calc_ft_timeouts`` - measure section times and save tighter timeouts to
            ``<checkpoint.save>/ft_state.json``, loaded by the next run of the job.
        num_in_job_restarts: ``ft_launcher --max-restarts``: restarts of the worker group inside one job.
            0 means no restart (NeMo-Run drops a 0 flag; ``PET_MAX_RESTARTS`` carries it).
        num_job_retries_on_failure: ``executor.retries``: new Slurm jobs (requeues) after a failed one.
            An executor ``retries`` of 0 is NeMo-Run's default and cannot be told from "not set": it is
            replaced by this value; use ``num_job_retries_on_failure=0`` for no retries. Set only where the
            executor honours it (Slurm, Local): elsewhere the default is left out with a logged note and
            another value is an error (on Docker, retries stop the container from being created).
        initial_rank_heartbeat_timeout / rank_heartbeat_timeout: heartbeat timeouts, passed to the
            launcher only with ``workload_style="heartbeats"`` (see the module docstring for why).
        script_args_converter_fn: for ``run.Script`` tasks whose script does not take Hydra overrides;
            receives :class:`FaultTolerancePluginScriptArgs`, returns the arguments to append.

    Megatron Bridge's ``FaultToleranceConfig`` fields: ``simulate_fault``, ``simulated_fault_type``
    (``rank_hung`` | ``rank_killed`` | ``random``), ``simulated_fault_rank``, ``simulated_fault_base_delay``.

    Launcher / rank monitor (NVRx ``ft_launcher``):
        workload_style: ``"sections"`` (Megatron Bridge, Megatron-LM) or ``"heartbeats"``.
        section_timeouts: seconds each section may stay open (Megatron Bridge's documented values by default).
        out_of_section_timeout: seconds allowed between sections (data loading, logging, eval set-up).
        workload_check_interval: how often the rank monitor checks (adds up to this much detection latency).
        rank_termination_signal: signal sent to a rank found hung. ``None`` (default): SIGKILL, or SIGABRT with
            ``diagnostics``.
        diagnostics: make a hang attributable after the fact. The ranks run with ``PYTHONFAULTHANDLER=1`` and NVRx
            stops a hung rank with SIGABRT, so Python writes every thread's stack into the rank's log before the
            rank ends; ``nemo-resiliency report`` reads them and names the ranks that were not in a collective
            (in a hang inside a collective, the ones the others waited for). PyTorch's collective flight
            recorder keeps each rank's last collectives and, when an NCCL collective outlives the process
            group's timeout, writes them to ``<job dir>/flight_recorder_rank_<rank>``; ``report`` names the
            ranks that never entered the collective the others waited in
            (:mod:`nemo_resiliency_plugins.core.diagnostics`). Off by default: SIGABRT writes a core file where
            the node's core-size limit allows one (a training rank's memory; set ``ulimit -c 0`` in
            ``executor.setup_lines`` on Slurm nodes that keep cores).
            The stack dump itself costs milliseconds, once, on a rank that is being stopped anyway; the
            recorder's cost per collective is measured in ``benchmarks/results/gpu/flight-recorder``.
        log_level: rank-monitor log level.
        max_no_progress_cycles: stop restarting after this many consecutive cycles without a new checkpoint
            (NVRx progress tracking; 0 or -1 disables it). ft_launcher then exits with NVRx's no-restart code
            (93) and the Slurm requeue guard does not requeue the job. NVRx counts progress from
            ``<checkpoint dir>/latest_checkpointed_iteration.txt``, the file Megatron Bridge writes after each
            completed save: the plugin points NVRx at it in the task's ``checkpoint.save`` directory.
        checkpoint_dir: the job's ``checkpoint.save`` directory when the task does not show it (a recipe
            built inside the script): where NVRx's progress tracker reads the iteration file. Without either,
            progress tracking cannot act (a warning, and an ``explain``/``doctor`` line, say so).
        exclude_failed_nodes: Slurm only. When a failed run is requeued, add the node whose task failed first
            (srun's ``srun: error: <node>: task <n>: ...`` line) to the job's excluded nodes, so the next run
            lands elsewhere, as long as the partition keeps enough nodes for the job. ``None`` (default) means on
            for jobs of more than one node (a one-node job has nowhere else to go on a small partition).
            Exact for a node lost with everything on it, and for a node that hangs as a whole (see
            ``silent_node_timeout``); for a rank hung inside a collective every rank waiting in it times out too,
            and srun may name a healthy node first: with ``diagnostics`` the ranks' stack dumps name the node of
            the rank the others waited for, and that node is excluded (docs: Slurm, "A failed node is left behind").
        silent_node_timeout: Slurm, with ``exclude_failed_nodes``, ``log_level`` INFO or DEBUG. After an NVRx
            section (or heartbeat) timeout on one node, a node whose launcher logs nothing for this many seconds
            is taken as hung as a whole (its monitor would have logged its own timeout): the job step is
            stopped and that node excluded. Without it such a job can block for good: when the hung node hosts
            the rendezvous store, NVRx 0.7's launcher on the healthy nodes waits in a TCPStore call that has no
            read timeout. ``None``: off (srun's first line names the node).

        spare_nodes: Slurm only. Hold this many nodes more than the job trains on, as NVRx hot spares: the
            allocation is ``executor.nodes + spare_nodes``, every node runs ft_launcher with ``--nnodes
            <executor.nodes>:<all>``, srun keeps the step when one node's task dies, and when a training node is
            lost a spare takes its place in the next rendezvous: the worker group restarts inside the same job from
            the last checkpoint (one of ``num_in_job_restarts``), with the same world size, no requeue and no
            queue wait. The requeue path (``num_job_retries_on_failure``, ``exclude_failed_nodes``) takes over when
            the spares or the restarts are used up: with no spare left, the launchers wait for the next round to
            fill up to NVRx's join timeout (600 s; ``NRP_SPARE_JOIN_TIMEOUT`` in ``executor.env_vars`` sets it,
            and it also bounds how far apart the launchers may start), then the job ends and is requeued. The
            first node of the allocation runs the sbatch script and hosts the rendezvous store: losing it ends the
            job (then the requeue path). A spare costs its nodes' time for the whole job. Each launcher is told
            whether it hosts the rendezvous store (only the first node does): the store host alone closes a
            rendezvous round and hands out the active ranks.

        nvrx_config: more keys of NVRx's ``FaultToleranceConfig`` for ft_launcher's config file, such as the node
            checks NVRx runs before a node may (re)join a rendezvous (``enable_nic_healthcheck``,
            ``enable_dist_storage_healthcheck`` with ``storage_healthcheck_path``, ``node_health_check_interval``,
            ``check_remaining_processes``) or ``segment`` for NVLink-domain-aware spares. Each key is checked against
            the installed NVRx's class (NVRx itself drops an unknown key without a word); keys the plugin writes from
            its own fields (section timeouts, the check interval, ...) are refused with the field to set.
        launcher_args: more ft_launcher flags, for NVRx launcher features that are flags only (``{"term-timeout":
            600}``, ``{"ft-enable-log-server": "true"}``; names without the leading dashes, a switch as ``True``).
            Each is checked against the installed NVRx's own argument parser (a flag it lacks is refused, naming its
            version), values must be plain shell words (they reach the launch line), and flags NeMo-Run's launcher
            or this plugin already writes are refused with the field that owns them. ``ft-scheduler-exclusion-dir``
            is refused: NVRx's scheduler exclusion assumes job arrays without requeue, the opposite of the requeue
            guard. Slurm only (:mod:`nemo_resiliency_plugins.core.launcher_args` says why).

    Autoresume: a restart only saves work if Megatron Bridge resumes from what the run saved, and Megatron
    Bridge 0.6.2 resumes only from ``checkpoint.load``. Where the task shows ``checkpoint.save``, an unset
    ``checkpoint.load`` is set to it and a different one is refused (:mod:`nemo_resiliency_plugins.core.autoresume`).
    """

    # Megatron Bridge's FaultTolerancePlugin fields, same defaults.
    enable_ft_package: bool = True
    calc_ft_timeouts: bool = True
    num_in_job_restarts: int = 3
    num_job_retries_on_failure: int = 2
    initial_rank_heartbeat_timeout: float | None = 1800
    rank_heartbeat_timeout: float | None = 300
    script_args_converter_fn: Callable[[FaultTolerancePluginScriptArgs], list[str]] | None = None
    # Megatron Bridge's FaultToleranceConfig fields.
    simulate_fault: bool = False
    simulated_fault_type: str = "random"
    simulated_fault_rank: int | None = None
    simulated_fault_base_delay: float = 0
    # What reaches NVRx's rank monitor.
    workload_style: str = "sections"
    section_timeouts: dict[str, float | None] = field(
        default_factory=lambda: {"setup": 600.0, "step": 180.0, "checkpointing": 420.0}
    )
    out_of_section_timeout: float | None = 300.0
    workload_check_interval: float = 5.0
    rank_termination_signal: str | None = None
    log_level: str = "INFO"
    max_no_progress_cycles: int = 3
    checkpoint_dir: str | None = None
    exclude_failed_nodes: bool | None = None
    silent_node_timeout: float | None = 60.0
    diagnostics: bool = False
    spare_nodes: int = 0
    nvrx_config: dict[str, Any] | None = None
    launcher_args: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        check = Checker(type(self).__name__)
        check.boolean("enable_ft_package", self.enable_ft_package)
        check.boolean("calc_ft_timeouts", self.calc_ft_timeouts)
        check.integer("num_in_job_restarts", self.num_in_job_restarts, min=0)
        check.integer(
            "num_job_retries_on_failure",
            self.num_job_retries_on_failure,
            min=0,
            max=executor_config.MAX_JOB_RETRIES,
        )
        check.number(
            "initial_rank_heartbeat_timeout", self.initial_rank_heartbeat_timeout, positive=True, optional=True
        )
        check.number("rank_heartbeat_timeout", self.rank_heartbeat_timeout, positive=True, optional=True)
        check.callable_or_none("script_args_converter_fn", self.script_args_converter_fn)
        check.boolean("simulate_fault", self.simulate_fault)
        check.choice("simulated_fault_type", self.simulated_fault_type, ("rank_hung", "rank_killed", "random"))
        if self.simulated_fault_rank is not None:
            check.integer("simulated_fault_rank", self.simulated_fault_rank, min=0)
        check.number("simulated_fault_base_delay", self.simulated_fault_base_delay, min=0)
        check.choice("workload_style", self.workload_style, ("sections", "heartbeats"))
        check.timeouts_mapping("section_timeouts", self.section_timeouts)
        check.number("out_of_section_timeout", self.out_of_section_timeout, positive=True, optional=True)
        check.number("workload_check_interval", self.workload_check_interval, positive=True)
        if self.rank_termination_signal is not None:
            check.signal_name("rank_termination_signal", self.rank_termination_signal)
        check.boolean("diagnostics", self.diagnostics)
        signal_set = self.rank_termination_signal is not None
        if self.diagnostics and signal_set and str(self.rank_termination_signal).upper() != "SIGABRT":
            check.fail(
                "rank_termination_signal",
                self.rank_termination_signal,
                "None or 'SIGABRT' with diagnostics=True",
                detail=(
                    "diagnostics has NVRx stop a hung rank with SIGABRT, which Python's faulthandler turns into a "
                    "stack dump; another signal ends the rank without one"
                ),
            )
        check.log_level("log_level", self.log_level)
        check.integer("max_no_progress_cycles", self.max_no_progress_cycles, min=-1)
        check.path("checkpoint_dir", self.checkpoint_dir, optional=True)
        if self.exclude_failed_nodes is not None:
            check.boolean("exclude_failed_nodes", self.exclude_failed_nodes)
        check.number(
            "silent_node_timeout", self.silent_node_timeout, min=3 * self.workload_check_interval, optional=True
        )
        check.integer("spare_nodes", self.spare_nodes, min=0)
        self._check_nvrx_config(check)
        self.launcher_words()  # refuses a flag NVRx's parser lacks, an owned flag or an unsafe value
        if self.spare_nodes and self.num_in_job_restarts == 0:
            check.fail(
                "spare_nodes",
                self.spare_nodes,
                "0 while num_in_job_restarts=0",
                detail=(
                    "a spare takes a lost node's place in ft_launcher's next rendezvous, which is an in-job restart; "
                    "with none allowed it would never be used (set num_in_job_restarts >= 1)"
                ),
            )

        if self.simulate_fault and not self.enable_ft_package:
            check.fail(
                "simulate_fault",
                True,
                "False while enable_ft_package=False",
                detail="Megatron Bridge only simulates faults when the FT package is enabled",
            )
        if self.workload_style == "sections" and self.calc_ft_timeouts:
            missing = [s for s in MEGATRON_BRIDGE_SECTIONS if s not in self.section_timeouts]
            if missing:
                check.fail(
                    "section_timeouts",
                    self.section_timeouts,
                    f"a timeout for each of {', '.join(MEGATRON_BRIDGE_SECTIONS)} when calc_ft_timeouts=True",
                    detail=(
                        f"missing {missing}: Megatron Bridge computes timeouts for these sections and NVRx raises "
                        "KeyError for an undeclared one. Declare them, or set calc_ft_timeouts=False"
                    ),
                )
        if (
            self.workload_style == "heartbeats"
            and self.initial_rank_heartbeat_timeout is None
            and (self.rank_heartbeat_timeout is None)
        ):
            check.fail(
                "rank_heartbeat_timeout",
                None,
                "a positive number with workload_style='heartbeats'",
                detail="a heartbeat-style workload with no heartbeat timeout has no hang detection",
            )

    def _check_nvrx_config(self, check: Checker) -> None:
        """Every key a field of the installed NVRx's FaultToleranceConfig that the plugin does not write itself, every
        value a scalar: NVRx reads the file with ``ignore_not_recognized=True``, so a wrong key would do nothing."""
        if self.nvrx_config is None:
            return
        if not isinstance(self.nvrx_config, dict):
            check.fail("nvrx_config", self.nvrx_config, "a dict of NVRx FaultToleranceConfig keys to values, or None")
        known, source = nvrx_launcher.config_keys()
        types = nvrx_launcher.config_key_types()
        for key, value in self.nvrx_config.items():
            if not isinstance(key, str) or key not in known:
                close = difflib.get_close_matches(str(key), sorted(known), n=1)
                check.fail(
                    "nvrx_config",
                    key,
                    "a field of NVRx's FaultToleranceConfig",
                    detail=f"not one of the {len(known)} keys of {source}"
                    + (f"; did you mean {close[0]!r}?" if close else "")
                    + " (NVRx would drop it without a word)",
                )
            if key in nvrx_launcher.OWNED_CONFIG_KEYS:
                check.fail(
                    "nvrx_config",
                    key,
                    "a key the plugin does not write itself",
                    detail=f"set FaultTolerancePlugin.{nvrx_launcher.OWNED_CONFIG_KEYS[key]} instead",
                )
            finite = not isinstance(value, float) or math.isfinite(value)
            if value is not None and (type(value) not in (bool, int, float, str) or not finite):
                check.fail(f"nvrx_config[{key!r}]", value, "a bool, int, float, string or None (one YAML scalar)")
            problem = nvrx_launcher.value_problem(types[key], value) if key in types else None
            if problem is not None:
                check.fail(f"nvrx_config[{key!r}]", value, problem)

    # ------------------------------------------------------------------------------------------- setup

    def setup(self, task: run.Partial | run.Script, executor: run.Executor) -> None:
        name = type(self).__name__
        executor_config.claim_plugin(executor, self)  # two of this plugin on one job must agree
        front_program.check_script_entrypoint(task, plugin=name)
        iteration_file = self._iteration_file(
            autoresume.ensure_autoresume(
                task,
                plugin=name,
                why="ft_launcher restarts and job retries",
                converter=self.script_args_converter_fn,
                declare=f"set {name}(checkpoint_dir=<the job's checkpoint.save>)",
            )
        )
        task_config.set_config_fields(
            task,
            "ft",
            self.config_values(),
            plugin=name,
            script_args=self.script_args(),
            script_args_converter_fn=self.script_args_converter_fn,
        )
        guard_known_bugs(task, plugin=name)  # Megatron-Bridge#5711 (known_bugs.py)
        # Before the launcher: spares make the launch multi-node (rendezvous port, infrastructure ranks).
        executor_config.add_spare_nodes(executor, self.spare_nodes, plugin=name, field="spare_nodes", task=task)
        heartbeats = self.workload_style == "heartbeats"
        launcher_settings: dict[str, Any] = dict(
            workload_check_interval=self.workload_check_interval,
            rank_termination_signal=self.termination_signal(),
            log_level=self.log_level,
            initial_rank_heartbeat_timeout=self.initial_rank_heartbeat_timeout if heartbeats else None,
            rank_heartbeat_timeout=self.rank_heartbeat_timeout if heartbeats else None,
        )
        # A section-based job must not get heartbeat timeouts from anywhere, the user's own launcher included.
        no_heartbeats = {
            f: (
                "with workload_style='sections' (Megatron Bridge) heartbeat timeouts kill a healthy job (it sends "
                "no heartbeats); remove it from run.FaultTolerance, or use workload_style='heartbeats'"
            )
            for f in ("initial_rank_heartbeat_timeout", "rank_heartbeat_timeout")
            if not heartbeats
        }
        executor_config.install_ft_launcher(
            executor,
            nvrx_launcher.launcher(max_restarts=self.num_in_job_restarts, **launcher_settings),
            plugin=name,
            must_stay_unset=no_heartbeats,
            plugin_fields={
                "max_restarts": "num_in_job_restarts",
                **{f: f for f in launcher_settings if f not in no_heartbeats},
            },
        )
        executor_config.set_retries(
            executor,
            self.num_job_retries_on_failure,
            plugin=name,
            field="num_job_retries_on_failure",
            default=type(self).__dataclass_fields__["num_job_retries_on_failure"].default,
        )
        # NeMo-Run's ft_launcher sbatch template would requeue a finished job forever (no finished flag).
        executor_config.guard_ft_requeue(executor, plugin=name)
        executor_config.install_spare_nodes_block(executor, self.spare_nodes, plugin=name)
        words = self.launcher_words()
        launcher_flags.install(
            executor, words, plugin=name, field="launcher_args", label=executor_config.executor_kind(executor)
        )
        if words:
            logger.info(
                "%s: ft_launcher also gets %s (launcher_args, checked against NVRx %s's parser)",
                name,
                " ".join(words),
                launcher_flags.nvrx_version(),
            )
        self._slurm_requeue_settings(task, executor)
        content = nvrx_launcher.config_file(
            section_timeouts=self.section_timeouts if not heartbeats else {},
            out_of_section_timeout=self.out_of_section_timeout if not heartbeats else None,
            max_no_progress_cycles=self.max_no_progress_cycles,
            checkpoint_iteration_file=iteration_file,
            extra=self.nvrx_config,
            plugin=name,
            **launcher_settings,
        )
        path = executor_config.deliver_ft_config(executor, "ft_launcher.yaml", content, plugin=name)
        executor_config.set_env(task, executor, nvrx_launcher.CONFIG_PATH_ENV, path, plugin=name)
        executor_config.set_env(
            task,
            executor,
            nvrx_launcher.MAX_RESTARTS_ENV,
            str(self.num_in_job_restarts),
            plugin=name,
            field="num_in_job_restarts",
        )
        if self.diagnostics:  # stack dumps on SIGABRT, the collective flight recorder (core/diagnostics.py)
            executor_config.set_diagnostics_env(task, executor, plugin=name, field="diagnostics")
        # NVRx's infrastructure rank: GROUP_RANK=0 on one node, never one value shared by several.
        executor_config.set_infrastructure_rank(task, executor, plugin=name)
        executor_config.require_program(
            task,
            executor,
            "ft_launcher",
            plugin=name,
            fix=(
                "install nvidia-resiliency-ext where the job runs (pip install 'nemo-resiliency-plugins[train]') "
                "or put its bin directory on PATH (executor.env_vars['PATH'])"
            ),
        )
        logger.info("%s: ft_launcher config at %s:\n%s", name, path, content)

    def launcher_words(self) -> list[str]:
        """The words ``launcher_args`` add to ft_launcher's line (empty without any), checked by
        :func:`nemo_resiliency_plugins.core.launcher_args.flag_words`; ``explain`` and ``doctor`` ask this."""
        return launcher_flags.flag_words(
            self.launcher_args, plugin=type(self).__name__, field="launcher_args", nvrx_config=self.nvrx_config
        )

    def termination_signal(self) -> str:
        """The signal NVRx's rank monitor sends a hung rank: the field, else SIGABRT with diagnostics, else SIGKILL."""
        if self.rank_termination_signal is not None:
            return self.rank_termination_signal.upper()
        return "SIGABRT" if self.diagnostics else "SIGKILL"

    def _slurm_requeue_settings(self, task: Any, executor: Any) -> None:
        """What the Slurm requeue guard reads from the job's environment: NVRx's no-restart exit code (never
        requeued) and whether to exclude the failed node on a requeue."""
        name = type(self).__name__
        if not executor_config.is_slurm(executor):
            if self.exclude_failed_nodes:
                raise ResiliencyConfigError(
                    name,
                    "exclude_failed_nodes",
                    True,
                    "None or False off Slurm",
                    detail=f"only a Slurm requeue can exclude nodes; a {executor_config.executor_kind(executor)} "
                    "job has no excluded-node list",
                )
            return
        code, source = nvrx_launcher.no_restart_exit_code()  # the installed NVRx's, where it is installed
        executor_config.set_env(task, executor, "NRP_NO_RESTART_EXIT_CODE", str(code), plugin=name)
        logger.debug("%s: NRP_NO_RESTART_EXIT_CODE=%s (%s)", name, code, source)
        exclude = self.exclude_failed_nodes
        if exclude is None:
            exclude = (executor_config.node_count(executor) or 1) > 1
        if exclude:
            executor_config.set_env(
                task, executor, "NRP_EXCLUDE_FAILED_NODES", "1", plugin=name, field="exclude_failed_nodes"
            )
        if not exclude or self.silent_node_timeout is None:
            return
        if self.spare_nodes:
            executor_config.note_no_effect(
                executor,
                plugin=name,
                field="silent_node_timeout",
                why=f"with spare_nodes={self.spare_nodes} a spare's launcher logs nothing while it waits, so a silent "
                "launcher is not a hung node",
            )
            return
        if self.log_level.upper() not in ("DEBUG", "INFO"):
            executor_config.note_no_effect(
                executor,
                plugin=name,
                field="silent_node_timeout",
                why=f"log_level={self.log_level!r} hides the launcher lines a healthy node logs when it joins a "
                "restart, so a silent node could not be told from a quiet one",
            )
            return
        executor_config.set_env(
            task,
            executor,
            "NRP_SILENT_NODE_TIMEOUT",
            str(int(math.ceil(self.silent_node_timeout))),
            plugin=name,
            field="silent_node_timeout",
        )

    def _iteration_file(self, dirs: autoresume.CheckpointDirs) -> str | None:
        """Where NVRx's progress tracker reads the last checkpointed iteration, or None when unknown."""
        name = type(self).__name__
        directory = autoresume.declared_checkpoint_dir(dirs, self.checkpoint_dir, plugin=name)
        if directory is None:
            if self.max_no_progress_cycles > 0:
                logger.warning(
                    "%s: max_no_progress_cycles=%d has no effect: NVRx's progress tracker needs the checkpoint "
                    "directory (it reads %s there) and the task does not show checkpoint.save. Set "
                    "FaultTolerancePlugin(checkpoint_dir=<the job's checkpoint.save>), or a crash that repeats "
                    "every cycle uses up every restart and retry",
                    name,
                    self.max_no_progress_cycles,
                    nvrx_launcher.ITERATION_FILE,
                )
            return None
        if self.max_no_progress_cycles <= 0:
            return None
        return os.path.join(directory, nvrx_launcher.ITERATION_FILE)

    def config_values(self) -> dict[str, Any]:
        """``ft.<field>`` -> value: what the plugin sets in Megatron Bridge's FaultToleranceConfig."""
        return {
            "enable_ft_package": self.enable_ft_package,
            "calc_ft_timeouts": self.calc_ft_timeouts,
            "simulate_fault": self.simulate_fault,
            "simulated_fault_type": self.simulated_fault_type,
            "simulated_fault_rank": self.simulated_fault_rank,
            "simulated_fault_base_delay": self.simulated_fault_base_delay,
        }

    def script_args(self) -> FaultTolerancePluginScriptArgs:
        return FaultTolerancePluginScriptArgs(**self.config_values())


__all__ = ["FaultTolerancePlugin", "FaultTolerancePluginScriptArgs", "ResiliencyConfigError"]
