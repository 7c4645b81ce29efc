"""InProcessRestartPlugin: NVRx in-process restart for a Megatron Bridge job, in one line.

In-process restart (``inprocess_restart`` in Megatron Bridge, ``nvidia_resiliency_ext.inprocess.Wrapper`` in
NVRx) re-runs the training function inside the *same* processes after a rank raises or stops making
progress: no launcher restart, no new Python interpreter, no Megatron Bridge re-import. Every rank tears down
its process group, waits at a barrier, and calls the training function again, which resumes from the last
checkpoint. A fault the processes cannot survive (a killed rank, a rank past ``hard_timeout``) is left to the
launcher; the recommended set-up pairs this plugin with :class:`~nemo_resiliency_plugins.FaultTolerancePlugin`,
whose ``ft_launcher`` restarts the worker group then (the combination Megatron Bridge's own CI runs).

What this plugin guarantees before anything is launched (all as ``ResiliencyConfigError``):

* NVRx's timeout ordering, which NVRx itself only checks when the job starts (``soft_timeout < hard_timeout <
  barrier_timeout``, ``heartbeat_interval < heartbeat_timeout < barrier_timeout``, the monitor intervals below
  the timeouts they serve).
* The NCCL watchdog rule: a collective on a process group must be allowed to hang longer than ``hard_timeout``,
  or the NCCL watchdog tears the process down before the in-process machinery can restart it. The process
  group timeout is Megatron Bridge's ``dist.distributed_timeout_minutes``; the plugin sets it when the task
  does not, and refuses a task value that breaks the rule.
* ``run.SlurmExecutor`` is refused: NeMo-Run's sbatch script runs ``srun --kill-on-bad-exit=1``, so one rank
  leaving ends every rank, and nothing waits for NVRx's monitor process (Megatron Bridge documents the Slurm
  executor as unsupported; the supported Slurm launch is ``srun --kill-on-bad-exit=0`` with NVRx's wait daemon).
* Warm reserves (``active_world_size`` below the executor's ranks, nodes x tasks per node): the surviving ranks
  must outlive a killed rank, which torchrun and NVRx 0.7's ft_launcher do not allow (both tear the worker group
  down on the first worker that fails; ft_launcher's ``min-healthy`` policy, which NVRx documents for this, is
  gone). Each rank then runs under :mod:`nemo_resiliency_plugins.job.rank_keeper`, which leaves a rank killed by a
  signal to NVRx (a reserve takes its place) and passes every other exit on. When no reserve is left, NVRx
  terminates the survivors and the launcher restarts the group (ft_launcher) or the job fails (torchrun).
* Combinations that cannot work are refused: a preemption set-up (``train.exit_signal_handler`` on the task,
  as PreemptionPlugin leaves it) and a second in-process restart plugin on the same job. The check sees what
  plugins listed *before* this one did; a PreemptionPlugin listed after it must check for
  ``inprocess_restart.enabled`` itself.

Not guarded (upstream, no knob reaches it): Megatron Bridge 0.6.2 binds two TCPStores on rank 0's host, its
coordination store on ``MASTER_PORT + 1`` and NVRx's wrapper store on ``MASTER_PORT + 2``
(``megatron/bridge/training/inprocess_restart.py``); ``InProcessRestartConfig`` has no port field. ``MASTER_PORT``
is chosen by the launcher, not by NeMo-Run's rendezvous endpoint: torch 2.14's torchrun hands the ranks the port of
a TCPStore it opens on port 0, NVRx's ft_launcher a port it found free and released, on one node and on many
(measured: a fixed ``--rdzv-endpoint localhost:P`` gave a different random ``MASTER_PORT`` on every launch). Both
neighbours are random ports of the kernel's ephemeral range, the range it also hands to every outgoing connection,
so a busy host may hold one: the job then fails at start with ``DistNetworkError ... EADDRINUSE`` (seen once in
this project's CI). No setting of NeMo-Run's launchers, of torch or of Megatron Bridge moves them, so the plugin
says so when it sets a job up and ``nemo-resiliency doctor`` repeats it; a relaunch draws another port
(docs/races.md).
"""

