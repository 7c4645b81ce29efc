"""Hypothesis strategies shared by the property tests."""

from __future__ import annotations

import dataclasses
import signal

from hypothesis import strategies as st

# Any value a user might put in a plugin field by mistake: wrong types, non-finite numbers, near-miss
# strings, containers, arbitrary objects.
anything = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**9), max_value=10**9),
    st.sampled_from([10**400, -(10**400), 2**63, 2**64 + 1]),  # beyond float and 64-bit shell arithmetic
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30),
    st.sampled_from(["disabled", "validate_results", "report_determinism_stats", "transient_error", "a.b"]),
    st.sampled_from([s.name for s in signal.Signals] + list(signal.Signals)),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=8), st.one_of(st.floats(), st.text(max_size=5), st.none()), max_size=3),
    st.builds(object),
)

#: One value of each branch of :data:`anything`: run as explicit examples beside the (few, derandomized) generated
#: ones, so that no branch depends on what the generator happens to draw.
ANYTHING_CLASSES = [
    None,
    True,
    -(10**9),
    10**400,
    2**64 + 1,
    float("nan"),
    float("-inf"),
    "",
    "disabled",
    "SIGTERM",
    signal.SIGKILL,
    [1, 2],
    {"a": None},
    object(),
]


def each_class_of_anything(test):
    """``test`` also runs on one value of every branch of :data:`anything` (its parameter is ``value``)."""
    from hypothesis import example

    for value in ANYTHING_CLASSES:
        test = example(value=value)(test)
    return test


def init_fields(cls: type) -> list[str]:
    return [f.name for f in dataclasses.fields(cls) if f.init and f.name != "experiment_id"]
