"""Hydra-style override strings: write values so Megatron Bridge reads back the intended types, and read
back the overrides a user already put in ``run.Script.args``.

Megatron Bridge's scripts parse ``task.args`` with Hydra's override grammar
(``megatron.bridge.training.utils.omegaconf_utils.process_config_with_overrides``). A Python value turned
into text with ``str()`` does not always survive that trip: ``str(True)`` happens to work, but a string
such as ``"3"`` or ``"null"`` comes back as an int or None, and a string containing ``,`` or ``${`` is
reinterpreted. :func:`format_value` writes each type in a form the grammar returns unchanged. Reading is
left to Hydra's own override parser (hydra-core, the one Megatron Bridge uses), so what we compare with a
plugin's value is exactly what the job will read, and a malformed override is found before launch.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# Words Hydra's grammar reads as something other than a string when unquoted.
_KEYWORDS = {"true", "false", "null", "none", "inf", "-inf", "+inf", "nan"}
# Absolute paths are fine unquoted: Hydra's grammar reads /a/b.c as a string.
# Both used with re.fullmatch (``$`` would accept a trailing newline).
_BARE_STRING = re.compile(r"[A-Za-z_/][A-Za-z0-9_./-]*")
# A relative path (Megatron Bridge's tutorial: checkpoint.save=./checkpoints/llama32_1b) is read unquoted as a
# string too. Quoting it would put quotes in the override, and on LocalExecutor those reach the script literally.
_RELATIVE_PATH = re.compile(r"\.{1,2}/[A-Za-z0-9_./-]*")
_OVERRIDE = re.compile(
    r"(?P<prefix>\+{0,2}|~)(?P<key>[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)(?:=(?P<value>.*))?", re.S
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
        if _BARE_STRING.fullmatch(value) and value.lower() not in _KEYWORDS:
            return value
        if _RELATIVE_PATH.fullmatch(value):
            return value
        return _quote(value)
    if isinstance(value, Mapping):
        return "{" + ",".join(f"{k}:{format_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, Sequence):
        return "[" + ",".join(format_value(v) for v in value) + "]"
    raise TypeError(f"no Hydra override form for {type(value).__name__} value {value!r}")


def _quote(text: str) -> str:
    """A single-quoted Hydra string that Hydra, then OmegaConf, read back as exactly ``text``.

    OmegaConf resolves ``${...}`` even inside quotes unless it is escaped (``\\${``, with any backslashes
    before it doubled); Hydra's quoted strings treat a backslash as an escape only before a quote (and before
    the closing quote), so only those runs are doubled and ``'`` becomes ``\\'``.
    """
    if any(c in text for c in "\n\r\0"):
        raise ValueError(f"string {text!r} contains a line break or NUL; it cannot be a config value")
    body = re.sub(r"(\\*)\$\{", lambda m: m.group(1) * 2 + "\\${", text)
    body = re.sub(r"(\\*)('|\Z)", lambda m: m.group(1) * 2 + ("\\'" if m.group(2) else ""), body)
    return f"'{body}'"


class OverrideSyntaxError(ValueError):
    """A ``task.args`` item shaped like an override that Hydra's parser rejects (the job would fail on it)."""

    def __init__(self, arg: str, reason: str) -> None:
        self.arg = arg
        self.key = _key_of(arg)
        self.reason = reason
        super().__init__(f"{arg!r} is not a valid Hydra override: {reason}")


@dataclass(frozen=True)
class Override:
    """One ``[+|++|~]key[=value]`` item of ``task.args``, as Hydra's own parser reads it.

    ``value`` is what Megatron Bridge's ``process_config_with_overrides`` will get (Hydra's
    ``Override.value()``); ``raw_value`` is the text after ``=``, for messages.
    """

    index: int
    prefix: str
    key: str
    raw_value: str | None
    value: Any = None


def _key_of(arg: str) -> str | None:
    match = _OVERRIDE.fullmatch(arg)
    return match.group("key") if match else None


@functools.cache
def _parser() -> Any:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    return OverridesParser.create()


def _hydra_parse(arg: str) -> Any:
    """Hydra's ``Override`` for ``arg``; :class:`OverrideSyntaxError` when Hydra rejects it or it is a sweep."""
    from hydra.errors import HydraException

    try:
        (parsed,) = _parser().parse_overrides([arg])
    except HydraException as err:
        raise OverrideSyntaxError(arg, str(err).splitlines()[0]) from None
    if parsed.is_sweep_override():
        raise OverrideSyntaxError(arg, "it is a sweep (a ',' list, choice() or range()), not one value")
    return parsed


