"""PreemptionPlugin: save a checkpoint and exit cleanly when the scheduler says time is up.

Drop-in for ``megatron.bridge.recipes.run_plugins.PreemptionPlugin`` (same fields, defaults and meaning):
on a ``SlurmExecutor`` it asks Slurm for a signal ``preempt_time`` seconds before the time limit, and on
every executor it switches on Megatron Bridge's exit handler (``train.exit_signal_handler``), which checks
for the signal after each step, saves a checkpoint and exits 0. Other schedulers (Kubernetes, Lepton, a
local run stopped with ``kill``) send SIGTERM too, so the handler is kept there; no Slurm field is set, the
plugin logs that ``preempt_time`` has no effect, and where the executor exposes the platform's SIGTERM ->
SIGKILL grace period (Kubeflow's ``terminationGracePeriodSeconds``, 30 s by default; Docker's stop timeout)
it warns when ``ft_state.json`` says one step plus one save takes longer. In a container whose first process
is NeMo-Run's bash launch script (which drops the platform's SIGTERM), it puts this package's container entry
in front of it (:mod:`nemo_resiliency_plugins.core.container_entry`: Docker, DGX Cloud, Lepton, Kubeflow with a
PVC), and would warn (``PreemptionSignalWarning``) on an executor with no route to do so (none of NeMo-Run
0.11.1's).

What it does differently, each point measured or checked against Megatron Bridge 0.6.2, NeMo-Run 0.11.1,
NVRx 0.7.0 and Slurm 22.05 (the local cluster of ``.ci/slurm-up``):

* ``#SBATCH --signal=B:TERM@<preempt_time>``, not Megatron Bridge's ``TERM@<preempt_time>``. A plain
  ``--signal`` makes Slurm signal every process of the job step; under ``ft_launcher`` that includes NVRx's
  rank monitors, which close on SIGTERM, and the ranks' next FT section message (Megatron Bridge's
  ``on_checkpointing_start/end`` around the save) fails with ``RankMonitorClientError: ... Broken pipe``:
  the ranks exit 1 and the preemption checkpoint is lost (seen on the local Slurm). With ``B:`` only the
  batch shell gets the signal, and the plugin's ``setup_lines`` forward it to the steps' *task* processes
  (:func:`nemo_resiliency_plugins.core.executor_config.forward_batch_signal_to_tasks`): to ``ft_launcher``,
  which passes it to the ranks while the monitors stay up, or to the ranks themselves, without a launcher and
  under ``torchrun`` (which exits 1 after passing a signal on: a failed run to NeMo-Run's plain template).
* With ``FaultTolerancePlugin`` (NeMo-Run's ft_launcher sbatch template), a run that exited 0 after the
  signal is requeued to continue, and a run that exited 0 without it is marked finished instead of being
  requeued for ever (:func:`nemo_resiliency_plugins.core.executor_config.guard_ft_requeue`). Without
  FaultTolerancePlugin NeMo-Run's plain template requeues only failed runs (while ``retries`` >
  ``SLURM_RESTART_COUNT``, left as NeMo-Run set it); the same guard requeues a run that saved and exited 0 on
  the signal, so training continues in the requeued job (Megatron Bridge's plugin: the job ends COMPLETED).
* The signal reaches the process that acts on it under every launcher shape: the launcher, or, under a shell
  wrapper (a ``SlurmTemplate``'s ``bash -c '...'``, as in Megatron Bridge's own ``scripts/performance``), the
  first non-shell process under it (``core/sbatch/forward_signal.sh``). See docs/dropin.md.
* ``exit_signal`` (default ``SIGTERM``) is written to ``train.exit_signal`` as the signal's *number*
  (``train.exit_signal=15``): Megatron Bridge's parser turns ``SIGTERM`` into the string ``'SIGTERM'``, and
  ``DistributedSignalHandler`` then fails with "'str' object cannot be interpreted as an integer". The same
  signal goes to Slurm, so the two cannot disagree.
* Only signals a launcher passes on are allowed (SIGTERM, SIGINT, SIGHUP, SIGQUIT): ``torchrun`` and NVRx's
  ``ft_launcher`` catch exactly these (``TORCHELASTIC_SIGNALS_TO_HANDLE``) and forward them to the ranks;
  any other signal's default action kills the launcher and the save never happens.
* ``preempt_time`` is checked against the executor's time limit (a signal asked for at or before the start
  never helps), and at ``setup()`` against one step plus one checkpoint save when the job's checkpoint
  directory holds Megatron Bridge's ``ft_state.json`` (computed FT timeouts): shorter gives a warning.
* ``enable_exit_handler_for_data_loader=True`` with ``enable_exit_handler=False`` is an error (Megatron
  Bridge's plugin drops it silently).

Time budget. Slurm sends the signal between ``preempt_time`` and ``preempt_time + 60`` seconds before the
limit (slurmctld checks every ~30 s), and kills the job at the limit (SIGTERM, then SIGKILL after
``KillWait``). ``ft_launcher`` forwards the signal and waits ``--term-timeout`` (1800 s by default) before
it SIGKILLs its ranks, so the time limit, not the launcher, bounds the save: ``preempt_time`` must cover the
rest of the current step plus one checkpoint save. (``torchrun`` is not signalled: its ranks are.)
"""