from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass
from typing import Any

import nemo_run as run

from nemo_resiliency_plugins.core import autoresume, executor_config, front_program, task_config
from nemo_resiliency_plugins.core.known_bugs import guard_known_bugs
from nemo_resiliency_plugins.core.validation import Checker, KnownKeywords, is_finite_number
from nemo_resiliency_plugins.errors import ResiliencyConfigError

# NVLS: the variable, who is known to set it and why it must be off are the rank keeper's (it checks the job's
# final environment at rank start), so that set-up and rank start say the same.
from nemo_resiliency_plugins.job.rank_keeper import NVLS_ENV, NVLS_SETTER, NVLS_WHY

logger = logging.getLogger(__name__)

#: NVRx's own notice (``docs/source/release-notes.md`` of nvidia-resiliency-ext: v0.6 "deprecated", v0.7 "remains
#: deprecated. New deployments should use in-job restart"). The plugin keeps working; users are told where the
#: supported path is. ``doctor`` and ``explain`` print :func:`deprecation_notice`, so the text lives here only.
NVRX_DEPRECATION = (
    "NVRx deprecates in-process restart (nvidia-resiliency-ext release notes, v0.6 and v0.7: it is no longer the "
    "focus of the fast-restart solution, bug fixes case by case; new deployments should use in-job restart "
    "through ft_launcher)"
)
ALTERNATIVE = (
    "FaultTolerancePlugin's in-job restart (num_in_job_restarts, a new worker group in the same job) with "
    "spare_nodes=k hot spares for a lost node"
)


def deprecation_notice() -> str:
    """What a user of this plugin is told at set-up, by ``doctor`` and by ``explain``."""
    return f"{NVRX_DEPRECATION}. It still works here; the supported alternative is {ALTERNATIVE}"


# Megatron Bridge's DistributedInitConfig.distributed_timeout_minutes default (checked by a contract test).
MB_DEFAULT_DISTRIBUTED_TIMEOUT_MINUTES = 10
# NVRx's documented margin between hard_timeout and the process-group (NCCL watchdog) timeout.
WATCHDOG_MARGIN_S = 60
# Megatron Bridge warns unless TORCH_CPP_LOG_LEVEL is one of these (c10d store-wait messages otherwise).
QUIET_CPP_LOG_LEVELS = ("error", "fatal")
# Environment NVRx's in-process restart documentation requires on every rank.
REQUIRED_ENV = {
    # A CUDA error must surface as a Python exception the wrapper can catch, not a process abort.
    "TORCH_NCCL_RETHROW_CUDA_ERRORS": "0",
    # NVLink SHARP buffers cannot be torn down and re-created inside a living process.
    "NCCL_NVLS_ENABLE": "0",
}


def nvls_conflict_detail(value: Any) -> str:
    """Why NVLS on and in-process restart cannot share a job: the one text of set-up and of the rank keeper."""
    return (
        f"the job's environment has {NVLS_ENV}={value!r} (set by another plugin or the user, {NVLS_SETTER}); "
        f"InProcessRestartPlugin needs {NVLS_ENV}=0: {NVLS_WHY}. Drop user_buffer_registration (or that setting) "
        "or in-process restart"
    )


def env_problems(task: Any, executor: Any) -> dict[str, Any]:
    """The variables in-process restart needs that the job does not have as required: name -> the job's value.

    The one statement of the rule: :meth:`InProcessRestartPlugin.setup` sets what this lists, and ``doctor``
    reports what it lists on a job that was built another way.
    """
    wrong = {}
    level = executor_config.get_env(task, executor, "TORCH_CPP_LOG_LEVEL")
    if level not in QUIET_CPP_LOG_LEVELS:
        wrong["TORCH_CPP_LOG_LEVEL"] = level
    for name, value in REQUIRED_ENV.items():
        if str(executor_config.get_env(task, executor, name)) != value:
            wrong[name] = executor_config.get_env(task, executor, name)
    return wrong


