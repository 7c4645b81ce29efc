"""The installed NeMo-Run's version, for messages: a leaf module, so that both the executor rules and the Slurm
script's checks can name it without importing each other."""

from __future__ import annotations

import importlib.metadata


def nemo_run_version() -> str:
    try:
        return importlib.metadata.version("nemo-run")
    except importlib.metadata.PackageNotFoundError:  # a source checkout of NeMo-Run
        return "(version unknown)"
