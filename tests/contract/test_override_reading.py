"""What the plugins read from ``task.args`` is what Megatron Bridge's own override applier gives the job.

Hostile override texts (quotes, escapes, brackets, interpolations, spaces) go both to
``task_config.read_config_field`` and to Megatron Bridge's ``process_config_with_overrides`` on a real
``ConfigContainer``: the two agree, or both refuse (ours with a ResiliencyConfigError naming the plugin).
And every value the plugins *write* comes back unchanged through Megatron Bridge's applier.
"""

from __future__ import annotations

import nemo_run as run
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nemo_resiliency_plugins import ResiliencyConfigError
from nemo_resiliency_plugins.core.hydra_overrides import format_value
from nemo_resiliency_plugins.core.task_config import read_config_field

_TEXT = st.text(alphabet="ab/_.-'\"\\${}[],: =()x1", min_size=0, max_size=14)
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _job_reads(apply_overrides, workload, tmp_path, arg: str):
    cfg = workload.reference_config(str(tmp_path))
    apply_overrides(cfg, [arg])
    return cfg.checkpoint.save


@SETTINGS
@given(text=_TEXT)
def test_a_users_override_reads_as_megatron_bridge_reads_it(apply_overrides, workload, tmp_path, text):
    arg = f"checkpoint.save={text}"
    task = run.Script(path="/tmp/train.py", entrypoint="python", args=[arg])
    try:
        job = _job_reads(apply_overrides, workload, tmp_path, arg)
    except Exception:
        job = pytest  # sentinel: the job fails on this override
    try:
        ours = read_config_field(task, "checkpoint", "save", plugin="P")
    except ResiliencyConfigError as err:
        assert err.plugin == "P" and err.field == "task.args[checkpoint.save]"
        assert job is pytest, f"we refused {arg!r}, which Megatron Bridge reads as {job!r}"
        return
    if job is pytest:
        # Megatron Bridge failed where Hydra parsed: an interpolation of a key the config lacks, or a value
        # its typed field cannot hold; the job fails at start either way.
        assert isinstance(ours, (str, list, dict)), (arg, ours)
        return
    assert ours == job, (arg, ours, job)


@SETTINGS
@given(value=st.text(alphabet="ab/_.-'\"\\${}[],: x1", min_size=1, max_size=14))
def test_every_string_we_write_reaches_the_job_unchanged(apply_overrides, workload, tmp_path, value):
    arg = f"checkpoint.save={format_value(value)}"
    assert _job_reads(apply_overrides, workload, tmp_path, arg) == value
