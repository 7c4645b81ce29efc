"""StragglerDetectionPlugin: NVRx straggler detection for a Megatron Bridge job, in one line.

    StragglerDetectionPlugin(gpu_relative_perf_threshold=0.7, report_time_interval=300)

Sets Megatron Bridge's ``ConfigContainer.nvrx_straggler`` (``NVRxStragglerDetectionConfig``). Megatron Bridge's
training loop then builds an ``NVRxStragglerDetectionManager`` (``megatron/bridge/training/nvrx_straggler.py``)
that wraps ``train_step`` with NVRx's ``straggler.Detector`` (CUPTI timing of the CUDA kernels each rank runs
inside the step), and after every iteration:

* once every ``report_time_interval`` seconds (converted to a number of iterations after 16 warm-up
  iterations), gathers a report on rank 0 with two scores per rank, each between 0 and 1 (1 = best):
  *relative* (this rank's kernel times against the fastest rank's) and *individual* (against this rank's own
  best so far);
* logs ``STRAGGLER DETECTION WARNING: ... Affected ranks: {StragglerId(rank=..., node=...)}`` for every rank
  whose score is below ``gpu_relative_perf_threshold`` / ``gpu_individual_perf_threshold``, and the best and
  worst ``num_gpu_perf_scores_to_print`` scores (``GPU relative performance:``, ``GPU individual
  performance:``) on the logger ``logger_name``;
* with ``stop_if_detected=True``, when a straggler is found, saves a checkpoint (if ``checkpoint.save`` is
  set and none was saved at this step), logs ``Exiting program due to straggler detection.`` and ends the
  job with exit code 0. A straggler is a slow GPU, not a crash: FaultTolerancePlugin's launcher does not restart
  it. On Slurm with FaultTolerancePlugin (NeMo-Run's ft_launcher template and the plugins' requeue guard), the
  guard tells the stop from a finished run by that log line and requeues the job with the node of the reported
  rank excluded (``core/sbatch/step_verdict.sh``); if no such node can be excluded (too few nodes left, or the
  report cannot be mapped to one), the job ends FAILED instead of coming back to the same node. Elsewhere (or on
  Slurm without FaultTolerancePlugin) the job ends COMPLETED: resubmit it without the reported node to continue
  from that checkpoint. With LocalCheckpointPlugin, Megatron Bridge 0.6.2 may skip the persistent save at a
  local-save step (Megatron-Bridge#5922; the plugin warns).

Only one detector at a time. Megatron Core's older detector (``ConfigContainer.straggler``,
``StragglerDetectionConfig.log_straggler``) measures the same thing differently; Megatron Bridge's
resiliency guide says to use NVRx's and not both. This plugin refuses a task that also turns the legacy one on,
and says which to keep.

Works on ``run.Script`` and ``run.Partial`` tasks on every executor (it changes the task only; NVRx's detector
runs inside the ranks and needs no launcher). Needs ``nvidia-resiliency-ext`` where the job runs: without
it, Megatron Bridge logs ``Failed to initialize NVRx straggler detection`` and trains on *without* detection.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import nemo_run as run

from nemo_resiliency_plugins.core import autoresume, executor_config, front_program, task_config
from nemo_resiliency_plugins.core.known_bugs import guard_known_bugs
from nemo_resiliency_plugins.core.validation import Checker, KnownKeywords
from nemo_resiliency_plugins.errors import ResiliencyConfigError

logger = logging.getLogger(__name__)

#: ``logging.getLogger`` names that survive a Hydra override and a shell unquoted: dotted identifiers.
# Used with re.fullmatch: "x\n" must not pass (it would split the srun line on Slurm).
_LOGGER_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")

#: The fields of Megatron Bridge's ``NVRxStragglerDetectionConfig``, in its order.
CONFIG_FIELDS = (
    "enabled",
    "report_time_interval",
    "calc_relative_gpu_perf",
    "calc_individual_gpu_perf",
    "num_gpu_perf_scores_to_print",
    "gpu_relative_perf_threshold",
    "gpu_individual_perf_threshold",
    "stop_if_detected",
    "enable_logging",
    "profiling_interval",
    "logger_name",
)


@dataclass
class StragglerDetectionPluginScriptArgs:
    """What ``script_args_converter_fn`` receives: the ``nvrx_straggler`` values the plugin would set."""

    enabled: bool
    report_time_interval: float
    calc_relative_gpu_perf: bool
    calc_individual_gpu_perf: bool
    num_gpu_perf_scores_to_print: int
    gpu_relative_perf_threshold: float
    gpu_individual_perf_threshold: float
    stop_if_detected: bool
    enable_logging: bool
    profiling_interval: int
    logger_name: str


@dataclass(kw_only=True)
class StragglerDetectionPlugin(KnownKeywords, run.Plugin):
    """Switch on NVRx straggler detection (Megatron Bridge ``nvrx_straggler``) for the task.

    Every field of Megatron Bridge's ``NVRxStragglerDetectionConfig``, with its defaults except ``enabled``
    (True here: adding the plugin asks for detection, as Megatron Bridge's own ``FaultTolerancePlugin``
    defaults ``enable_ft_package=True`` over ``FaultToleranceConfig``'s False; ``enabled=False`` writes a
    disabled section, e.g. to switch off a recipe's detector):

        enabled: run the detector.
        report_time_interval: seconds between reports (> 0). The detector turns it into a number of
            iterations from the median step time of the first 16 iterations, so the first report comes after
            at least 16 iterations and about this many seconds.
        calc_relative_gpu_perf: compute each rank's score against the fastest rank (catches one slow GPU).
        calc_individual_gpu_perf: compute each rank's score against its own best (catches a GPU that slows
            down over time). At least one of the two must be True.
        num_gpu_perf_scores_to_print: how many best and worst scores each report prints (>= 0; 0 prints
            only when stragglers are found).
        gpu_relative_perf_threshold / gpu_individual_perf_threshold: a rank whose score is below this
            (in [0, 1]) is reported as a straggler. 0.7 means "more than ~1.4x slower".
        stop_if_detected: end the job (checkpoint, then exit code 0) when a straggler is found.
        enable_logging: also log min/median/max of the scores.
        profiling_interval: profile every n-th step (>= 1); raise it to lower the overhead.
        logger_name: the Python logger the reports go to (a dotted name).
        script_args_converter_fn: for ``run.Script`` tasks whose script does not take Hydra overrides;
            receives :class:`StragglerDetectionPluginScriptArgs`, returns the arguments to append.

    Validation is stricter than ``NVRxStragglerDetectionConfig.finalize()`` (which checks only when
    ``enabled``, only the calc flags, the interval and the thresholds): types, ``profiling_interval >= 1``,
    ``num_gpu_perf_scores_to_print >= 0`` and finite numbers are checked too, at construction.
    """

    enabled: bool = True
    report_time_interval: float = 300.0
    calc_relative_gpu_perf: bool = True
    calc_individual_gpu_perf: bool = True
    num_gpu_perf_scores_to_print: int = 5
    gpu_relative_perf_threshold: float = 0.7
    gpu_individual_perf_threshold: float = 0.7
    stop_if_detected: bool = False
    enable_logging: bool = True
    profiling_interval: int = 1
    logger_name: str = "megatron.bridge.NVRxStragglerDetection"
    script_args_converter_fn: Callable[[StragglerDetectionPluginScriptArgs], list[str]] | None = None

    def __post_init__(self) -> None:
        check = Checker(type(self).__name__)
        check.boolean("enabled", self.enabled)
        check.number("report_time_interval", self.report_time_interval, positive=True)
        check.boolean("calc_relative_gpu_perf", self.calc_relative_gpu_perf)
        check.boolean("calc_individual_gpu_perf", self.calc_individual_gpu_perf)
        check.integer("num_gpu_perf_scores_to_print", self.num_gpu_perf_scores_to_print, min=0)
        check.number("gpu_relative_perf_threshold", self.gpu_relative_perf_threshold, min=0.0, max=1.0)
        check.number("gpu_individual_perf_threshold", self.gpu_individual_perf_threshold, min=0.0, max=1.0)
        check.boolean("stop_if_detected", self.stop_if_detected)
        check.boolean("enable_logging", self.enable_logging)
        check.integer("profiling_interval", self.profiling_interval, min=1)
        if not isinstance(self.logger_name, str) or _LOGGER_NAME.fullmatch(self.logger_name) is None:
            check.fail("logger_name", self.logger_name, "a dotted logger name such as 'megatron.bridge.NVRx'")
        check.callable_or_none("script_args_converter_fn", self.script_args_converter_fn)
        if not (self.calc_relative_gpu_perf or self.calc_individual_gpu_perf):
            check.fail(
                "calc_individual_gpu_perf",
                self.calc_individual_gpu_perf,
                "True when calc_relative_gpu_perf is False",
                detail=(
                    "with both calc_relative_gpu_perf and calc_individual_gpu_perf False the detector computes no "
                    "score (Megatron Bridge's finalize() rejects it)"
                ),
            )

    # ------------------------------------------------------------------------------------------- setup

    def setup(self, task: run.Partial | run.Script, executor: run.Executor) -> None:
        name = type(self).__name__
        executor_config.claim_plugin(executor, self)  # two of this plugin on one job must agree
        front_program.check_script_entrypoint(task, plugin=name)
        if self.enabled:
            self._refuse_legacy_detector(task, name)
        if self.enabled and self.stop_if_detected:
            # The job saves and exits 0 on a straggler, to be requeued elsewhere: that only helps if it resumes.
            autoresume.ensure_autoresume(
                task, plugin=name, why="the requeue after stop_if_detected", converter=self.script_args_converter_fn
            )
        task_config.set_config_fields(
            task,
            "nvrx_straggler",
            self.config_values(),
            plugin=name,
            script_args=self.script_args(),
            script_args_converter_fn=self.script_args_converter_fn,
        )
        if self.enabled and self.stop_if_detected and executor_config.is_slurm(executor):
            logger.info(
                "%s: stop_if_detected on Slurm: the job is requeued without the straggler's node only under "
                "FaultTolerancePlugin (its requeue guard reads the stop from the log); without it the job ends "
                "COMPLETED at the stop",
                name,
            )
        guard_known_bugs(task, plugin=name)  # Megatron-Bridge#5761, #5922 (known_bugs.py)

    def _refuse_legacy_detector(self, task: Any, name: str) -> None:
        legacy = task_config.read_config_field(task, "straggler", "log_straggler", plugin=type(self).__name__)
        if legacy is True or (isinstance(legacy, str) and legacy.lower() == "true"):
            raise ResiliencyConfigError(
                name,
                "enabled",
                True,
                detail=(
                    "the task also enables Megatron Core's legacy straggler detector (straggler.log_straggler=true). "
                    "Run one detector at a time: keep StragglerDetectionPlugin (NVRx; the one Megatron Bridge "
                    "recommends) and remove straggler.log_straggler from the task, or keep the legacy detector and "
                    "drop this plugin (or pass enabled=False)"
                ),
            )

    def config_values(self) -> dict[str, Any]:
        """``nvrx_straggler.<field>`` -> value, with Megatron Bridge's field types (floats stay floats)."""
        return {
            "enabled": self.enabled,
            "report_time_interval": float(self.report_time_interval),
            "calc_relative_gpu_perf": self.calc_relative_gpu_perf,
            "calc_individual_gpu_perf": self.calc_individual_gpu_perf,
            "num_gpu_perf_scores_to_print": self.num_gpu_perf_scores_to_print,
            "gpu_relative_perf_threshold": float(self.gpu_relative_perf_threshold),
            "gpu_individual_perf_threshold": float(self.gpu_individual_perf_threshold),
            "stop_if_detected": self.stop_if_detected,
            "enable_logging": self.enable_logging,
            "profiling_interval": self.profiling_interval,
            "logger_name": self.logger_name,
        }

    def script_args(self) -> StragglerDetectionPluginScriptArgs:
        return StragglerDetectionPluginScriptArgs(**self.config_values())


__all__ = ["StragglerDetectionPlugin", "StragglerDetectionPluginScriptArgs"]
