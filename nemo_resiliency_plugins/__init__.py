"""NeMo-Run plugins that switch on Megatron Bridge's training-resiliency mechanisms.

Importing a plugin imports NeMo-Run and fiddle only: never torch, NVRx or Megatron Bridge, which are needed
where training runs, not on the host that launches it. The names below are resolved on first use (PEP 562),
so that the training ranks, which import :mod:`nemo_resiliency_plugins.testing` helpers, do not pay for
importing NeMo-Run (several seconds on every rank start) for plugins they never use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from nemo_resiliency_plugins._version import __version__ as __version__

if TYPE_CHECKING:
    from nemo_resiliency_plugins.async_checkpoint import AsyncCheckpointPlugin, AsyncCheckpointPluginScriptArgs
    from nemo_resiliency_plugins.errors import ResiliencyConfigError
    from nemo_resiliency_plugins.fault_tolerance import FaultTolerancePlugin, FaultTolerancePluginScriptArgs
    from nemo_resiliency_plugins.inprocess_restart import InProcessRestartPlugin
    from nemo_resiliency_plugins.local_checkpoint import LocalCheckpointPlugin, LocalCheckpointPluginScriptArgs
    from nemo_resiliency_plugins.preemption import (
        PreemptionPlugin,
        PreemptionPluginScriptArgs,
        PreemptionTimeWarning,
    )
    from nemo_resiliency_plugins.rerun import RerunStateMachinePlugin, RerunStateMachinePluginScriptArgs
    from nemo_resiliency_plugins.straggler import StragglerDetectionPlugin, StragglerDetectionPluginScriptArgs

#: public name -> the module that defines it
_EXPORTS = {
    "AsyncCheckpointPlugin": "async_checkpoint",
    "AsyncCheckpointPluginScriptArgs": "async_checkpoint",
    "FaultTolerancePlugin": "fault_tolerance",
    "FaultTolerancePluginScriptArgs": "fault_tolerance",
    "InProcessRestartPlugin": "inprocess_restart",
    "LocalCheckpointPlugin": "local_checkpoint",
    "LocalCheckpointPluginScriptArgs": "local_checkpoint",
    "PreemptionPlugin": "preemption",
    "PreemptionPluginScriptArgs": "preemption",
    "PreemptionTimeWarning": "preemption",
    "RerunStateMachinePlugin": "rerun",
    "RerunStateMachinePluginScriptArgs": "rerun",
    "ResiliencyConfigError": "errors",
    "StragglerDetectionPlugin": "straggler",
    "StragglerDetectionPluginScriptArgs": "straggler",
}
__all__ = [
    "AsyncCheckpointPlugin",
    "AsyncCheckpointPluginScriptArgs",
    "FaultTolerancePlugin",
    "FaultTolerancePluginScriptArgs",
    "InProcessRestartPlugin",
    "LocalCheckpointPlugin",
    "LocalCheckpointPluginScriptArgs",
    "PreemptionPlugin",
    "PreemptionPluginScriptArgs",
    "PreemptionTimeWarning",
    "RerunStateMachinePlugin",
    "RerunStateMachinePluginScriptArgs",
    "ResiliencyConfigError",
    "StragglerDetectionPlugin",
    "StragglerDetectionPluginScriptArgs",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
