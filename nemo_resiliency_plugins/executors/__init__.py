"""Deprecated path, kept for one release: experiments saved before 0.2 name
``nemo_resiliency_plugins.executors.base.FaultToleranceWithSections`` as their launcher. The rules moved to
:mod:`nemo_resiliency_plugins.core.executors`.
"""

import warnings

from nemo_resiliency_plugins.core.executors import *  # noqa: F401,F403

warnings.warn(
    "nemo_resiliency_plugins.executors moved to nemo_resiliency_plugins.core.executors; the old path goes in 0.3",
    DeprecationWarning,
    stacklevel=2,
)
