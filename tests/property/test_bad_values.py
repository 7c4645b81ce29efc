"""Random bad values for every field of every plugin: only ResiliencyConfigError may come out."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nemo_resiliency_plugins import FaultTolerancePlugin, ResiliencyConfigError

PLUGINS = [FaultTolerancePlugin]

anything = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**9), max_value=10**9),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30),
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
        assert cls.__name__ in str(err)
