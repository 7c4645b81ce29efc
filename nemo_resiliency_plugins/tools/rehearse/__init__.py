"""``nemo-resiliency rehearse``: prove a plugin set on one machine before it meets a cluster.

* :mod:`.run` -- :func:`rehearse`: a fault-free baseline, then one run per fault, and the verdicts
* :mod:`.adapt` -- the rehearsal's constants, and a plugin set scaled to one machine
* :mod:`.watch` -- the log lines that mark events, and the thread that tails the job's logs
* :mod:`.report` -- what a rehearsal found
* :mod:`.timeline` -- the timeline PNG
"""

from nemo_resiliency_plugins.tools.rehearse.adapt import (
    DEFAULT_FAULTS,
    FAULT_STEP,
    FAULTS,
    SAVE_INTERVAL,
    TARGET_STEP_TIMEOUT_S,
    rehearsal_plugins,
)
from nemo_resiliency_plugins.tools.rehearse.report import FaultResult, PluginsLike, RehearsalReport, RunOutcome
from nemo_resiliency_plugins.tools.rehearse.run import rehearse
from nemo_resiliency_plugins.tools.rehearse.timeline import write_timeline

__all__ = [
    "DEFAULT_FAULTS",
    "FAULTS",
    "FAULT_STEP",
    "SAVE_INTERVAL",
    "TARGET_STEP_TIMEOUT_S",
    "FaultResult",
    "PluginsLike",
    "RehearsalReport",
    "RunOutcome",
    "rehearsal_plugins",
    "rehearse",
    "write_timeline",
]
