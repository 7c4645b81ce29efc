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


def print_rehearsal(console: Any, name: str, report: RehearsalReport) -> None:
    """The tables and verdict lines ``nemo-resiliency rehearse`` prints (rich console)."""
    from rich.table import Table

    def num(value: Any, unit: str = " s") -> str:
        return "-" if value is None else f"{value:g}{unit}"

    table = Table(title=f"nemo-resiliency rehearse: {name} ({report.ranks} ranks, {report.wall_s:g} s)")
    for column in ("run", "verdict", "detected by", "detect", "recover", "resumed from", "job", "params = fault-free"):
        table.add_column(column)
    if report.baseline is not None:
        base = report.baseline
        healthy = base.state == "SUCCEEDED" and not any("baseline" in r for r in report.reasons)
        table.add_row(
            "baseline (no fault)",
            "[green]ok[/]" if healthy else "[red]FAIL[/]",
            "-",
            "-",
            "-",
            "-",
            f"{base.state} in {base.wall_s:g} s",
            "-",
        )
    for f in report.faults:
        table.add_row(
            f.fault,
            "[green]ok[/]" if f.ok else "[red]FAIL[/]",
            f.detected_by or ("-" if f.final_state == "not run" else "not detected"),
            num(f.detect_s),
            num(f.recover_s),
            "-" if f.resumed_from is None else f"step {f.resumed_from}",
            f.final_state + (f" in {f.run.wall_s:g} s" if f.run else ""),
            {True: "yes", False: "NO", None: "-"}[f.params_equal],
        )
    if report.baseline is not None or report.faults:
        console.print(table)
    for line in report.scaled:
        console.print(f"[cyan]scaled:[/cyan] {line}", markup=True, highlight=False)
    for line in report.not_exercised:
        console.print(f"[yellow]not exercised here:[/yellow] {line}", highlight=False)
    if report.chain:
        chain = Table(title="timeout chain (your settings; step/save time: " + chain_times(report) + ")")
        for column in ("link", "numbers", "verdict"):
            chain.add_column(column)
        colors = {"pass": "green", "FAIL": "red", "unknown": "yellow"}
        for link in report.chain:
            chain.add_row(link["name"], link["detail"], f"[{colors[link['verdict']]}]{link['verdict']}[/]")
        console.print(chain)
    if report.ok:
        console.print("[green]OK: every fault was detected and survived with nothing lost[/green]")
    else:
        console.print("[red]FAILED:[/red]")
        for reason in report.reasons:
            console.print(f"  - {reason}", markup=False, highlight=False)
    if report.baseline is not None:
        console.print(f"logs and checkpoints: {report.workdir}", highlight=False)


def chain_times(report: RehearsalReport) -> str:
    step = "unknown" if report.step_time_s is None else f"{report.step_time_s:g} s"
    if report.step_time_measured:
        step += " (the rehearsal's toy step; pass --step-time)"
    save = "unknown (pass --save-time)" if report.save_time_s is None else f"{report.save_time_s:g} s"
    return f"{step} / {save}"
