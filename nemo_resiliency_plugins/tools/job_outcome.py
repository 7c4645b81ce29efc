"""How a launched job really ended, read from what the job itself left in its job directory.

Why this exists: NeMo-Run's DockerExecutor starts its container with auto-remove, and its wait asks Docker for
the container's state every 2 s. When a poll finds the container ``exited`` and Docker removes it before NeMo-Run's
next call about it (listing, then inspecting, then ``wait`` for the exit code), docker-py raises ``404 Client Error
... No such container``; NeMo-Run logs "Exception while waiting for Job" and the job keeps the state it had at
launch (``SUBMITTED``), although it finished. The window is the time Docker takes to remove an exited container,
which grows on a loaded host (docs/races.md). The container's own command line records its exit code before it
ends (``status_<container>.out`` in the job directory, written by NeMo-Run's ``bash -c`` wrapper), so that file
is the job's real outcome; NeMo-Run's ``exp.status()`` falls back to it too once the container is gone.
"""

from __future__ import annotations

import json
from pathlib import Path

from nemo_resiliency_plugins.tools.saved_plugins import read_regular

#: A status file is one line of JSON (``{"exit_code": N}``).
STATUS_MAX_BYTES = 4096

__all__ = ["container_exit_codes"]


def container_exit_codes(job_dir: str | Path) -> dict[str, int | str]:
    """``{container name: exit code}`` from every ``status_<container>.out`` in ``job_dir``.

    A file that is not the one-line JSON NeMo-Run writes maps to the text found (so that a caller can say what is
    wrong with it); a container with no file yet (still running, or never started) is absent.
    """
    codes: dict[str, int | str] = {}
    for path in sorted(Path(job_dir).glob("status_*.out")):
        name = path.name[len("status_") : -len(".out")]
        # A FIFO or a huge file named like a status file must not block or fill doctor: regular files only.
        raw = read_regular(path, STATUS_MAX_BYTES)
        if raw is None:
            codes[name] = "unreadable: not a regular file of at most 4 KiB"
            continue
        text = raw.decode(errors="replace").strip()
        try:
            codes[name] = int(json.loads(text)["exit_code"])
        except (ValueError, KeyError, TypeError):
            codes[name] = text[:200]
    return codes
