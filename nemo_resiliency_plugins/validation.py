"""Small, strict value checks shared by every plugin's validation step.

Plugins call these from ``__post_init__`` (their one ``finalize()``-style place), so a bad value fails when
the plugin is built, with a :class:`ResiliencyConfigError` naming plugin, field, value and what is allowed.
``bool`` is rejected where a number is expected (``True`` is an ``int`` in Python, but ``timeout=True`` is
always a mistake), and non-finite numbers are rejected everywhere.
"""

from __future__ import annotations

import math
import re
import signal
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from nemo_resiliency_plugins.errors import ResiliencyConfigError

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")

# Names that may reach a shell, a Hydra override or a YAML file unquoted.
_SAFE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class Checker:
    """Checks values for one plugin; every failure names that plugin."""

    plugin: str

    def fail(self, field: str, value: Any, allowed: str, detail: str | None = None) -> None:
        raise ResiliencyConfigError(self.plugin, field, value, allowed, detail=detail)

    def boolean(self, field: str, value: Any) -> None:
        if not isinstance(value, bool):
            self.fail(field, value, "True or False")

    def integer(self, field: str, value: Any, *, min: int | None = None, max: int | None = None) -> None:
        allowed = _range_text("an integer", min, max)
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(field, value, allowed)
        if (min is not None and value < min) or (max is not None and value > max):
            self.fail(field, value, allowed)

    def number(
        self,
        field: str,
        value: Any,
        *,
        min: float | None = None,
        max: float | None = None,
        positive: bool = False,
        optional: bool = False,
    ) -> None:
        if optional and value is None:
            return
        base = "a positive number" if positive else "a number"
        allowed = _range_text(base, min, max) + (" or None" if optional else "")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            self.fail(field, value, allowed)
        if positive and value <= 0:
            self.fail(field, value, allowed)
        if (min is not None and value < min) or (max is not None and value > max):
            self.fail(field, value, allowed)

    def choice(self, field: str, value: Any, choices: Iterable[Any]) -> None:
        options = tuple(choices)
        if isinstance(value, bool) or value not in options or type(value) not in {type(o) for o in options}:
            self.fail(field, value, "one of " + ", ".join(repr(o) for o in options))

    def name(self, field: str, value: Any, *, optional: bool = False) -> None:
        """An identifier-like string: letters, digits, underscores (safe in shells, YAML and overrides)."""
        if optional and value is None:
            return
        if not isinstance(value, str) or not _SAFE_NAME.match(value):
            self.fail(field, value, "a name of letters, digits and underscores" + (" or None" if optional else ""))

    def path(self, field: str, value: Any, *, optional: bool = False) -> None:
        """A filesystem path that cannot turn into a command or an interpolation where it is written."""
        if optional and value is None:
            return
        allowed = "a path without newlines, quotes, '$', '`' or ';'" + (" or None" if optional else "")
        if not isinstance(value, str) or not value or re.search(r"[\n\r\0'\"$`;]", value):
            self.fail(field, value, allowed)

    def signal_name(self, field: str, value: Any) -> None:
        names = sorted(s.name for s in signal.Signals if s.name.startswith("SIG") and "_" not in s.name)
        if not isinstance(value, str) or value.upper() not in names:
            self.fail(field, value, "a signal name such as 'SIGKILL' or 'SIGTERM'")

    def log_level(self, field: str, value: Any) -> None:
        if not isinstance(value, str) or value.upper() not in LOG_LEVELS:
            self.fail(field, value, "one of " + ", ".join(LOG_LEVELS))

    def callable_or_none(self, field: str, value: Any) -> None:
        if value is not None and not callable(value):
            self.fail(field, value, "a function taking the plugin's script args and returning a list of str")

    def timeouts_mapping(self, field: str, value: Any) -> None:
        """A ``{section_name: seconds or None}`` mapping, as NVRx's ``rank_section_timeouts``."""
        allowed = "a dict of section name -> positive seconds (or None for 'monitored, no timeout')"
        if not isinstance(value, Mapping):
            self.fail(field, value, allowed)
        for key, seconds in value.items():
            if not isinstance(key, str) or not _SAFE_NAME.match(key):
                self.fail(field, value, allowed, detail=f"section name {key!r} is not a plain identifier")
            if seconds is None:
                continue
            if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not math.isfinite(seconds):
                self.fail(field, value, allowed, detail=f"timeout of section {key!r} is {seconds!r}")
            if seconds <= 0:
                self.fail(field, value, allowed, detail=f"timeout of section {key!r} is {seconds!r}")


def _range_text(base: str, min: float | None, max: float | None) -> str:
    if min is not None and max is not None:
        return f"{base} in [{min}, {max}]"
    if min is not None:
        return f"{base} >= {min}"
    if max is not None:
        return f"{base} <= {max}"
    return base
