"""One verdict of ``nemo-resiliency doctor``: its own module, so that the check modules and doctor share it
without importing each other."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Check:
    name: str
    verdict: str  # pass | warn | FAIL | n/a
    detail: str


def check(name: str, ok: bool | None, detail: str, *, warn_only: bool = False) -> Check:
    """``n/a`` when the job cannot tell (``ok is None``), else pass, or FAIL (warn where ``warn_only``)."""
    if ok is None:
        return Check(name, "n/a", detail)
    return Check(name, "pass" if ok else ("warn" if warn_only else "FAIL"), detail)
