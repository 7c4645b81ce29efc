import signal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nemo_resiliency_plugins.core.hydra_overrides import find_overrides, format_value, parse_value, same_value


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (True, "true"),
        (False, "false"),
        (None, "null"),
        (3, "3"),
        (0.7, "0.7"),
        (300.0, "300.0"),
        ("rank", "rank"),
        ("null", "'null'"),
        ("3", "'3'"),
        ("a b", "'a b'"),
        ("x${oops}", "'x\\${oops}'"),
        (signal.SIGTERM, "15"),
        ([0, 3], "[0,3]"),
    ],
)
def test_format_value(value, text):
    assert format_value(value) == text


def test_format_value_refuses_newlines_and_nonfinite():
    with pytest.raises(ValueError):
        format_value("a\nb")
    with pytest.raises(ValueError):
        format_value(float("nan"))


scalars = st.one_of(
    st.booleans(),
    st.none(),
    st.integers(min_value=-(10**12), max_value=10**12),
    st.floats(allow_nan=False, allow_infinity=False, width=64),
    st.text(alphabet=st.characters(blacklist_characters="\n\r\0", blacklist_categories=("Cs",)), max_size=20),
)


@given(scalars)
def test_parse_inverts_format(value):
    assert same_value(parse_value(format_value(value)), value)


def test_find_overrides_reads_prefixes_and_skips_other_args():
    found = find_overrides(["--flag", "train.train_iters=5", "++ft.x=1", "+a.b=c", "~ft", "positional"])
    assert [(o.prefix, o.key, o.raw_value) for o in found] == [
        ("", "train.train_iters", "5"),
        ("++", "ft.x", "1"),
        ("+", "a.b", "c"),
        ("~", "ft", None),
    ]


def test_same_value_distinguishes_bool_from_int():
    assert same_value(1, 1.0)
    assert not same_value(True, 1)
    assert same_value(signal.SIGTERM, "SIGTERM")
