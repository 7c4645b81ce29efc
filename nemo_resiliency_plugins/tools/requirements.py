"""What a command or a job needs installed, checked before any work is done, and the exit code when it is missing.

The launching host needs only this package and its declared dependencies; some commands need more (``plan
--plot``: matplotlib; ``rehearse``: a training stack on this machine). They say so up front, naming the extra or
package to install, instead of failing half-way or exiting with the bad-argument code (docs/install.md).
"""

from __future__ import annotations

import importlib.util

#: Exit code of a command that cannot run because a module it needs is not installed here (an optional piece, or
#: an incomplete installation). Not 2: that one means a bad argument (tools/cli.py).
EXIT_MISSING_MODULE = 3

DISTRIBUTION = "nemo-resiliency-plugins"


class MissingModule(Exception):
    """A module a command needs is not installed; the message says what to install (one line)."""


def installed(module: str) -> bool:
    """Whether ``module`` can be imported here, without importing it (a parent package missing counts as no)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def require_plotting(option: str) -> None:
    """``--plot`` / ``--timeline``: matplotlib, from the ``plot`` extra."""
    if not installed("matplotlib"):
        raise MissingModule(
            f"{option} writes a PNG with matplotlib, which is not installed here: "
            f"pip install '{DISTRIBUTION}[plot]' (or leave out {option})"
        )


#: What ``rehearse`` runs on this machine: short training jobs with the real launcher and training loop.
TRAINING_MODULES = {
    "torch": "torch",
    "nvidia_resiliency_ext": "nvidia-resiliency-ext",
    "megatron.bridge": "megatron-bridge",
}


def require_training_stack(command: str) -> None:
    """Commands that train here need torch, NVRx and Megatron Bridge (a launching host has none of them)."""
    missing = [dist for module, dist in TRAINING_MODULES.items() if not installed(module)]
    if missing:
        raise MissingModule(
            f"{command} runs short training jobs on this machine and needs {', '.join(missing)}, not installed here: "
            f"run it where the training stack is (pip install '{DISTRIBUTION}[train]' adds NVRx and torch; Megatron "
            "Bridge comes from its own install), or use explain/doctor, which need none of them"
        )


def import_failure_message(err: ImportError) -> str:
    """One line for an ImportError escaping a command: whose module is missing and what to do."""
    name = err.name or str(err)
    if name.startswith("nemo_resiliency_plugins"):
        return (
            f"this installation of {DISTRIBUTION} is incomplete ({err}); reinstall it: "
            f"pip install --force-reinstall {DISTRIBUTION}"
        )
    return f"a module this command needs is not installed here ({err}); docs/install.md lists what each command needs"
