"""Shared pytest set-up: an isolated NEMORUN_HOME per test session and the venv's programs on PATH.

NeMo-Run reads NEMORUN_HOME at import time, so it is set here before any test imports nemo_run.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import pytest

_HOME = tempfile.mkdtemp(prefix="nrp-nemorun-home-")
os.environ.setdefault("NEMORUN_HOME", _HOME)
# Jobs that LocalExecutor starts resolve `python` and `ft_launcher` from PATH: use this interpreter's.
_BIN = str(Path(sys.executable).parent)
if not os.environ.get("PATH", "").startswith(_BIN + os.pathsep):
    os.environ["PATH"] = _BIN + os.pathsep + os.environ.get("PATH", "")
os.environ.setdefault("COLUMNS", "200")

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def nemorun_home() -> Path:
    return Path(os.environ["NEMORUN_HOME"])


@pytest.fixture
def venv_bin() -> str:
    return _BIN
