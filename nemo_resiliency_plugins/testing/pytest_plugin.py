"""Rehearse your resiliency settings in your own CI, so a wrong timeout fails a test instead of a cluster job.

Enable it in your ``conftest.py``::

    pytest_plugins = ["nemo_resiliency_plugins.testing.pytest_plugin"]

then, in a test::

    from my_project.launch import resiliency_plugins        # the list your experiment script attaches

    def test_resiliency_settings_survive_faults(rehearsal):
        report = rehearsal(resiliency_plugins, faults=("kill", "hang"))
        assert report.ok, report.reasons

or without the fixture (same checks; raises ``AssertionError`` listing every reason)::

    from nemo_resiliency_plugins.testing.pytest_plugin import assert_rehearsal_ok

    assert_rehearsal_ok(resiliency_plugins, faults=("kill", "hang"), save_time_s=90)

A rehearsal launches the reference workload on this machine through NeMo-Run's LocalExecutor (one run per
fault plus a fault-free one, about 1-2 minutes each on a small CPU machine), so it needs the ``[train]`` extra
(torch, NVRx, Megatron Bridge) where the tests run. ``plugins`` may be a list, a recipe name, or a zero-argument
callable that builds the list: with a callable, settings a plugin refuses are reported as a failed rehearsal
instead of an exception at import time. Pass ``step_time_s`` / ``save_time_s`` with your cluster's numbers so
the timeout chain is checked against them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from nemo_resiliency_plugins.tools.rehearse import DEFAULT_FAULTS, PluginsLike, RehearsalReport, rehearse


def assert_rehearsal_ok(plugins: PluginsLike, faults: Sequence[str] = DEFAULT_FAULTS, **kwargs: Any) -> RehearsalReport:
    """Rehearse ``plugins`` and fail with every reason when a fault is not survived; returns the report."""
    report = rehearse(plugins, faults=faults, **kwargs)
    if not report.ok:
        lines = "\n".join(f"  - {reason}" for reason in report.reasons)
        where = f"\n(logs and checkpoints: {report.workdir})" if report.workdir else ""
        raise AssertionError(f"resiliency rehearsal failed:\n{lines}{where}")
    return report


@pytest.fixture
def rehearsal(tmp_path):
    """A ``rehearse`` that keeps each rehearsal's runs, checkpoints and logs under the test's ``tmp_path``."""
    count = 0

    def run(plugins: PluginsLike, faults: Sequence[str] = DEFAULT_FAULTS, **kwargs: Any) -> RehearsalReport:
        nonlocal count
        count += 1
        kwargs.setdefault("workdir", tmp_path / f"rehearsal-{count}")
        return rehearse(plugins, faults=faults, **kwargs)

    return run


__all__ = ["assert_rehearsal_ok", "rehearsal"]
