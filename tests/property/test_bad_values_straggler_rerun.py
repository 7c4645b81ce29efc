"""Random bad values for every field of StragglerDetectionPlugin and RerunStateMachinePlugin: only
ResiliencyConfigError may come out, and it names the plugin; a value the plugin accepts builds a plugin whose
overrides Megatron Bridge's finalize() would accept too (checked in tests/contract)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from nemo_resiliency_plugins import RerunStateMachinePlugin, ResiliencyConfigError, StragglerDetectionPlugin
from tests.property.strategies import anything

PLUGINS = [StragglerDetectionPlugin, RerunStateMachinePlugin]


@settings(max_examples=40, deadline=None)
@given(
    values=st.fixed_dictionaries(
        {
            "enabled": anything,
            "report_time_interval": anything,
            "calc_relative_gpu_perf": anything,
            "calc_individual_gpu_perf": anything,
            "gpu_relative_perf_threshold": anything,
            "profiling_interval": anything,
        }
    )
)
def test_straggler_many_fields_at_once(values):
    try:
        StragglerDetectionPlugin(**values)
    except ResiliencyConfigError:
        pass


@settings(max_examples=40, deadline=None)
@given(
    values=st.fixed_dictionaries(
        {
            "rerun_mode": anything,
            "check_for_nan_in_loss": anything,
            "check_for_spiky_loss": anything,
            "spiky_loss_factor": anything,
            "error_injection_rate": anything,
        }
    )
)
def test_rerun_many_fields_at_once(values):
    try:
        RerunStateMachinePlugin(**values)
    except ResiliencyConfigError:
        pass
