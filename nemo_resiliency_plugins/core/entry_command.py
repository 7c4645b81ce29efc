"""The container entry as a command line that carries its own program: for platforms whose container command
NeMo-Run lets a plugin set but to which it ships no file of ours in time (DGX Cloud, Lepton, Kubeflow).

The entry (:mod:`nemo_resiliency_plugins.job.container_entry`, standard library only) travels base64-encoded as
the first argument of a one-line bootstrap, ``python3 -c "<BOOTSTRAP>" <base64> <launch command...>``: the image
needs only a ``python3`` (a training image has one), nothing is installed, and no file has to exist before the
container starts. A file route would not do here: NeMo-Run copies the job directory to the platform's storage
only at launch, and ``Experiment.dryrun()`` deletes that directory after a plugin has written to it.

Kept apart from :mod:`nemo_resiliency_plugins.core.container_entry` so that the executors' rules classes can
build the command without importing the executor lookup that imports them.
"""

from __future__ import annotations

import base64
from pathlib import Path

from nemo_resiliency_plugins.job import container_entry

#: The interpreter that runs the entry: the image's, found on the container's PATH.
INTERPRETER = "python3"
#: Decodes the entry from its first argument and runs it as ``__main__``; ``pop`` leaves the launch command
#: as the entry's ``sys.argv[1:]``. No quote, ``$``, backquote or backslash: it sits in double quotes in a
#: shell line and in single quotes around that line (DGX Cloud's ``args``).
BOOTSTRAP = "import base64,sys;exec(base64.b64decode(sys.argv.pop(1)))"
#: The variable the Lepton route sets so that the launch script, run again under the entry, goes on past it.
ENTRY_ACTIVE_ENV = "NRP_CONTAINER_ENTRY"


def entry_source() -> str:
    """The entry's text."""
    return Path(container_entry.__file__).read_text()


def entry_b64() -> str:
    """The entry's text as one base64 word (a shell word and a YAML/JSON string as it is)."""
    return base64.b64encode(entry_source().encode()).decode("ascii")


def entry_argv(launch: list[str]) -> list[str]:
    """Exec form: the entry in front of ``launch`` (e.g. a container's ``command`` list)."""
    return [INTERPRETER, "-c", BOOTSTRAP, entry_b64(), *launch]


def entry_shell(launch: str) -> str:
    """Shell form: a line that replaces the shell with the entry in front of ``launch`` (shell words already)."""
    return f'exec {INTERPRETER} -c "{BOOTSTRAP}" {entry_b64()} {launch}'
