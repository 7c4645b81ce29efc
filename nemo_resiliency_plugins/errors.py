"""The one error type users see from this package.

Every bad setting is reported at plugin construction (or at ``setup()`` when the executor or task decides
whether it is bad) as a :class:`ResiliencyConfigError` that names the plugin, the field, the offending value
and what would be accepted, so a mistake shows up on the laptop that launches the job, not as a stack trace
from deep inside a library on the cluster hours later.
"""

from __future__ import annotations

import os
from typing import Any


class ResiliencyConfigError(ValueError):
    """A resiliency setting that cannot work, with what would.

    It subclasses ``ValueError`` so code that already guards configuration with ``except ValueError`` keeps
    working.
    """

    def __init__(
        self,
        plugin: str,
        field: str | None,
        value: Any = None,
        allowed: str | None = None,
        *,
        detail: str | None = None,
    ) -> None:
        self.plugin = plugin
        self.field = field
        self.value = value
        self.allowed = allowed
        self.detail = detail
        super().__init__(self._message())

    def _message(self) -> str:
        where = f"{self.plugin}.{self.field}" if self.field else self.plugin
        parts = [where]
        if self.field is not None:
            parts.append(f"= {_short_repr(self.value)}")
        text = " ".join(parts)
        if self.allowed:
            text += f" is not allowed: expected {self.allowed}"
        if self.detail:
            text += (". " if self.allowed else ": ") + self.detail
        return text

    def __reduce__(self):  # keep the error picklable (multiprocessing, pytest-xdist)
        return (_rebuild, (self.plugin, self.field, self.value, self.allowed, self.detail))


def _rebuild(plugin, field, value, allowed, detail):
    return ResiliencyConfigError(plugin, field, value, allowed, detail=detail)


#: Linux's PATH_MAX: a path up to this long is shown whole.
_PATH_MAX = 4096


def _is_path_value(value: Any) -> bool:
    """A filesystem path (a PathLike, or an absolute or home-relative string of one line)."""
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    return isinstance(value, str) and value.startswith(("/", "~")) and value.isprintable()


def _short_repr(value: Any, limit: int = 120) -> str:
    """The value as the error shows it: cut at ``limit`` characters (a hostile or huge value stays one readable
    line), except a path, which is shown whole up to PATH_MAX: what an error says must not depend on how deep a
    checkout or a job directory is (a cut path once hid the part that told one directory from another)."""
    try:
        text = repr(value)
    except Exception:  # a user object whose __repr__ raises must not hide the real error
        text = f"<{type(value).__name__} object>"
    if _is_path_value(value):
        limit = _PATH_MAX
    return text if len(text) <= limit else text[: limit - 3] + "..."