from __future__ import annotations

import json
import logging
import os
import signal as _signal
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import nemo_run as run

from nemo_resiliency_plugins.core import autoresume, container_entry, executor_config, task_config
from nemo_resiliency_plugins.core.validation import Checker, KnownKeywords
from nemo_resiliency_plugins.errors import ResiliencyConfigError
from nemo_resiliency_plugins.local_checkpoint import local_checkpoints_on

logger = logging.getLogger(__name__)

#: Signals that torchrun / ft_launcher catch and forward to the ranks (torch's TORCHELASTIC_SIGNALS_TO_HANDLE).
FORWARDED_SIGNALS = ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT")
#: Slurm's limit for the ``@sig_time`` part of ``--signal`` (seconds).
SLURM_MAX_SIGNAL_TIME = 65535
#: NVRx's default ``safety_factor``: computed section timeouts are the longest observed time times this.
NVRX_SAFETY_FACTOR = 5.0
FT_STATE_FILE = "ft_state.json"


class PreemptionTimeWarning(UserWarning):
    """``preempt_time`` may be too short for one step plus one checkpoint save."""


class PreemptionSignalWarning(UserWarning):
    """The platform's stop signal does not reach the ranks on this executor (see the message for the fix)."""


@dataclass
class PreemptionPluginScriptArgs:
    """What ``script_args_converter_fn`` receives (a superset of Megatron Bridge's class of this name)."""

    enable_exit_handler: bool
    enable_exit_handler_for_data_loader: bool
    exit_signal: _signal.Signals = _signal.SIGTERM


