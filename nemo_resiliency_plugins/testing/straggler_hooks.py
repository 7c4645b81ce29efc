"""Megatron Bridge's NVRx straggler detection around the reference workload's train step, as its ``train()`` does:
the manager Megatron Bridge built (``GlobalState.nvrx_straggler_manager``) is initialised and wraps the step, and is
checked after every iteration with Megatron Bridge's own ``check_nvrx_straggler_detection``. CUPTI cannot load on a
host without a GPU: see :mod:`~nemo_resiliency_plugins.testing.cpu_accommodations` for the stand-in.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from megatron.bridge.training import nvrx_straggler as mb_nvrx_straggler

from nemo_resiliency_plugins.testing import cpu_accommodations as cpu
from nemo_resiliency_plugins.testing.rank_log import log, route_logger

if TYPE_CHECKING:
    from megatron.bridge.training.state import GlobalState

__all__ = ["check_nvrx_straggler", "setup_nvrx_straggler"]


def setup_nvrx_straggler(state: GlobalState, trainer: Any):
    """Megatron Bridge's train(): initialise the NVRx manager and wrap the train step; a failure disables it."""
    manager = state.nvrx_straggler_manager  # Megatron Bridge builds it when cfg.nvrx_straggler is set
    if manager is None:
        return trainer.train_step
    route_logger(manager.config.logger_name, trainer.rank)
    try:
        with cpu.cupti_stand_in():
            manager.initialize()
        return manager.wrap_train_step_function(trainer.train_step)
    except Exception as e:  # what Megatron Bridge does: report, then train on without detection
        if trainer.rank == 0:
            log(f"Failed to initialize NVRx straggler detection: {e}")
        state._nvrx_straggler_manager = None
        return trainer.train_step


def check_nvrx_straggler(state: GlobalState, rank: int, elapsed_s: float) -> bool:
    """Megatron Bridge's ``check_nvrx_straggler_detection``; True when the job should stop."""
    manager = state.nvrx_straggler_manager
    if manager is None:
        return False
    with cpu.cuda_calls_on_cpu():
        stop = mb_nvrx_straggler.check_nvrx_straggler_detection(manager)
    if rank == 0 and manager.initialized and mb_nvrx_straggler.straggler.Detector.is_interval_elapsed():
        log(f"STRAGGLER_REPORT step={state.train_state.step} elapsed_s={elapsed_s:.2f}")
    return stop
