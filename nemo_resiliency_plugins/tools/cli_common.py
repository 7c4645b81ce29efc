"""What every ``nemo-resiliency`` command shares: the typer app, the consoles, the one-line errors and the
argument checks (each bad argument is one line on stderr and exit code 2; see :mod:`.cli`)."""

from __future__ import annotations

import contextlib
import functools
import io
import json
import logging
import math
import os
import sys
from collections.abc import Callable
from typing import Any

import typer
from rich.console import Console

from nemo_resiliency_plugins.tools.requirements import (
    EXIT_MISSING_MODULE,
    MissingModule,
    import_failure_message,
    require_plotting,
)

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Resiliency recipes for NeMo-Run + Megatron Bridge.")


console = Console()


# Errors go to stderr: stdout is redirected while NeMo-Run runs, and a script piping stdout still sees them.
err_console = Console(stderr=True, soft_wrap=True, highlight=False)


class UsageError(Exception):
    """A bad command-line argument, with the message to show (one line)."""


def _fail(command: str, message: str, code: int = 2) -> None:
    text = " ".join(str(message).split())  # one line, whatever the message held
    err_console.print(f"nemo-resiliency {command}: error: {text}", markup=False)
    raise typer.Exit(code)


def _guarded(command: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Turn any error escaping a command into one stderr line and exit code 2.

    ResiliencyConfigError and UsageError are expected (a bad value, a bad argument); anything else is
    reported the same way with its type, so a user never gets a traceback from this CLI.
    """

    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def run_guarded(*args: Any, **kwargs: Any) -> Any:
            try:
                return fn(*args, **kwargs)
            except (typer.Exit, typer.Abort, KeyboardInterrupt):
                raise
            except UsageError as err:
                _fail(command, str(err))
            except MissingModule as err:  # an optional piece, checked before any work
                _fail(command, str(err), EXIT_MISSING_MODULE)
            except ImportError as err:  # not a bad argument: a module missing here (exit 3, not 2)
                _fail(command, import_failure_message(err), EXIT_MISSING_MODULE)
            except Exception as err:  # noqa: BLE001 - the CLI's promise: one line, never a traceback
                from nemo_resiliency_plugins.errors import ResiliencyConfigError

                text = str(err) if isinstance(err, ResiliencyConfigError) else f"{type(err).__name__}: {err}"
                _fail(command, text)

        return run_guarded

    return wrap


def _positive(option: str, value: float | int | None, *, integer: bool = False) -> None:
    """``--step-time``, ``--save-time``, ``--nodes``...: None (not given) or a finite number > 0."""
    if value is None:
        return
    if (isinstance(value, float) and not math.isfinite(value)) or value <= 0:
        raise UsageError(f"{option} {value!r}: expected a {'whole ' if integer else ''}number greater than 0")


def _slurm_time(option: str, value: str) -> None:
    from nemo_resiliency_plugins.core.executor_config import slurm_time_limit_seconds

    try:
        slurm_time_limit_seconds(value)
    except ValueError:
        raise UsageError(
            f"{option} {value!r}: expected a Slurm time limit such as '04:00:00', '90', '1-00:00:00' or 'UNLIMITED'"
        ) from None


def _executor_kind(value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise UsageError(f"--executor {value!r}: expected one of {', '.join(allowed)}")


@contextlib.contextmanager
def _quiet():
    """NeMo-Run prints banners and plugin logs to stdout; keep the command's own output clean."""
    buffer = io.StringIO()
    level = logging.getLogger("nemo_resiliency_plugins").level
    logging.getLogger("nemo_resiliency_plugins").setLevel(logging.WARNING)
    try:
        with contextlib.redirect_stdout(buffer):
            yield buffer
    finally:
        logging.getLogger("nemo_resiliency_plugins").setLevel(level)


def _emit_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


def _recipe(name: str):
    from nemo_resiliency_plugins.recipes import RECIPES

    if name not in RECIPES:
        raise UsageError(f"unknown recipe {name!r}: expected one of {', '.join(RECIPES)} (nemo-resiliency list)")
    return RECIPES[name]


def _png_option(option: str, path: str | None) -> None:
    """A PNG file option (``--plot``, ``--timeline``): a .png name in a directory that exists, and matplotlib to
    write it, all checked before any work."""
    if path is None:
        return
    if not path.endswith(".png"):
        raise UsageError(f"{option} {path!r}: expected a file name ending in .png")
    if not os.path.isdir(os.path.dirname(os.path.abspath(path))):
        raise UsageError(f"{option} {path!r}: its directory does not exist")
    require_plotting(option)


def _looks_like_path(target: str) -> bool:
    """An existing directory, or something only a path would look like (recipe names have no '/' or '.')."""
    return os.path.isdir(target) or os.sep in target or target.startswith(("~", "."))
