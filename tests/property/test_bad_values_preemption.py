"""Random values for every PreemptionPlugin field, alone and against random Slurm time limits: a value is
either accepted or refused with ResiliencyConfigError naming the plugin; nothing else may come out."""

from __future__ import annotations

import nemo_run as run
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nemo_resiliency_plugins import ResiliencyConfigError
from nemo_resiliency_plugins.preemption import PreemptionPlugin

time_limits = st.one_of(
    st.text(max_size=12),
    st.from_regex(r"\A(\d{1,2}-)?\d{1,3}(:\d{1,2}){0,2}\Z"),
    st.sampled_from(["UNLIMITED", "INFINITE", "00:00:30", "1", "0"]),
)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(limit=time_limits, preempt_time=st.integers(min_value=1, max_value=65535))
def test_setup_against_any_time_limit_accepts_or_names_the_problem(tmp_path, limit, preempt_time):
    executor = run.SlurmExecutor(
        account="a",
        partition="debug",
        time=limit,
        tunnel=run.LocalTunnel(job_dir=str(tmp_path)),
        packager=run.Packager(),
    )
    task = run.Script(
        path="nemo_resiliency_plugins.testing.workload", m=True, entrypoint="python", args=["checkpoint.save=/tmp/ck"]
    )
    try:
        PreemptionPlugin(preempt_time=preempt_time).setup(task, executor)
    except ResiliencyConfigError as err:
        assert "PreemptionPlugin" in str(err)
        assert "preempt_time" in str(err) or "executor.time" in str(err)
        return
    assert executor.signal == f"B:TERM@{preempt_time}"
