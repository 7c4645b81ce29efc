"""What a ResiliencyConfigError shows of the offending value (issue 50: nothing printed depends on a path's length)."""

from __future__ import annotations

from pathlib import Path

from nemo_resiliency_plugins.errors import ResiliencyConfigError


def test_a_deep_path_is_shown_whole():
    deep = "/tmp/" + "/".join(["deeper-checkout-path"] * 14) + "/experiments/crafted/crafted_1796678016856447665"
    assert len(deep) > 300
    for value in (deep, Path(deep), "~" + deep):
        message = str(ResiliencyConfigError("nemo-resiliency", "EXPERIMENT_DIR", value, "an experiment directory"))
        assert str(value) in message and "..." not in message, message


def test_any_other_long_value_is_cut_to_one_readable_line():
    for value in ("x" * 500, "relative/" * 40, "/multi\nline" * 30, list(range(200))):
        message = str(ResiliencyConfigError("FaultTolerancePlugin", "field", value, "something short"))
        shown = message.split("= ", 1)[1].split(" is not allowed")[0]
        assert len(shown) == 120 and shown.endswith("..."), shown
