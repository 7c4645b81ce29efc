"""Hydra-style override strings: write values so Megatron Bridge reads back the intended types, and read
back the overrides a user already put in ``run.Script.args``.

Megatron Bridge's scripts parse ``task.args`` with Hydra's override grammar
(``megatron.bridge.training.utils.omegaconf_utils.process_config_with_overrides``). A Python value turned
into text with ``str()`` does not always survive that trip: ``str(True)`` happens to work, but a string
such as ``"3"`` or ``"null"`` comes back as an int or None, and a string containing ``,`` or ``${`` is
reinterpreted. :func:`format_value` writes each type in a form the grammar returns unchanged, and
:func:`parse_value` is the small inverse we need to compare a user's existing override with ours.
"""

from __future__ import annotations

import math
import re
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# Words Hydra's grammar reads as something other than a string when unquoted.
_KEYWORDS = {"true", "false", "null", "none", "inf", "-inf", "+inf", "nan"}
# Absolute paths are fine unquoted: Hydra's grammar reads /a/b.c as a string.
_BARE_STRING = re.compile(r"^[A-Za-z_/][A-Za-z0-9_./-]*$")
_OVERRIDE = re.compile(
    r"^(?P<prefix>\+{0,2}|~)(?P<key>[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)(?:=(?P<value>.*))?$", re.S
)


def format_value(value: Any) -> str:
    """Render ``value`` as a Hydra override value that parses back to an equal Python value."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, signal.Signals):
        # Megatron Bridge's TrainingConfig.exit_signal is a signal.Signals; its int value round-trips as an
        # int that signal.Signals(...) accepts, while a name would arrive as a plain string.
        return str(int(value))
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"non-finite float {value!r} has no safe override form")
        text = repr(value)
        return text if any(c in text for c in ".e") else text + ".0"
    if isinstance(value, str):
        if _BARE_STRING.match(value) and value.lower() not in _KEYWORDS:
            return value
        return _quote(value)
    if isinstance(value, Mapping):
        return "{" + ",".join(f"{k}:{format_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, Sequence):
        return "[" + ",".join(format_value(v) for v in value) + "]"
    raise TypeError(f"no Hydra override form for {type(value).__name__} value {value!r}")


def _quote(text: str) -> str:
    if any(c in text for c in "\n\r\0"):
        raise ValueError(f"string {text!r} contains a line break or NUL; it cannot be a config value")
    # OmegaConf would resolve ${...} even inside quotes; escape it so the text arrives literally.
    body = text.replace("\\", "\\\\").replace("'", "\\'").replace("${", "\\${")
    return f"'{body}'"


@dataclass(frozen=True)
class Override:
    """One ``[+|++|~]key[=value]`` item of ``task.args``."""

    index: int
    prefix: str
    key: str
    raw_value: str | None


def find_overrides(args: Sequence[str]) -> list[Override]:
    """The items of ``args`` that are Hydra overrides (other arguments are left alone)."""
    found = []
    for index, arg in enumerate(args):
        if not isinstance(arg, str):
            continue
        match = _OVERRIDE.match(arg)
        if match and (match.group("value") is not None or match.group("prefix") == "~"):
            found.append(Override(index, match.group("prefix"), match.group("key"), match.group("value")))
    return found


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def parse(self) -> Any:
        value = self.value(top=True)
        if self.pos != len(self.text):
            raise ValueError(f"unexpected text at {self.pos} in {self.text!r}")
        return value

    def value(self, top: bool = False) -> Any:
        self.skip_ws()
        if self.peek() == "[":
            return self.sequence()
        if self.peek() == "{":
            return self.mapping()
        if self.peek() in ("'", '"'):
            return self.quoted()
        stop = "" if top else ",]}"
        start = self.pos
        while self.pos < len(self.text) and self.text[self.pos] not in stop:
            self.pos += 1
        return _primitive(self.text[start : self.pos].strip())

    def sequence(self) -> list:
        self.pos += 1
        items = []
        self.skip_ws()
        if self.peek() == "]":
            self.pos += 1
            return items
        while True:
            items.append(self.value())
            self.skip_ws()
            char = self.take()
            if char == "]":
                return items
            if char != ",":
                raise ValueError(f"expected ',' or ']' in {self.text!r}")

    def mapping(self) -> dict:
        self.pos += 1
        items: dict[str, Any] = {}
        self.skip_ws()
        if self.peek() == "}":
            self.pos += 1
            return items
        while True:
            self.skip_ws()
            start = self.pos
            while self.pos < len(self.text) and self.text[self.pos] != ":":
                self.pos += 1
            key = self.text[start : self.pos].strip()
            self.pos += 1
            items[key] = self.value()
            self.skip_ws()
            char = self.take()
            if char == "}":
                return items
            if char != ",":
                raise ValueError(f"expected ',' or '}}' in {self.text!r}")

    def quoted(self) -> str:
        quote = self.take()
        out = []
        while True:
            char = self.take()
            if char == "":
                raise ValueError(f"unterminated string in {self.text!r}")
            if char == "\\":
                out.append(self.take())
            elif char == quote:
                return "".join(out)
            else:
                out.append(char)

    def skip_ws(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos] == " ":
            self.pos += 1

    def peek(self) -> str:
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def take(self) -> str:
        char = self.peek()
        self.pos += 1
        return char


def _primitive(text: str) -> Any:
    lowered = text.lower()
    if lowered == "true":
        return True
    if lowered == "false":
        return False
    if lowered in ("null", "none", ""):
        return None
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text


def parse_value(text: str) -> Any:
    """Parse an override value the way Hydra's grammar types it (primitives, quoted strings, [..], {..})."""
    return _Parser(text).parse()


def same_value(a: Any, b: Any) -> bool:
    """Equality as the parsed config sees it: 1 == 1.0, but True is not 1."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, signal.Signals) or isinstance(b, signal.Signals):
        return _signal_number(a) == _signal_number(b)
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(same_value(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def _signal_number(value: Any) -> Any:
    if isinstance(value, signal.Signals):
        return int(value)
    if isinstance(value, str) and value.upper().startswith("SIG") and hasattr(signal, value.upper()):
        return int(getattr(signal, value.upper()))
    return value