@dataclass(kw_only=True)
class PreemptionPlugin(KnownKeywords, run.Plugin):
    """Checkpoint and exit 0 on the scheduler's signal, before the job is killed.

    Megatron Bridge's fields (same defaults):
        preempt_time: seconds before the Slurm time limit at which Slurm sends ``exit_signal``
            (``executor.signal = "TERM@<preempt_time>"``). Must cover the rest of a step plus a checkpoint save.
        enable_exit_handler: ``train.exit_signal_handler``: check for the signal after every step, save, exit 0.
        enable_exit_handler_for_data_loader: ``train.exit_signal_handler_for_dataloader``: data-loader workers
            catch the signal too, so they do not die before the main process has saved.
        script_args_converter_fn: for ``run.Script`` tasks whose script does not take Hydra overrides;
            receives :class:`PreemptionPluginScriptArgs`, returns the arguments to append.

    Added:
        exit_signal: the signal, by name (``"SIGTERM"``, ``"SIGINT"``, ``"SIGHUP"``, ``"SIGQUIT"``) or as a
            ``signal.Signals``; written to ``train.exit_signal`` and to Slurm's ``--signal``.
        checkpoint_dir: the job's ``checkpoint.save`` directory when the task does not show it (a script that
            builds its recipe inside, or takes its own flags such as Megatron Bridge's ``--save_dir``): where
            the plugin reads ``ft_state.json`` for the step-plus-save check. Without either, the plugin cannot
            check that the run after a preemption resumes from the save: a warning, and an ``explain``/``doctor``
            line, say so; the job is built as Megatron Bridge's plugin builds it.
    """

    # Megatron Bridge's PreemptionPlugin fields, same defaults.
    preempt_time: int = 60
    enable_exit_handler: bool = True
    enable_exit_handler_for_data_loader: bool = False
    script_args_converter_fn: Callable[[PreemptionPluginScriptArgs], list[str]] | None = None
    # Megatron Bridge's TrainingConfig.exit_signal.
    exit_signal: str | _signal.Signals = "SIGTERM"
    checkpoint_dir: str | None = None

    def __post_init__(self) -> None:
        check = Checker(type(self).__name__)
        check.path("checkpoint_dir", self.checkpoint_dir, optional=True)
        check.integer("preempt_time", self.preempt_time, min=1, max=SLURM_MAX_SIGNAL_TIME)
        if type(self.preempt_time) is not int:  # an IntEnum (e.g. a signal) would reach sbatch by its name
            check.fail("preempt_time", self.preempt_time, f"a plain int in [1, {SLURM_MAX_SIGNAL_TIME}]")
        check.boolean("enable_exit_handler", self.enable_exit_handler)
        check.boolean("enable_exit_handler_for_data_loader", self.enable_exit_handler_for_data_loader)
        check.callable_or_none("script_args_converter_fn", self.script_args_converter_fn)
        name = self.exit_signal.name if isinstance(self.exit_signal, _signal.Signals) else self.exit_signal
        if not isinstance(name, str) or name.upper() not in FORWARDED_SIGNALS:
            check.fail(
                "exit_signal",
                self.exit_signal,
                "one of " + ", ".join(FORWARDED_SIGNALS),
                detail=(
                    "torchrun and ft_launcher forward only these to the ranks; another signal kills the launcher "
                    "before the ranks can save"
                ),
            )
        if self.enable_exit_handler_for_data_loader and not self.enable_exit_handler:
            check.fail(
                "enable_exit_handler_for_data_loader",
                True,
                "False while enable_exit_handler=False",
                detail=(
                    "without the exit handler the training process is killed by the signal and nothing is saved; "
                    "set enable_exit_handler=True or leave this False"
                ),
            )

    @property
    def signal(self) -> _signal.Signals:
        """The exit signal as ``signal.Signals`` (what ``TrainingConfig.exit_signal`` holds)."""
        if isinstance(self.exit_signal, _signal.Signals):
            return self.exit_signal
        return _signal.Signals[self.exit_signal.upper()]

    @property
    def slurm_signal(self) -> str:
        """``executor.signal`` for Slurm: ``B:TERM@60``, to the batch shell, which forwards it to the step's
        task processes only (see ``executor_config.forward_batch_signal_to_tasks`` for why not ``TERM@60``)."""
        return f"B:{self.signal.name.removeprefix('SIG')}@{self.preempt_time}"

    # ------------------------------------------------------------------------------------------- setup

    def setup(self, task: run.Partial | run.Script, executor: run.Executor) -> None:
        name = type(self).__name__
        executor_config.claim_plugin(executor, self)  # two of this plugin on one job must agree
        if task_config.read_config_field(
            task, "inprocess_restart", "enabled", plugin=name
        ) is True or executor_config.get_env(task, executor, "NRP_INPROCESS_RESTART_PLUGIN"):
            raise ResiliencyConfigError(
                name,
                None,
                detail=(
                    "cannot be combined with InProcessRestartPlugin on the same task: Megatron Bridge's exit "
                    "handler and NVRx's in-process wrapper both act on the signal (see InProcessRestartPlugin)"
                ),
            )
        if not self.enable_exit_handler and local_checkpoints_on(task, plugin=name):
            raise ResiliencyConfigError(
                name,
                "enable_exit_handler",
                False,
                "True when the task writes local checkpoints (LocalCheckpointPlugin)",
                detail="the exit handler is what saves a persistent checkpoint on the signal; without it the job "
                "ends with only node-local checkpoints, which a requeue onto other nodes cannot read",
            )
        checkpoint_dir = self.checkpoint_dir
        if self.enable_exit_handler:
            # The whole point is a checkpoint at the signal that the next run resumes from: refuse what the task
            # shows to be wrong; where it does not show its checkpoint directory (Megatron Bridge's own
            # scripts/performance passes --save_dir, a flag of its own), warn, as Megatron Bridge's plugin builds it.
            dirs = autoresume.ensure_autoresume(
                task,
                plugin=name,
                why="the run after a preemption (requeue or resubmission)",
                converter=self.script_args_converter_fn,
                declare=f"set {name}(checkpoint_dir=<the job's checkpoint.save>)",
            )
            checkpoint_dir = autoresume.declared_checkpoint_dir(dirs, self.checkpoint_dir, plugin=name)
            task_config.set_config_fields(
                task,
                "train",
                {
                    "exit_signal_handler": True,
                    "exit_signal_handler_for_dataloader": self.enable_exit_handler_for_data_loader,
                    "exit_signal": self.signal,
                },
                plugin=name,
                script_args=self.script_args(),
                script_args_converter_fn=self.script_args_converter_fn,
            )
        if executor_config.is_slurm(executor):
            self._check_time_limit(executor)
            executor_config.set_slurm_field(executor, "signal", self.slurm_signal, plugin=name, field="preempt_time")
            executor_config.forward_batch_signal_to_tasks(executor, self.signal.name.removeprefix("SIG"), plugin=name)
            executor_config.guard_ft_requeue(executor, plugin=name)
            self._warn_if_too_short(task, checkpoint_dir)
        else:
            executor_config.note_no_effect(
                executor,
                plugin=name,
                field="preempt_time",
                why=(
                    "only Slurm can be asked for a signal before a time limit; the exit handler still saves on a "
                    "SIGTERM the platform sends"
                ),
            )
            self._warn_if_grace_too_short(task, executor, checkpoint_dir)
            if self.enable_exit_handler:
                # Every container executor whose first process is the launch script: the entry passes SIGTERM on.
                entry = container_entry.install_container_entry(executor, plugin=name)
                if entry is not None:
                    logger.info(
                        "%s: the container's first process is %s %s, which passes the platform's SIGTERM to the "
                        "launcher (NeMo-Run's bash launch script would drop it)",
                        name,
                        container_entry.INTERPRETER,
                        entry,
                    )
                lost = container_entry.signal_entry_problem(executor, plugin=name)
                if lost:
                    warnings.warn(f"{name}: {lost}", PreemptionSignalWarning, stacklevel=2)

    def script_args(self) -> PreemptionPluginScriptArgs:
        return PreemptionPluginScriptArgs(
            enable_exit_handler=self.enable_exit_handler,
            enable_exit_handler_for_data_loader=self.enable_exit_handler_for_data_loader,
            exit_signal=self.signal,
        )

    def _check_time_limit(self, executor: Any) -> None:
        name = type(self).__name__
        try:
            limit = executor_config.slurm_time_limit_seconds(executor.time)
        except ValueError:
            raise ResiliencyConfigError(
                name,
                "executor.time",
                executor.time,
                "a Slurm time limit such as '04:00:00', '90', '1-00:00:00' or 'UNLIMITED'",
                detail="preempt_time is checked against it",
            ) from None
        if limit is not None and self.preempt_time >= limit:
            raise ResiliencyConfigError(
                name,
                "preempt_time",
                self.preempt_time,
                f"fewer seconds than the executor's time limit ({executor.time!r} = {limit} s)",
                detail="Slurm would send the signal at or before the job starts",
            )

    def _checkpoint_dir(self, task: Any, declared: str | None) -> Any:
        """Where ``ft_state.json`` is: the task's ``checkpoint.save``, else the declared ``checkpoint_dir``."""
        shown = task_config.read_config_field(task, "checkpoint", "save", plugin=type(self).__name__)
        return shown if shown else declared

    def _warn_if_grace_too_short(self, task: Any, executor: Any, declared: str | None = None) -> None:
        """Off Slurm the platform's SIGTERM -> SIGKILL grace period, not ``preempt_time``, bounds the save:
        warn when ``ft_state.json`` says one step plus one save takes longer; log what the platform does."""
        name = type(self).__name__
        grace, how = executor_config.platform_stop(executor, plugin=name)
        estimate = step_plus_save_seconds(self._checkpoint_dir(task, declared))
        if grace is not None and estimate is not None and estimate > grace:
            message = _grace_message(name, grace, estimate, how)
            warnings.warn(message, PreemptionTimeWarning, stacklevel=3)
            logger.warning(message)
        elif how:
            logger.info("%s: %s", name, how)

    def _warn_if_too_short(self, task: Any, declared: str | None = None) -> None:
        """Warn when ``ft_state.json`` says one step plus one save may take longer than ``preempt_time``."""
        estimate = step_plus_save_seconds(self._checkpoint_dir(task, declared))
        if estimate is None or self.preempt_time >= estimate:
            return
        message = (
            f"{type(self).__name__}.preempt_time={self.preempt_time} may be too short: Megatron Bridge's computed "
            f"FT timeouts put one step plus one checkpoint save at up to {estimate:.0f} s (section timeouts / "
            f"NVRx safety factor {NVRX_SAFETY_FACTOR:g}). If the save does not finish before the time limit, "
            "the job is killed and the save is lost; raise preempt_time"
        )
        warnings.warn(message, PreemptionTimeWarning, stacklevel=3)
        logger.warning(message)


