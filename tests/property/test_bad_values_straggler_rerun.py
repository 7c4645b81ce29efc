"""Random bad values for every field of StragglerDetectionPlugin and RerunStateMachinePlugin: only
ResiliencyConfigError may come out, and it names the plugin; a value the plugin accepts builds a plugin whose
overrides Megatron Bridge's finalize() would accept too (checked in tests/contract)."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nemo_resiliency_plugins import RerunStateMachinePlugin, ResiliencyConfigError, StragglerDetectionPlugin

PLUGINS = [StragglerDetectionPlugin, RerunStateMachinePlugin]

anything = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**9), max_value=10**9),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30),
    st.sampled_from(["disabled", "validate_results", "report_determinism_stats", "transient_error", "a.b"]),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=8), st.one_of(st.floats(), st.text(max_size=5), st.none()), max_size=3),
    st.builds(object),
)


def init_fields(cls):
    return [f.name for f in dataclasses.fields(cls) if f.init and f.name != "experiment_id"]


@pytest.mark.parametrize(
    ("cls", "field"),
    [(cls, name) for cls in PLUGINS for name in init_fields(cls)],
    ids=lambda v: getattr(v, "__name__", v),
)
@settings(max_examples=60, deadline=None)
@given(value=anything)
def test_only_resiliency_config_error_escapes(cls, field, value):
    try:
        cls(**{field: value})
    except ResiliencyConfigError as err:
        assert f"{cls.__name__}.{field}" in str(err) or cls.__name__ in str(err)


@settings(max_examples=200, deadline=None)
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


@settings(max_examples=200, deadline=None)
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