def find_overrides(args: Sequence[str]) -> list[Override]:
    """The items of ``args`` that are Hydra overrides, parsed by Hydra (other arguments are left alone).

    An item shaped like an override (``[+|++|~]dotted.key[=...]``) that Hydra cannot parse raises
    :class:`OverrideSyntaxError`: the job would fail on it, and its value cannot be compared with a plugin's.
    """
    found = []
    for index, arg in enumerate(args):
        if not isinstance(arg, str):
            continue
        match = _OVERRIDE.fullmatch(arg)
        if not match or (match.group("value") is None and match.group("prefix") != "~"):
            continue
        parsed = _hydra_parse(arg)
        value = None if match.group("prefix") == "~" else parsed.value()
        found.append(Override(index, match.group("prefix"), match.group("key"), match.group("value"), value))
    return resolve_references(found)


#: A value that is only a reference to another config node: ``${checkpoint.save}`` (absolute) or ``${.save}``
#: (relative: one dot is the node's own section, each further dot one section up). Resolvers (``${oc.env:X}``)
#: and text around a reference are not: they depend on the job's environment or need OmegaConf's grammar.
_NODE_REFERENCE = re.compile(r"\$\{(\.*)([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)\}")
_MISSING = object()


def resolve_references(overrides: Sequence[Override]) -> list[Override]:
    """``overrides`` with each value that names another node (``checkpoint.load=${checkpoint.save}``) replaced by
    that node's value, where the overrides themselves set it.

    Megatron Bridge applies every override, then resolves interpolations over the whole config
    (``OmegaConf.to_container(..., resolve=True)`` in ``process_config_with_overrides``), so such a value is the
    referenced node's *final* value: the last override of that key. A reference to a node the overrides do not
    set (the recipe's value, invisible here), a resolver, or a cycle is left as written.
    """
    final: dict[str, Any] = {}
    for override in overrides:
        if override.prefix == "~":
            for key in [k for k in final if k == override.key or k.startswith(override.key + ".")]:
                del final[key]
            continue
        final[override.key] = override.value
    resolved = []
    for override in overrides:
        value = _follow(override.key, override.value, final, depth=0)
        resolved.append(override if value is _MISSING else dataclasses.replace(override, value=value))
    return resolved


def _follow(key: str, value: Any, final: Mapping[str, Any], depth: int) -> Any:
    """What ``value`` (the value of ``key``) stands for when it is a node reference, else ``_MISSING``.

    References are followed as far as the overrides go; one that ends at a node the overrides do not set is
    written in its absolute form (``${.save}`` in ``checkpoint`` -> ``${checkpoint.save}``), so two keys that end
    at the same unknown node, or at the same resolver text, still compare equal.
    """
    match = _NODE_REFERENCE.fullmatch(value) if isinstance(value, str) else None
    if match is None or depth > 16:  # not a reference, or a cycle (the job fails on it; left as written)
        return _MISSING
    dots, path = match.groups()
    if dots:
        parent = key.split(".")[:-1]
        up = len(dots) - 1
        if up > len(parent):
            return _MISSING
        path = ".".join([*parent[: len(parent) - up], path])
    target = _lookup(final, path)
    if target is _MISSING:
        return "${" + path + "}"
    deeper = _follow(path, target, final, depth + 1)
    return target if deeper is _MISSING else deeper


def _lookup(final: Mapping[str, Any], path: str) -> Any:
    """The value the overrides give ``path``: set directly, or inside a mapping set on a section above it."""
    if path in final:
        return final[path]
    parts = path.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        node = final.get(".".join(parts[:cut]), _MISSING)
        for part in parts[cut:]:
            node = node.get(part, _MISSING) if isinstance(node, Mapping) else _MISSING
        if node is not _MISSING:
            return node
    return _MISSING


def parse_value(text: str) -> Any:
    """Parse an override value exactly as the job reads it: Hydra's override parser, then OmegaConf's
    un-escaping of ``\\${`` (a real interpolation, which depends on the rest of the config, is left as text)."""
    return _resolved(_hydra_parse(f"nrp_value={text}").value())


def _resolved(value: Any) -> Any:
    if not isinstance(value, (str, list, dict)) or "${" not in repr(value):
        return value
    from omegaconf import OmegaConf

    try:
        return OmegaConf.to_container(OmegaConf.create({"v": value}), resolve=True)["v"]
    except Exception:  # an interpolation of another key: only the whole config can resolve it
        return value


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
