"""The container entry: the job's first process, in front of NeMo-Run's launch script, so that the platform's
SIGTERM reaches ft_launcher and the ranks (:mod:`nemo_resiliency_plugins.job.container_entry` says why and how).

The executor's rules class makes it the container's first process (``install_entry``), by the route that
platform has: on Docker a file of ours bind-mounted into the container (:func:`executor_config.deliver_file`)
and docker-py's ``entrypoint``; on DGX Cloud, Lepton and Kubeflow the platform's own container command, with
the entry carried in the command line itself (:mod:`nemo_resiliency_plugins.core.entry_command`). The image
needs only a ``python3``, which a training image has. Where an executor's first process is the launch script
but it has no route, the signal is lost and :func:`signal_entry_problem` says so (PreemptionPlugin turns it
into ``PreemptionSignalWarning``).
"""

from __future__ import annotations

from typing import Any

from nemo_resiliency_plugins.core.entry_command import INTERPRETER, entry_source
from nemo_resiliency_plugins.core.executors import for_executor
from nemo_resiliency_plugins.core.executors.docker import ENTRY_FILE

__all__ = ["ENTRY_FILE", "INTERPRETER", "entry_source", "install_container_entry", "needs_entry"]


def needs_entry(executor: Any, *, plugin: str) -> bool:
    """Whether the job's first process is NeMo-Run's launch script, which drops the platform's SIGTERM."""
    return for_executor(executor, plugin=plugin).pid1_launch_script


def install_container_entry(executor: Any, *, plugin: str) -> str | None:
    """Put the entry in front of the launch script where the executor needs it and has a route; return where the
    job runs it from (for the log), or None when the executor does not need it or has no route (see
    :func:`signal_entry_problem`). Idempotent: plugins listed twice install it once."""
    rules = for_executor(executor, plugin=plugin)
    if not rules.pid1_launch_script or not rules.entry_route:
        return None
    return rules.install_entry(plugin=plugin)


def signal_entry_problem(executor: Any, *, plugin: str) -> str | None:
    """None when the platform's SIGTERM reaches ft_launcher / the ranks (no launch script as first process, or
    the entry is installed there); else why not and what to do."""
    rules = for_executor(executor, plugin=plugin)
    if not rules.pid1_launch_script or rules.entry_route:
        return None
    return (
        f"on {rules.label} the platform's SIGTERM goes to the container's first process, NeMo-Run's bash launch "
        "script, which as the container's init has no handler for it: the kernel drops the signal, so "
        "ft_launcher and the ranks never see it and the job is SIGKILLed after the grace period without a save. "
        f"This package has no route to put its container entry in front of {rules.label}'s launch script. "
        "Send the signal to ft_launcher itself (e.g. a Kubernetes preStop hook "
        "running 'pkill -TERM -f ft_launcher')"
    )
