"""The reference workload's log lines: ``[rank<r>] <message>`` on stdout, one write per line.

Tests, ``rehearse`` and the benchmark read these lines from the job logs (the workload's docstring lists them),
so every module of the workload writes them through :func:`log`.
"""

from __future__ import annotations

import logging
import os
import sys

__all__ = ["log", "rank_from_env", "route_logger"]


def rank_from_env() -> int:
    """The global rank the launcher gave this process (0 when launched plainly).

    -1 on an inactive warm reserve: NVRx's in-process restart sets ``RANK`` to the active rank, ``"None"`` there.
    """
    value = os.environ.get("RANK", "0")
    return int(value) if value.isdigit() else -1


def log(msg: str) -> None:
    """Print one workload line, prefixed with this process's rank (the process group's, once it exists)."""
    dist = sys.modules.get("torch.distributed")
    initialized = dist is not None and dist.is_available() and dist.is_initialized()
    rank = dist.get_rank() if initialized else rank_from_env()
    # One write per line, so lines of concurrently printing ranks do not interleave.
    sys.stdout.write(f"[rank{rank}] {msg}\n")
    sys.stdout.flush()


def route_logger(name: str, rank: int) -> None:
    """Print a library logger's INFO+ records on stdout, prefixed like :func:`log` (once per logger)."""
    lib_logger = logging.getLogger(name)
    if any(getattr(h, "_nrp_route", False) for h in lib_logger.handlers):
        return
    handler = logging.StreamHandler(sys.stdout)
    handler._nrp_route = True  # type: ignore[attr-defined]
    handler.setFormatter(logging.Formatter(f"[rank{rank}] %(name)s %(levelname)s: %(message)s"))
    lib_logger.addHandler(handler)
    lib_logger.setLevel(logging.INFO)
    lib_logger.propagate = False
