"""The one error type users see from this package.

Every bad setting is reported at plugin construction (or at ``setup()`` when the executor or task decides
whether it is bad) as a :class:`ResiliencyConfigError` that names the plugin, the field, the offending value
and what would be accepted, so a mistake shows up on the laptop that launches the job, not as a stack trace
from deep inside a library on the cluster hours later.
"""

from __future__ import annotations

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


def _short_repr(value: Any, limit: int = 120) -> str:
    try:
        text = repr(value)
    except Exception:  # a user object whose __repr__ raises must not hide the real error
        text = f"<{type(value).__name__} object>"
    return text if len(text) <= limit else text[: limit - 3] + "..."
