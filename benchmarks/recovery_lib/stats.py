"""Medians, min / median / max cells and ratios: how the benchmark turns repeated runs into table cells."""

from __future__ import annotations

import statistics
from collections.abc import Sequence


def _clean(values: Sequence[float | None]) -> list[float]:
    return [v for v in values if v is not None]


def median(values: Sequence[float | None]) -> float | None:
    vals = _clean(values)
    return statistics.median(vals) if vals else None


def triple(values: Sequence[float | None], fmt: str = "{:.1f}", scale: float = 1.0) -> str:
    """'min / median / max' (one value as is; none as n/a)."""
    vals = _clean(values)
    if not vals:
        return "n/a"
    if len(vals) == 1:
        return fmt.format(vals[0] * scale)
    return " / ".join(fmt.format(v * scale) for v in (min(vals), statistics.median(vals), max(vals)))


def ratio(ours: float | None, base: float | None) -> float | None:
    if ours is None or base is None or base == 0:
        return None
    return ours / base


def fmt_ratio(r: float | None) -> str:
    return "n/a" if r is None else f"{r:.3f}"