def _grace_message(plugin: str, grace: float, estimate: float, how: str) -> str:
    return (
        f"{plugin}: the platform gives a stopped job {grace:g} s between SIGTERM and SIGKILL, and Megatron Bridge's "
        f"computed FT timeouts put one step plus one checkpoint save at up to {estimate:.0f} s: the save would be "
        f"killed. Raise the grace period ({how})"
    )


def step_plus_save_seconds(checkpoint_dir: Any) -> float | None:
    """One step plus one checkpoint save, from ``<checkpoint_dir>/ft_state.json``; None when unknown.

    Megatron Bridge (``ft.calc_ft_timeouts``) stores NVRx's computed section timeouts there; each is the
    longest observed section time times NVRx's safety factor, so dividing gives the observed time back.
    """
    if not isinstance(checkpoint_dir, str) or not checkpoint_dir:
        return None
    path = os.path.join(checkpoint_dir, FT_STATE_FILE)
    try:
        with open(path) as handle:
            state = json.load(handle)
        sections = state["current_timeouts"]["section"]["section"]
        step, save = float(sections["step"]), float(sections["checkpointing"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return (step + save) / NVRX_SAFETY_FACTOR


__all__ = [
    "PreemptionPlugin",
    "PreemptionPluginScriptArgs",
    "PreemptionSignalWarning",
    "PreemptionTimeWarning",
    "ResiliencyConfigError",
]
