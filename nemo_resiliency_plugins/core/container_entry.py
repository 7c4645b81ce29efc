"""The container entry: the job's first process, in front of NeMo-Run's launch script, so that the platform's
SIGTERM reaches ft_launcher and the ranks (:mod:`nemo_resiliency_plugins.job.container_entry` says why and how).

It is shipped by the executor's file route (:func:`executor_config.deliver_file`) and made the container's first
process by the executor's rules class (``install_entry``): the image needs only a ``python3``, which a training
image has. Where an executor's first process is the launch script but it has no route yet, the signal is lost
and :func:`signal_entry_problem` says so (PreemptionPlugin turns it into ``PreemptionSignalWarning``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nemo_resiliency_plugins.core import executor_config
from nemo_resiliency_plugins.core.executors import for_executor
from nemo_resiliency_plugins.job import container_entry

#: The name the entry is shipped under.
ENTRY_FILE = "container_entry.py"
#: The interpreter that runs it: the image's, found on the container's PATH.
INTERPRETER = "python3"


def entry_source() -> str:
    """The entry's text (standard library only)."""
    return Path(container_entry.__file__).read_text()


def needs_entry(executor: Any, *, plugin: str) -> bool:
    """Whether the job's first process is NeMo-Run's launch script, which drops the platform's SIGTERM."""
    return for_executor(executor, plugin=plugin).pid1_launch_script


def install_container_entry(executor: Any, *, plugin: str) -> str | None:
    """Put the entry in front of the launch script where the executor needs it and has a route; return the path
    the job runs it from, or None when the executor does not need it or has no route (see
    :func:`signal_entry_problem`). Idempotent: plugins listed twice install it once."""
    rules = for_executor(executor, plugin=plugin)
    if not rules.pid1_launch_script or not rules.entry_route:
        return None
    path = executor_config.deliver_file(executor, ENTRY_FILE, entry_source(), plugin=plugin)
    rules.install_entry([INTERPRETER, path], plugin=plugin)
    return path


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
        f"This package has no route yet to put its container entry in front of {rules.label}'s launch script "
        "(it does on DockerExecutor). Send the signal to ft_launcher itself (e.g. a Kubernetes preStop hook "
        "running 'pkill -TERM -f ft_launcher')"
    )
