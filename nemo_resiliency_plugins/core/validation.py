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

# Names that may reach a shell, a Hydra override or a YAML file unquoted. Every pattern here is used with
# re.fullmatch: Python's end-of-string anchor also matches before a trailing newline, so an anchored re.match
# would accept "x\n".
_SAFE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: The characters ``shlex.quote`` leaves unquoted: a word made only of these means the same to bash quoted or
#: not, so it is safe on a line NeMo-Run writes without quotes (``export NAME=value``, an ``srun`` argument).
SHELL_WORD = re.compile(r"[A-Za-z0-9_@%+=:,./-]+")
SHELL_WORD_TEXT = "letters, digits and _@%+=:,./-"

#: Signals whose default action ends a process (POSIX "terminate" or "core"). NVRx sends
#: ``rank_termination_signal`` to a hung rank; SIGSTOP, SIGCONT, SIGCHLD, SIGWINCH, SIGURG... leave it
#: running, so the hang would never end.
TERMINATING_SIGNALS = (
    "SIGKILL",
    "SIGTERM",
    "SIGINT",
    "SIGQUIT",
    "SIGHUP",
    "SIGABRT",
    "SIGUSR1",
    "SIGUSR2",
    "SIGALRM",
    "SIGSEGV",
    "SIGBUS",
    "SIGILL",
    "SIGFPE",
    "SIGTRAP",
    "SIGSYS",
    "SIGXCPU",
    "SIGXFSZ",
    "SIGPIPE",
)


def is_shell_word(value: Any) -> bool:
    """True when ``value`` is a non-empty string bash reads as exactly itself without quotes."""
    return isinstance(value, str) and SHELL_WORD.fullmatch(value) is not None


def is_finite_number(value: Any) -> bool:
    """An int or float (not bool) that is finite as a float.

    ``math.isfinite(10**400)`` raises OverflowError; such an int is refused like ``inf``, since every consumer
    (YAML, NVRx, torch) turns it into a float.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(float(value))
    except OverflowError:
        return False


def importable_function_problem(fn: Any) -> str | None:
    """Why NeMo-Run could not serialize ``fn`` as a plugin field, or None when it can.

    NeMo-Run serializes plugins with fiddle (``exp.dryrun()``, ``exp.run()``), which stores a function by
    ``module`` + ``qualname`` and fails on anything it cannot import back: lambdas, functions defined inside
    another function, bound methods, callable objects.
    """
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str):
        return "it has no importable module and name (a callable object?)"
    if "<lambda>" in qualname:
        return "it is a lambda"
    if "<locals>" in qualname:
        return "it is defined inside another function"
    import importlib

    try:
        found: Any = importlib.import_module(module)
        for part in qualname.split("."):
            found = getattr(found, part)
    except Exception:
        return f"{module}.{qualname} cannot be imported back"
    if found is not fn:
        return f"{module}.{qualname} imports back as a different object"
    return None


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
        if not is_finite_number(value):
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
        if not isinstance(value, str) or _SAFE_NAME.fullmatch(value) is None:
            self.fail(field, value, "a name of letters, digits and underscores" + (" or None" if optional else ""))

    def path(self, field: str, value: Any, *, optional: bool = False) -> None:
        """A filesystem path that cannot turn into a command or an interpolation where it is written."""
        if optional and value is None:
            return
        allowed = "a path without newlines, quotes, '$', '`' or ';'" + (" or None" if optional else "")
        if not isinstance(value, str) or not value or re.fullmatch(r"[^\n\r\0'\"$`;]+", value) is None:
            self.fail(field, value, allowed)

    def signal_name(self, field: str, value: Any) -> None:
        """A signal, by name, whose default action ends the process it is sent to (see TERMINATING_SIGNALS)."""
        names = [n for n in TERMINATING_SIGNALS if hasattr(signal, n)]
        if not isinstance(value, str) or value.upper() not in names:
            self.fail(field, value, "a signal that ends a process: one of " + ", ".join(names))

    def log_level(self, field: str, value: Any) -> None:
        if not isinstance(value, str) or value.upper() not in LOG_LEVELS:
            self.fail(field, value, "one of " + ", ".join(LOG_LEVELS))

    def callable_or_none(self, field: str, value: Any) -> None:
        """None or a module-level function (NeMo-Run serializes plugins, so it must import back by name)."""
        allowed = "None or a module-level function taking the plugin's script args and returning a list of str"
        if value is None:
            return
        if not callable(value):
            self.fail(field, value, allowed)
        problem = importable_function_problem(value)
        if problem:
            self.fail(
                field,
                value,
                allowed,
                detail=f"NeMo-Run serializes plugins with fiddle by module and name, and {problem}",
            )

    def timeouts_mapping(self, field: str, value: Any) -> None:
        """A ``{section_name: seconds or None}`` mapping, as NVRx's ``rank_section_timeouts``."""
        allowed = "a dict of section name -> positive seconds (or None for 'monitored, no timeout')"
        if not isinstance(value, Mapping):
            self.fail(field, value, allowed)
        for key, seconds in value.items():
            if not isinstance(key, str) or _SAFE_NAME.fullmatch(key) is None:
                self.fail(field, value, allowed, detail=f"section name {key!r} is not a plain identifier")
            if seconds is None:
                continue
            if not is_finite_number(seconds):
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


# --------------------------------------------------------------------------------- keywords a plugin takes

#: Keywords of NeMo 2's plugins of the same names (``nemo.lightning.run.plugins``) that neither Megatron Bridge's
#: plugins nor these take: code written for NeMo 2 passes them, and would otherwise get a bare TypeError.
NEMO2_KEYWORDS = {
    "callbacks": "NeMo 2's PreemptionPlugin(callbacks=[...]) adds Lightning callbacks to a NeMo 2 trainer",
    "sig": "NeMo 2's PreemptionPlugin(sig=...) is the preemption signal",
}


class KnownKeywords:
    """Base of every plugin: an unknown keyword is a :class:`ResiliencyConfigError`, not a bare ``TypeError``.

    The dataclass ``__init__`` raises ``TypeError: __init__() got an unexpected keyword argument`` for a field the
    plugin does not have. Code written for NeMo 2's plugins of the same names (``callbacks=``, ``sig=``) hits
    that first, and the message does not say that the task is the wrong kind. ``__new__`` sees the keywords
    before ``__init__`` does. ``copy``/``pickle``/fiddle call ``__new__`` without keywords and are not affected.
    """

    def __new__(cls, *args: Any, **kwargs: Any):
        import dataclasses

        if dataclasses.is_dataclass(cls):
            known = {f.name for f in dataclasses.fields(cls) if f.init}
            unknown = [k for k in kwargs if k not in known]
            if unknown:
                name = unknown[0]
                detail = f"{cls.__name__} has no field {name!r}"
                if name in NEMO2_KEYWORDS:
                    detail = (
                        f"{NEMO2_KEYWORDS[name]}; {cls.__name__} here is the drop-in for Megatron Bridge's "
                        "megatron.bridge.recipes.run_plugins, which configures Megatron Bridge's ConfigContainer. "
                        "For a NeMo 2 task (run.Partial(llm.pretrain, trainer=..., ...)) use NeMo 2's own plugins, "
                        f"nemo.lightning.run.plugins.{cls.__name__}"
                    )
                raise ResiliencyConfigError(
                    cls.__name__, name, kwargs[name], "one of " + ", ".join(sorted(known)), detail=detail
                )
        return super().__new__(cls)
