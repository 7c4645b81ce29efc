"""InProcessRestartPlugin under random input: only ResiliencyConfigError may come out, and whatever is
accepted keeps NVRx's timeout ordering (which NVRx itself would only check when the job starts)."""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from nemo_resiliency_plugins import ResiliencyConfigError
from nemo_resiliency_plugins.inprocess_restart import InProcessRestartPlugin

FIELDS = [f.name for f in dataclasses.fields(InProcessRestartPlugin) if f.init]
TIMES = (
    "monitor_thread_interval",
    "monitor_process_interval",
    "heartbeat_interval",
    "soft_timeout",
    "hard_timeout",
    "heartbeat_timeout",
    "barrier_timeout",
    "completion_timeout",
    "last_call_wait",
    "termination_grace_time",
)


seconds = st.one_of(st.integers(min_value=-5, max_value=400), st.floats(min_value=-5, max_value=400))


@settings(max_examples=60, deadline=None)
@given(values=st.fixed_dictionaries({}, optional={name: seconds for name in TIMES}))
def test_accepted_timeouts_keep_nvrx_ordering(values):
    try:
        plugin = InProcessRestartPlugin(**values)
    except ResiliencyConfigError as err:
        assert err.field in TIMES
        return
    p = plugin
    assert all(getattr(p, name) > 0 for name in TIMES)
    assert p.soft_timeout < p.hard_timeout < p.barrier_timeout
    assert p.heartbeat_interval < p.heartbeat_timeout < p.barrier_timeout
    assert p.monitor_process_interval < min(p.heartbeat_timeout, p.soft_timeout, p.barrier_timeout)
    assert p.monitor_thread_interval < p.soft_timeout
    assert p.progress_watchdog_interval < p.soft_timeout
    # The watchdog value the plugin would set always satisfies its own rule.
    assert p.watchdog_minutes() * 60 > p.hard_timeout
