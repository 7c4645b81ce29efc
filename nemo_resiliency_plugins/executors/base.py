"""Deprecated path, kept for one release (see :mod:`nemo_resiliency_plugins.executors`)."""

from nemo_resiliency_plugins.core.executors.base import ExecutorRules, FaultToleranceWithSections  # noqa: F401
