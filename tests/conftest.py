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


def _import_the_installed_package() -> None:
    """Import ``nemo_resiliency_plugins`` from the environment (the wheel .ci/setup-env installed), not from the
    checkout, and keep it that way for the whole session (issue 29: the tests run what users install).

    pytest puts the repository root first on ``sys.path`` (``tests`` is a package, and ``python -m pytest`` adds
    the working directory), where the checkout's ``nemo_resiliency_plugins/`` would shadow the installed one. So
    the package is imported once with the root left out, and the root goes to the END of ``sys.path``, where
    ``tests`` and ``benchmarks`` are still found but the installed package comes first. With an editable install
    (``NRP_EDITABLE=1 .ci/setup-env``, local work only) the environment itself points at the checkout.
    tests/unit/test_installed_package.py checks the outcome.
    """
    here = [p for p in sys.path if Path(p or os.getcwd()).resolve() == REPO]
    rest = [p for p in sys.path if p not in here]
    sys.path[:] = rest
    try:
        import nemo_resiliency_plugins  # noqa: F401
    except ImportError as err:
        raise ImportError(f"nemo_resiliency_plugins is not installed in {sys.prefix}: run .ci/setup-env") from err
    finally:
        sys.path[:] = [p for p in sys.path if p not in here] + [str(REPO)]


_import_the_installed_package()


@pytest.fixture
def nemorun_home() -> Path:
    return Path(os.environ["NEMORUN_HOME"])


@pytest.fixture
def venv_bin() -> str:
    return _BIN


@pytest.fixture(scope="session")
def reference_run(tmp_path_factory):
    """(save dir, finished process) of the suite's one fault-free reference run (tests/helpers.py says why one)."""
    from tests.helpers import shared_reference_run

    return shared_reference_run(tmp_path_factory)


# ---------------------------------------------------------------------------------------------- parallel runs
# `.ci/test` runs the suite on two pytest-xdist workers (`-n 2 --dist loadgroup`). Most of a launching test's
# wall time is spent waiting (a Slurm job in the queue or its requeue hold, a hang until its section timeout,
# ft_launcher's fixed 3 s exit grace, NeMo-Run's 2 s status polling), and two workers overlap those waits.
# Grouping keeps every module-scoped fixture that launches jobs computed once: such a test file is one unit of
# work, and the Slurm tests share one worker (one session of the `local_slurm` fixture, so only one of them can
# bring the cluster up); so do the Docker tests (`local_docker`).
# Units start longest first (measured: the README's "Test budget"), so the last one to finish is a short one.
_FIRST = (  # CI of 2026-12-05 (junit), less what left the suite after it
    "slurm",  # 7 concurrent FT jobs, then preemption with a requeue: about 700 s
    "tests/smoke/test_fault_tolerance_local.py",
    "tests/smoke/test_rehearse.py",
    "docker",
    "tests/smoke/test_inprocess_restart_local.py",
    "tests/testing/test_workload.py",
    "tests/smoke/test_straggler_local.py",
    "tests/smoke/test_inprocess_reserve_local.py",
    "tests/smoke/test_rerun_local.py",
    "tests/install/test_launching_host.py",  # issue 29: two fresh venvs (pip installs), then dry runs
    "tests/smoke/test_checkpoint_local.py",
    "tests/smoke/test_benchmark_smoke.py",
    "tests/cli/test_rehearse_from_experiment.py",
)


# Files whose module-scoped fixtures launch jobs: each is one unit. Any other test is a unit of its own, so that
# the fast tier (many short tests, the CLI's subprocesses) spreads over both workers.
_WHOLE_FILES = ("tests/smoke/", "tests/testing/", "tests/install/")  # install: its venvs are built once


def _group(item: pytest.Item) -> str | None:
    if item.get_closest_marker("slurm"):
        return "slurm"
    if item.get_closest_marker("docker"):  # one worker: one session of `local_docker`, started early
        return "docker"
    path = item.nodeid.split("::", 1)[0]
    return path if path.startswith(_WHOLE_FILES) else None


def pytest_itemcollected(item: pytest.Item) -> None:
    # Marked as each test is collected, so xdist's own collection hook (which turns these markers into units of
    # work) always sees them.
    group = _group(item)
    if group is not None:  # the unit's name: "slurm" or the file's stem (it is appended to the test ids)
        item.add_marker(pytest.mark.xdist_group(group.rsplit("/", 1)[-1].removesuffix(".py")))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(_FIRST)}
    # Stable sort: units named in _FIRST first, in that order; the rest keep their order.
    items.sort(key=lambda item: rank.get(_group(item) or item.nodeid.split("::", 1)[0], len(_FIRST)))
