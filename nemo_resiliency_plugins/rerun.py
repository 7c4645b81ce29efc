"""RerunStateMachinePlugin: Megatron Core's re-run state machine (result validation) for a Megatron Bridge job.

    RerunStateMachinePlugin(rerun_mode="validate_results", check_for_nan_in_loss=True)

**Experimental.** Megatron Core calls its re-run state machine "alpha-level code ... not tested at scale"
(``megatron/core/rerun_state_machine.py``) and Megatron Bridge lists it as experimental. Nodes it flags must
still go through the usual diagnostics. The plugin logs this once per process.

Sets Megatron Bridge's ``ConfigContainer.rerun_state_machine`` (``RerunStateMachineConfig``), which Megatron
Bridge passes to Megatron Core in ``init_rerun_state``. Each training step then runs inside
``while rerun_state_machine.should_run_forward_backward(...)``, and the loss function validates the
loss of every micro-batch (``check_for_nan_in_loss``: NaN and Inf, fatal; ``check_for_spiky_loss``: at least
``spiky_loss_factor`` times the largest of the first 100 losses, Megatron Core's sample window; not fatal).

What happens to a rejected result, by ``rerun_mode``:

``disabled``
    No re-run. A NaN/Inf loss raises ``RuntimeError`` on the rank that saw it (the job fails like any crash);
    a spiky loss is only logged.
``validate_results``
    The step is re-run in place, on the same GPU, with the same data and RNG state, and the training loop
    ends every rank with one of two exit codes (Megatron Core's constants):

    * **17** (``EXIT_CODE_FAILED_ON_RESULT_VALIDATION``): the re-run did *not* reproduce the result, so the
      first result was likely a transient hardware error. No checkpoint is written; the optimizer step of the
      bad iteration is not taken. Resume from the last checkpoint.
    * **16** (``EXIT_CODE_RESUME_TO_DISAMBIGUATE``): the re-run reproduced the result. A checkpoint is saved
      (with the state machine's state; ``torch_dist`` checkpoints only) and the job must be resumed *on a
      different GPU*: there the step is run a third time, and the result says whether the first GPU is faulty
      (exit 17) or the result was correct all along (an application problem, also exit 17). Resumed on the same
      node and GPU, it exits 16 again ("Got rescheduled on the same GPU").

    A non-fatal rejection (spiky loss) is re-run once and logged, and training continues.
``report_determinism_stats``
    Every step is run twice and the relative differences of the validated values are logged as statistics
    (non-determinism of the kernels). Nothing is stopped. Training is about twice as slow.

Combined with :class:`~nemo_resiliency_plugins.FaultTolerancePlugin` (NVRx ``ft_launcher``): the launcher
treats exit codes 16 and 17 like any other non-zero exit of a rank ("Worker group UNHEALTHY. n/m attempts left;
will restart worker group") and, while ``num_in_job_restarts`` remain, restarts the worker group in place on the
same nodes, which resumes from the last checkpoint.

* After **17** this is what you want: the bad step is computed again from the last checkpoint and, since a
  transient error does not come back, training goes on (the smoke test
  ``tests/smoke/test_rerun_local.py`` shows it: exit 17, "will restart worker group", resumed, finished).
* After **16** the in-job restart lands on the same GPU, so Megatron Core exits 16 again and each round uses
  one restart until none is left (NVRx's progress tracker, ``max_no_progress_cycles``, may stop it sooner
  when it can read a checkpoint iteration that does not advance); the job then ends FAILED, and
  ``num_job_retries_on_failure`` (a new Slurm job, possibly on other nodes) is what can disambiguate. This
  comes from reading Megatron Core's and NVRx's code; it is not exercised by this package's tests, whose
  reference workload does not store the state machine in its checkpoints.

Cost: ``validate_results`` re-runs only the steps whose validation failed; in the steady state each step adds
one all-reduce of a flag and an RNG-state snapshot.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import nemo_run as run

from nemo_resiliency_plugins.core import executor_config, front_program, task_config
from nemo_resiliency_plugins.core.validation import Checker, KnownKeywords

logger = logging.getLogger(__name__)

#: Megatron Core's exit codes (``megatron.core.rerun_state_machine``), repeated so importing this package does
#: not import Megatron Core. Checked against it by ``tests/contract/test_straggler_rerun_config.py``.
EXIT_CODE_RESUME_TO_DISAMBIGUATE = 16
EXIT_CODE_FAILED_ON_RESULT_VALIDATION = 17

RERUN_MODES = ("disabled", "validate_results", "report_determinism_stats")
ERROR_INJECTION_TYPES = ("correct_result", "transient_error", "persistent_error")

EXPERIMENTAL_NOTICE = (
    "RerunStateMachinePlugin: Megatron Core's re-run state machine is EXPERIMENTAL (alpha-level code, not "
    "tested at scale); ranks it flags still need the usual diagnostics"
)
_experimental_logged = False


def _log_experimental_once() -> None:
    global _experimental_logged
    if not _experimental_logged:
        _experimental_logged = True
        logger.warning(EXPERIMENTAL_NOTICE)


@dataclass
class RerunStateMachinePluginScriptArgs:
    """What ``script_args_converter_fn`` receives: the ``rerun_state_machine`` values the plugin would set."""

    rerun_mode: str
    check_for_nan_in_loss: bool
    check_for_spiky_loss: bool
    spiky_loss_factor: float
    error_injection_rate: int
    error_injection_type: str


@dataclass(kw_only=True)
class RerunStateMachinePlugin(KnownKeywords, run.Plugin):
    """Validate training results with Megatron Core's re-run state machine (EXPERIMENTAL; see the module doc).

    Fields of Megatron Bridge's ``RerunStateMachineConfig``, with its defaults except ``rerun_mode``
    (``"validate_results"`` here, the default of Megatron-LM's own ``RerunStateMachineConfig``; Megatron
    Bridge's is ``"disabled"``, with which the plugin would change nothing):

        rerun_mode: ``"disabled"``, ``"validate_results"`` or ``"report_determinism_stats"``.
        check_for_nan_in_loss: validate that the loss is not NaN or Inf (fatal when rejected).
        check_for_spiky_loss: validate that the loss stays below ``spiky_loss_factor`` times the largest of
            the first 100 losses (not fatal: logged, and training continues).
        spiky_loss_factor: > 1. 10 by default; Megatron Bridge's guide suggests 15-20 for models of 70B+.
        error_injection_rate: for testing the machinery: inject a rejected result about once every this many
            validations (0 = never). Only acts in ``validate_results`` mode.
        error_injection_type: what the injected error looks like on re-run: ``"transient_error"`` (not
            reproduced: exit 17), ``"persistent_error"`` (reproduced on this GPU, not on another: exit 16,
            then 17), ``"correct_result"`` (reproduced everywhere).
        script_args_converter_fn: for ``run.Script`` tasks whose script does not take Hydra overrides;
            receives :class:`RerunStateMachinePluginScriptArgs`, returns the arguments to append.

    Exit codes: 16 = resume (on a different GPU) to disambiguate, 17 = failed result validation. What NVRx's
    ``ft_launcher`` (``FaultTolerancePlugin``) does with them is in the module docstring: it restarts in place.
    """

    rerun_mode: str = "validate_results"
    check_for_nan_in_loss: bool = True
    check_for_spiky_loss: bool = False
    spiky_loss_factor: float = 10.0
    error_injection_rate: int = 0
    error_injection_type: str = "transient_error"
    script_args_converter_fn: Callable[[RerunStateMachinePluginScriptArgs], list[str]] | None = None

    def __post_init__(self) -> None:
        check = Checker(type(self).__name__)
        check.choice("rerun_mode", self.rerun_mode, RERUN_MODES)
        check.boolean("check_for_nan_in_loss", self.check_for_nan_in_loss)
        check.boolean("check_for_spiky_loss", self.check_for_spiky_loss)
        check.number("spiky_loss_factor", self.spiky_loss_factor, positive=True)
        if self.spiky_loss_factor <= 1:
            check.fail(
                "spiky_loss_factor",
                self.spiky_loss_factor,
                "a number > 1",
                detail="a loss is spiky when it reaches this multiple of the largest of the first 100 losses; with a "
                "factor <= 1 ordinary losses count as spikes",
            )
        check.integer("error_injection_rate", self.error_injection_rate, min=0)
        check.choice("error_injection_type", self.error_injection_type, ERROR_INJECTION_TYPES)
        check.callable_or_none("script_args_converter_fn", self.script_args_converter_fn)
        if self.error_injection_rate > 0 and self.rerun_mode != "validate_results":
            check.fail(
                "error_injection_rate",
                self.error_injection_rate,
                "0 unless rerun_mode='validate_results'",
                detail=f"Megatron Core injects errors only while validating results; rerun_mode={self.rerun_mode!r}",
            )
        if self.rerun_mode == "report_determinism_stats" and not (
            self.check_for_nan_in_loss or self.check_for_spiky_loss
        ):
            check.fail(
                "rerun_mode",
                self.rerun_mode,
                "'report_determinism_stats' with check_for_nan_in_loss or check_for_spiky_loss on",
                detail="the statistics are taken on the validated loss; with both checks off nothing is measured",
            )
        _log_experimental_once()

    # ------------------------------------------------------------------------------------------- setup

    def setup(self, task: run.Partial | run.Script, executor: run.Executor) -> None:
        name = type(self).__name__
        executor_config.claim_plugin(executor, self)  # two of this plugin on one job must agree
        front_program.check_script_entrypoint(task, plugin=name)
        task_config.set_config_fields(
            task,
            "rerun_state_machine",
            self.config_values(),
            plugin=name,
            script_args=self.script_args(),
            script_args_converter_fn=self.script_args_converter_fn,
        )
        if self.rerun_mode == "validate_results":
            logger.info(
                "%s: a rejected result ends the job with exit code %d (resume on another GPU to disambiguate) or %d "
                "(failed validation); under ft_launcher both count as a failed worker group and are restarted in "
                "place while in-job restarts remain",
                name,
                EXIT_CODE_RESUME_TO_DISAMBIGUATE,
                EXIT_CODE_FAILED_ON_RESULT_VALIDATION,
            )

    def config_values(self) -> dict[str, Any]:
        """``rerun_state_machine.<field>`` -> value, with Megatron Bridge's field types."""
        return {
            "rerun_mode": self.rerun_mode,
            "check_for_nan_in_loss": self.check_for_nan_in_loss,
            "check_for_spiky_loss": self.check_for_spiky_loss,
            "spiky_loss_factor": float(self.spiky_loss_factor),
            "error_injection_rate": self.error_injection_rate,
            "error_injection_type": self.error_injection_type,
        }

    def script_args(self) -> RerunStateMachinePluginScriptArgs:
        return RerunStateMachinePluginScriptArgs(**self.config_values())


__all__ = [
    "EXIT_CODE_FAILED_ON_RESULT_VALIDATION",
    "EXIT_CODE_RESUME_TO_DISAMBIGUATE",
    "RerunStateMachinePlugin",
    "RerunStateMachinePluginScriptArgs",
]
