"""What a rehearsal found: one outcome per run, one result per fault, and the report that holds them."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

PluginsLike = Sequence[Any] | str | Callable[[], Sequence[Any]]


@dataclass
class RunOutcome:
    """One local run: what the job did, as read from its log while it ran."""

    name: str
    state: str
    wall_s: float
    job_dir: str
    save_dir: str
    events: list[tuple[float, str]] = field(default_factory=list)  # (seconds since launch, what)
    stopped_by_rehearsal: bool = False
    log_tail: str = ""


@dataclass
class FaultResult:
    fault: str
    ok: bool
    injected: bool
    detected: bool
    detected_by: str | None
    detect_s: float | None
    recover_s: float | None
    resumed_from: int | None
    final_state: str
    params_equal: bool | None
    deadline_s: float
    reasons: list[str] = field(default_factory=list)
    run: RunOutcome | None = None


@dataclass
class RehearsalReport:
    ok: bool
    reasons: list[str]
    plugins: list[str]
    ranks: int
    scaled: list[str]
    not_exercised: list[str]
    chain: list[dict[str, Any]]
    baseline: RunOutcome | None
    faults: list[FaultResult]
    wall_s: float
    workdir: str
    step_time_s: float | None = None
    save_time_s: float | None = None
    step_time_measured: bool = False

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        for fault in data["faults"]:
            if fault["run"]:
                fault["run"].pop("log_tail", None)
        if data["baseline"]:
            data["baseline"].pop("log_tail", None)
        return data
