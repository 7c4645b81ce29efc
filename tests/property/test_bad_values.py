"""Random bad values for every field of every plugin: only ResiliencyConfigError may come out, and it names
the plugin and the field."""

from __future__ import annotations

import pytest
from hypothesis import given, settings

from nemo_resiliency_plugins import (
    FaultTolerancePlugin,
    InProcessRestartPlugin,
    PreemptionPlugin,
    RerunStateMachinePlugin,
    ResiliencyConfigError,
    StragglerDetectionPlugin,
)
from tests.property.strategies import anything, each_class_of_anything, init_fields

PLUGINS = [
    FaultTolerancePlugin,
    StragglerDetectionPlugin,
    RerunStateMachinePlugin,
    PreemptionPlugin,
    InProcessRestartPlugin,
]


@pytest.mark.parametrize(
    ("cls", "field"),
    [(cls, name) for cls in PLUGINS for name in init_fields(cls)],
    ids=lambda v: getattr(v, "__name__", v),
)
@settings(max_examples=12, deadline=None)
@given(value=anything)
@each_class_of_anything
def test_only_resiliency_config_error_escapes(cls, field, value):
    try:
        cls(**{field: value})
    except ResiliencyConfigError as err:
        assert cls.__name__ in str(err)
        assert err.field is not None, "every refusal at construction names a field"