# Megatron Bridge's store ports (see the module docstring): what the plugin cannot choose, said once per job set-up.
STORE_PORTS_NOTE = (
    "Megatron Bridge binds its in-process restart stores on MASTER_PORT+1 and MASTER_PORT+2 of rank 0's host, and "
    "the launcher (torchrun, ft_launcher) picks MASTER_PORT at random in the ephemeral port range whatever the "
    "rendezvous endpoint; no setting moves them. If another socket on that host holds one, the job fails at start "
    "with EADDRINUSE: relaunch it (another port is drawn)"
)
# Set on the executor by setup(): a second in-process restart plugin on the same job sees it.
MARKER_ENV = "NRP_INPROCESS_RESTART_PLUGIN"


@dataclass(kw_only=True)
class InProcessRestartPlugin(KnownKeywords, run.Plugin):
    """Switch on Megatron Bridge's in-process restart (``ConfigContainer.inprocess_restart``).

    Every field of Megatron Bridge's ``InProcessRestartConfig``, with its defaults, except ``enabled``, which
    defaults to True here (attaching the plugin is the switch; ``enabled=False`` writes ``enabled=false`` and
    nothing else). All times are seconds.

    Fields Megatron Bridge passes to NVRx's ``inprocess.Wrapper``:
        soft_timeout / hard_timeout: no progress for this long -> restart in-process / terminate the rank
            (SIGTERM, then SIGKILL ``termination_grace_time`` later; the launcher takes over).
        heartbeat_interval / heartbeat_timeout: a rank silent for ``heartbeat_timeout`` is declared dead.
        barrier_timeout: the restart barrier every rank must reach.
        completion_timeout: the barrier at the end of training.
        monitor_thread_interval / monitor_process_interval: how often the in-process monitor thread and the
            separate monitor process look.
        last_call_wait: time other ranks get to report their own failure before a restart starts.
        termination_grace_time: SIGTERM -> SIGKILL gap.
        granularity: ``"node"`` (restart whole nodes; the rank layout follows ``torch.cuda.device_count()``) or
            ``"rank"``. With a reserve, ``"node"`` needs whole spare nodes: more than one node, and
            ``active_world_size`` a multiple of the tasks per node.
        active_world_size: ranks that train; the rest of the allocation is a warm reserve (None: all). Megatron
            Bridge builds NVRx's ``Tree`` rank assignment with ``min_ranks = max_ranks = active_world_size``: a
            killed active rank is replaced by a reserve; once the healthy ranks fall below it, every rank is
            terminated and the launcher takes over.
        empty_cuda_cache: free the CUDA cache while restarting.
        max_rank_faults: stop restarting a rank after this many faults (NVRx ``FaultCounter``): the rank is
            then terminated like a killed one and consumes a reserve (or, with none left, ends the in-process
            phase).
        monitor_process_logdir: directory for NVRx's monitor-process log (absolute path).

    Fields Megatron Bridge 0.6 accepts but does NOT pass on, so only their default takes effect (a different
    value is refused rather than silently ignored):
        max_iterations: the wrapper's ``RetryController`` gets no limit; bound restarts with ``max_rank_faults``.
        progress_watchdog_interval: NVRx runs its progress watchdog at its own 1 s default.
    ``monitor_process_logdir`` is used by Megatron Bridge only on the rank whose ``SLURM_PROCID`` is 0; on an
    executor that sets no ``SLURM_PROCID`` it would be ignored and is refused at set-up.
    """

    enabled: bool = True
    max_iterations: int | None = None
    monitor_thread_interval: float = 1.0
    monitor_process_interval: float = 1.0
    progress_watchdog_interval: float = 1.0
    heartbeat_interval: float = 30.0
    soft_timeout: float = 60.0
    hard_timeout: float = 90.0
    heartbeat_timeout: float = 60.0
    barrier_timeout: float = 120.0
    completion_timeout: float = 120.0
    last_call_wait: float = 1.0
    termination_grace_time: float = 1.0
    granularity: str = "node"
    active_world_size: int | None = None
    empty_cuda_cache: bool = True
    max_rank_faults: int | None = None
    monitor_process_logdir: str | None = None

    def __post_init__(self) -> None:
        check = Checker(type(self).__name__)
        check.boolean("enabled", self.enabled)
        if self.max_iterations is not None:
            check.integer("max_iterations", self.max_iterations, min=1)
            check.fail(
                "max_iterations",
                self.max_iterations,
                "None",
                detail=(
                    "Megatron Bridge does not pass max_iterations to NVRx (its RetryController gets no limit), so "
                    "the value would be silently ignored. Bound restarts with max_rank_faults, or with "
                    "FaultTolerancePlugin(num_in_job_restarts=...) for the launcher"
                ),
            )
        for name in (
            "monitor_thread_interval",
            "monitor_process_interval",
            "progress_watchdog_interval",
            "heartbeat_interval",
            "soft_timeout",
            "hard_timeout",
            "heartbeat_timeout",
            "barrier_timeout",
            "completion_timeout",
            "last_call_wait",
            "termination_grace_time",
        ):
            check.number(name, getattr(self, name), positive=True)
        if self.progress_watchdog_interval != 1.0:
            check.fail(
                "progress_watchdog_interval",
                self.progress_watchdog_interval,
                "1.0 (the only value that takes effect)",
                detail=(
                    "Megatron Bridge does not pass progress_watchdog_interval to NVRx, which runs the progress "
                    "watchdog at its own 1 s default; another value would be silently ignored"
                ),
            )
        check.choice("granularity", self.granularity, ("node", "rank"))
        if self.active_world_size is not None:
            check.integer("active_world_size", self.active_world_size, min=1)
        check.boolean("empty_cuda_cache", self.empty_cuda_cache)
        if self.max_rank_faults is not None:
            check.integer("max_rank_faults", self.max_rank_faults, min=0)
        check.path("monitor_process_logdir", self.monitor_process_logdir, optional=True)
        if self.monitor_process_logdir is not None and not os.path.isabs(self.monitor_process_logdir):
            check.fail(
                "monitor_process_logdir",
                self.monitor_process_logdir,
                "an absolute path or None",
                detail="NVRx refuses a relative monitor-process log file path when the job starts",
            )
        self._check_ordering(check)

    def _check_ordering(self, check: Checker) -> None:
        """NVRx's ``Wrapper`` asserts these when the job starts; here they fail on the launching host instead."""
        rules = [
            ("soft_timeout", "hard_timeout", "an in-process restart must be tried before the rank is terminated"),
            ("hard_timeout", "barrier_timeout", "a terminated rank must be noticed before the restart barrier ends"),
            ("heartbeat_interval", "heartbeat_timeout", "several heartbeats must fit in the heartbeat timeout"),
            ("heartbeat_timeout", "barrier_timeout", "a dead rank must be declared before the barrier times out"),
            ("monitor_process_interval", "heartbeat_timeout", "the monitor process must look within the timeout"),
            ("monitor_process_interval", "soft_timeout", "the monitor process must look within the timeout"),
            ("monitor_process_interval", "barrier_timeout", "the monitor process must look within the timeout"),
            ("monitor_thread_interval", "soft_timeout", "the monitor thread must look within the timeout"),
            ("progress_watchdog_interval", "soft_timeout", "progress must be sampled within the timeout"),
        ]
        for smaller, larger, why in rules:
            a, b = getattr(self, smaller), getattr(self, larger)
            if not a < b:
                check.fail(
                    smaller,
                    a,
                    f"less than {larger} ({b})",
                    detail=f"NVRx requires {smaller} < {larger}: {why}",
                )

    # ------------------------------------------------------------------------------------------- setup

    def setup(self, task: run.Partial | run.Script, executor: run.Executor) -> None:
        name = type(self).__name__
        executor_config.claim_plugin(executor, self)  # two of this plugin on one job must agree
        if not self.enabled:
            task_config.set_config_fields(task, "inprocess_restart", {"enabled": False}, plugin=name)
            return
        self._refuse_unsupported(task, executor, name)
        reserves = self._check_world_size(executor, name)
        self._check_monitor_logdir(task, executor, name)
        autoresume.ensure_autoresume(task, plugin=name, why="in-process restarts (and a launcher restart after them)")
        task_config.set_config_fields(task, "inprocess_restart", self.config_values(), plugin=name)
        guard_known_bugs(task, plugin=name)  # Megatron-Bridge#5761, #5187, #5842 (known_bugs.py)
        logger.warning("%s: %s", name, deprecation_notice())
        self._apply_watchdog_rule(task, name)

        problems = env_problems(task, executor)
        if problems.get(NVLS_ENV) is not None:
            raise ResiliencyConfigError(
                name,
                f"executor.env_vars[{NVLS_ENV!r}]",
                problems[NVLS_ENV],
                "'0'",
                detail=nvls_conflict_detail(problems[NVLS_ENV]),
            )
        for env_name in problems:  # another user value is refused by set_env, naming both
            executor_config.set_env(task, executor, env_name, REQUIRED_ENV.get(env_name, "error"), plugin=name)
        # Megatron Bridge reads MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE raw; without a launcher a LocalExecutor
        # starts one plain process with none of them. A launcher the user (or FaultTolerancePlugin) chose stays.
        if executor_config.default_launcher(executor, "torchrun"):
            logger.info("%s: executor.launcher='torchrun' (none was set)", name)
        executor_config.set_env(task, executor, MARKER_ENV, "1", plugin=name)
        logger.info("%s: %s", name, STORE_PORTS_NOTE)
        if reserves:
            self._check_ft_timeouts_leave_room(task, name)
            # A killed rank must not make the launcher tear down the survivors (see the module docstring).
            front_program.install_rank_keeper(task, executor, plugin=name, field="active_world_size")
            logger.info("%s: %d active rank(s), %d warm reserve(s)", name, self.active_world_size, reserves)

    def config_values(self) -> dict[str, Any]:
        """What goes into ``ConfigContainer.inprocess_restart`` (every ``InProcessRestartConfig`` field)."""
        return {
            "enabled": self.enabled,
            "max_iterations": self.max_iterations,
            "monitor_thread_interval": float(self.monitor_thread_interval),
            "monitor_process_interval": float(self.monitor_process_interval),
            "progress_watchdog_interval": float(self.progress_watchdog_interval),
            "heartbeat_interval": float(self.heartbeat_interval),
            "soft_timeout": float(self.soft_timeout),
            "hard_timeout": float(self.hard_timeout),
            "heartbeat_timeout": float(self.heartbeat_timeout),
            "barrier_timeout": float(self.barrier_timeout),
            "completion_timeout": float(self.completion_timeout),
            "last_call_wait": float(self.last_call_wait),
            "termination_grace_time": float(self.termination_grace_time),
            "granularity": self.granularity,
            "active_world_size": self.active_world_size,
            "empty_cuda_cache": self.empty_cuda_cache,
            "max_rank_faults": self.max_rank_faults,
            "monitor_process_logdir": self.monitor_process_logdir,
        }

    def minimum_watchdog_minutes(self) -> int:
        """NVRx's recommendation, ``hard_timeout`` + 60 s, in whole minutes (Megatron Bridge's unit)."""
        return math.ceil((self.hard_timeout + WATCHDOG_MARGIN_S) / 60)

    def watchdog_minutes(self) -> int:
        """The process-group timeout set when the task has none: Megatron Bridge's default, or more if needed.

        Never lower than the default: a shorter timeout would also cut short slow but healthy collectives.
        """
        return max(MB_DEFAULT_DISTRIBUTED_TIMEOUT_MINUTES, self.minimum_watchdog_minutes())

    def _apply_watchdog_rule(self, task: Any, name: str) -> list[task_config.Change]:
        current = task_config.read_config_field(task, "dist", "distributed_timeout_minutes", plugin=name)
        if current is None:
            return task_config.set_config_fields(
                task, "dist", {"distributed_timeout_minutes": self.watchdog_minutes()}, plugin=name
            )
        if not is_finite_number(current):
            raise ResiliencyConfigError(
                name,
                "dist.distributed_timeout_minutes",
                current,
                "a number of minutes",
                detail="the task sets the process-group timeout to something that is not a number",
            )
        if current * 60 <= self.hard_timeout:
            raise ResiliencyConfigError(
                name,
                "hard_timeout",
                self.hard_timeout,
                f"less than the process-group timeout dist.distributed_timeout_minutes={current} ({current * 60:g} s)",
                detail=(
                    "the NCCL watchdog would abort a rank stuck in a collective after "
                    f"{current * 60:g} s, before in-process restart's hard_timeout of {self.hard_timeout:g} s acts. "
                    f"Raise dist.distributed_timeout_minutes to at least {self.minimum_watchdog_minutes()} "
                    f"(hard_timeout + {WATCHDOG_MARGIN_S} s), remove it from the task (the plugin then sets it), or "
                    "lower hard_timeout"
                ),
            )
        return []

    def _check_world_size(self, executor: Any, name: str) -> int:
        """The number of warm reserve ranks (0 without ``active_world_size``), checked against the executor."""
        if self.active_world_size is None:
            return 0
        kind = executor_config.executor_kind(executor)
        nodes = executor_config.training_node_count(executor)
        try:
            per_node = int(executor.nproc_per_node())
            if nodes is None:
                raise ValueError("no node count")
        except Exception:  # an executor that cannot say how many ranks it starts
            raise ResiliencyConfigError(
                name,
                "active_world_size",
                self.active_world_size,
                "None on an executor that cannot say how many ranks it starts",
                detail=f"the {kind} gives no nnodes()/nproc_per_node(), so the reserve cannot be checked",
            ) from None
        world = nodes * per_node
        if self.active_world_size > world:
            raise ResiliencyConfigError(
                name,
                "active_world_size",
                self.active_world_size,
                f"at most the {world} ranks the {kind} starts ({nodes} node(s) x {per_node} tasks per node)",
                detail="NVRx's rank assignment would wait for ranks that never come",
            )
        reserves = world - self.active_world_size
        if reserves and self.granularity == "node":
            if nodes == 1:
                raise ResiliencyConfigError(
                    name,
                    "granularity",
                    self.granularity,
                    "'rank' for a reserve on a single node",
                    detail=(
                        f"with granularity='node' Megatron Bridge groups ranks by host, {per_node} per node "
                        "(torch.cuda.device_count()), and a reserve is a whole spare node; this "
                        f"{kind} has one node, so active_world_size={self.active_world_size} of {world} leaves "
                        "no spare node"
                    ),
                )
            if self.active_world_size % per_node:
                raise ResiliencyConfigError(
                    name,
                    "active_world_size",
                    self.active_world_size,
                    f"a multiple of the {per_node} tasks per node with granularity='node'",
                    detail="a node with fewer active ranks than its GPUs is terminated whole by NVRx's Tree",
                )
        return reserves

    def _check_ft_timeouts_leave_room(self, task: Any, name: str) -> None:
        """With a reserve, ft_launcher's rank monitors must not kill the survivors while NVRx restarts them."""
        if task_config.read_config_field(task, "ft", "calc_ft_timeouts", plugin=name) is True:
            raise ResiliencyConfigError(
                name,
                "active_world_size",
                self.active_world_size,
                detail=(
                    "a warm reserve with ft.calc_ft_timeouts=True (FaultTolerancePlugin's default): the section "
                    "timeouts Megatron Bridge calculates from healthy steps (about a second per step) are shorter "
                    "than an in-process restart, so ft_launcher's rank monitor kills the surviving ranks while NVRx "
                    "hands the dead rank's place to the reserve. Use FaultTolerancePlugin(calc_ft_timeouts=False) "
                    f"with section timeouts above barrier_timeout ({self.barrier_timeout:g} s)"
                ),
            )

    def _check_monitor_logdir(self, task: Any, executor: Any, name: str) -> None:
        if self.monitor_process_logdir is None:
            return
        if executor_config.get_env(task, executor, "SLURM_PROCID") is None:
            raise ResiliencyConfigError(
                name,
                "monitor_process_logdir",
                self.monitor_process_logdir,
                "None on an executor that sets no SLURM_PROCID",
                detail=(
                    "Megatron Bridge writes the monitor-process log only on the rank whose SLURM_PROCID is 0; on "
                    f"this {executor_config.executor_kind(executor)} no rank has one, so the setting would be "
                    "silently ignored"
                ),
            )

    def _refuse_unsupported(self, task: Any, executor: Any, name: str) -> None:
        if executor_config.is_slurm(executor):
            raise ResiliencyConfigError(
                name,
                None,
                detail=(
                    "in-process restart cannot run under run.SlurmExecutor: NeMo-Run's sbatch script launches the "
                    "ranks with 'srun --kill-on-bad-exit=1' (srun_args can only add flags), so the first rank that "
                    "leaves ends every rank, and nothing waits for NVRx's monitor process. Supported alternatives: "
                    "(1) launch the job "
                    "yourself with 'srun --kill-on-bad-exit=0 python -m nvidia_resiliency_ext.inprocess.wait_daemon "
                    "--monitor-process-logfile=<logdir>/monitor_${SLURM_JOB_ID}_$(hostname)_${SLURM_PROCID}_"
                    "${SLURM_LOCALID}.log -- python train.py ...' (NVRx's wait daemon), or (2) use a non-Slurm "
                    "executor such as run.LocalExecutor, ideally with FaultTolerancePlugin so that a rank the "
                    "processes cannot recover is restarted by ft_launcher"
                ),
            )
        if executor_config.get_env(task, executor, MARKER_ENV) is not None:
            raise ResiliencyConfigError(
                name,
                None,
                detail=(
                    "a second in-process restart plugin on the same job: NVRx's wrapper can wrap the training "
                    "function once, and two plugins would fight over one inprocess_restart config. Keep one"
                ),
            )
        # PreemptionPlugin's other trace, executor.signal, exists only on run.SlurmExecutor, refused above.
        if task_config.read_config_field(task, "train", "exit_signal_handler", plugin=type(self).__name__) is True:
            raise ResiliencyConfigError(
                name,
                None,
                detail=(
                    "cannot be combined with a preemption set-up (train.exit_signal_handler=True on the task, as "
                    "PreemptionPlugin leaves it): the "
                    "exit-signal handler turns SIGTERM into checkpoint-and-exit at the end of a step, while NVRx's "
                    "monitor process uses SIGTERM to terminate a rank past hard_timeout, which never ends its step; "
                    "and Megatron Bridge releases the signal handler on every in-process restart, so preemption "
                    "signals after the first restart are not caught. Use one of the two; the recommended partner "
                    "is FaultTolerancePlugin"
                ),
            )


__all__ = ["InProcessRestartPlugin", "ResiliencyConfigError"]
