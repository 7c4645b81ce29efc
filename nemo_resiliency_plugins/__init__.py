"""NeMo-Run plugins that switch on Megatron Bridge's training-resiliency mechanisms.

Importing this package imports NeMo-Run and fiddle only: never torch, NVRx or Megatron Bridge, which are
needed where training runs, not on the host that launches it.
"""

from nemo_resiliency_plugins.errors import ResiliencyConfigError
from nemo_resiliency_plugins.fault_tolerance import FaultTolerancePlugin, FaultTolerancePluginScriptArgs
from nemo_resiliency_plugins.inprocess_restart import InProcessRestartPlugin
from nemo_resiliency_plugins.preemption import PreemptionPlugin, PreemptionPluginScriptArgs, PreemptionTimeWarning
from nemo_resiliency_plugins.rerun import RerunStateMachinePlugin, RerunStateMachinePluginScriptArgs
from nemo_resiliency_plugins.straggler import StragglerDetectionPlugin, StragglerDetectionPluginScriptArgs

__all__ = [
    "FaultTolerancePlugin",
    "FaultTolerancePluginScriptArgs",
    "InProcessRestartPlugin",
    "PreemptionPlugin",
    "PreemptionPluginScriptArgs",
    "PreemptionTimeWarning",
    "RerunStateMachinePlugin",
    "RerunStateMachinePluginScriptArgs",
    "ResiliencyConfigError",
    "StragglerDetectionPlugin",
    "StragglerDetectionPluginScriptArgs",
]
__version__ = "0.1.0"
