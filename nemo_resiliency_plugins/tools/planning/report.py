"""How a plan is shown: a table a person reads at a glance, and a plot of goodput vs save interval."""

from __future__ import annotations

from typing import Any

from nemo_resiliency_plugins.tools.planning.plan import PlanReport
from nemo_resiliency_plugins.tools.planning.recovery import (
    DEFAULT_HUMAN_S,
    DEFAULT_REQUEUE_S,
    DEFAULT_RESTART_S,
    SPARE_VS_IN_PLACE,
    hang_detect_s,
)


def stated_defaults(*, restart_given: bool, async_save: bool) -> list[str]:
    """The values the user did not give and the model assumed, printed with every plan."""
    stated = []
    if not restart_given:
        stated.append(f"restart {DEFAULT_RESTART_S:g} s (pass --restart-time; rehearse or the benchmark measure it)")
    stated.append(
        f"checkpoint load = save time; requeue {DEFAULT_REQUEUE_S:g} s; a person resubmits in {DEFAULT_HUMAN_S:g} s;"
        f" a spare node's replacement = {SPARE_VS_IN_PLACE:g} x a restart (benchmarks/spare_nodes)"
    )
    if async_save:
        stated.append("an async save blocks training for one step")
    return stated


def _dur(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds >= 2 * 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 120:
        return f"{seconds / 60:.1f} min"
    return f"{seconds:.3g} s"


def summary_lines(report: PlanReport) -> list[str]:
    """The run, the failure model with its source, and the save intervals, one fact per line."""
    p, f = report.params, report.failures
    faults = sum(report.faults_expected.values())
    by_class = ", ".join(f"{c.replace('_', ' ')} {n:,.0f}" for c, n in report.faults_expected.items())
    lines = [
        f"run: {p.gpus:,} GPUs, {p.days:g} days, step {p.step_time_s:g} s, save {p.save_time_s:g} s"
        + (" (async)" if p.async_save else "")
        + (f", local save {p.local_save_time_s:g} s" if p.local_save_time_s is not None else "")
        + f", restart {p.restart_s:g} s, load {p.load_time_s:g} s",
        f"failure model: {f.name}: {f.total_per_gpu_hour():.3g} faults per GPU-hour -> {faults:,.0f} faults over "
        f"the run ({by_class}); one every {_dur(report.mtbf_s)}",
        f"source: {f.source}",
    ]
    lines += [f"assumed: {a}" for a in f.assumptions]
    lines += [f"assumed: {a}" for a in report.stated_defaults]
    lines.append(
        f"persistent save interval: Young {_dur(report.young_s)}, Daly {_dur(report.daly_s)}, simulated best "
        f"{_dur(report.simulated_best_s)}"
        + (f"; local save interval (Daly) {_dur(report.local_interval_s)}" if report.local_interval_s else "")
    )
    return lines


def recommendation_lines(report: PlanReport) -> list[str]:
    r = report.recommendation
    t = r["section_timeouts"]
    reserve = r["warm_reserve"]
    lines = [
        f"checkpoint.save_interval: every {_dur(r['save_interval_s'])} of training "
        f"({r['save_interval_s'] / report.params.step_time_s:,.0f} steps)",
    ]
    if r["local_save_interval_s"]:
        lines.append(
            f"local checkpoints: every {_dur(r['local_save_interval_s'])} "
            f"({r['local_save_interval_s'] / report.params.step_time_s:,.0f} steps)"
        )
    lines += [
        f"FaultTolerancePlugin(section_timeouts={{'setup': {t['setup']:.0f}, 'step': {t['step']:.0f}, "
        f"'checkpointing': {t['checkpointing']:.0f}}}, out_of_section_timeout={t['out_of_section']:.0f}, "
        f"workload_check_interval={r['workload_check_interval']:g}, num_in_job_restarts={r['num_in_job_restarts']}, "
        f"num_job_retries_on_failure={r['num_job_retries_on_failure']}, calc_ft_timeouts=False"
        + (f", spare_nodes={reserve['nodes']}" if reserve["pays_off"] else "")
        + ")  "
        f"(timeouts = {r['safety_factor']:g} x the healthy time; restarts for "
        f"{r['expected_faults']:,.0f} expected faults)",
        f"PreemptionPlugin(preempt_time={r['preempt_time']})  (twice one step + one save); "
        "RerunStateMachinePlugin(rerun_mode='validate_results')",
        (
            f"spare nodes (FaultTolerancePlugin.spare_nodes, Slurm): {reserve['nodes']} node(s) pay off: goodput "
            f"over all GPUs held {reserve['goodput_with']:.3f} vs {reserve['goodput_without']:.3f} without"
            if reserve["pays_off"]
            else f"spare nodes: do not pay off ({reserve['nodes']} node(s): {reserve['goodput_with']:.3f} vs "
            f"{reserve['goodput_without']:.3f} without)"
        ),
    ]
    return lines


def set_rows(report: PlanReport) -> list[list[str]]:
    rows = []
    for s in report.sets:
        best_at, best = s.best()
        rows.append(
            [
                s.mechanism.name,
                _dur(s.interval_s),
                f"{s.closed_form:.3f}",
                f"{s.simulated:.3f} ± {s.simulated_stderr:.4f}",
                f"{best:.3f} at {_dur(best_at)}",
                _dur(hang_detect_s(s.mechanism)) if s.mechanism.attempt_cap_s is None else "at the 1800 s kill",
            ]
        )
    return rows


SET_COLUMNS = ("set", "save every", "closed form", "simulated", "best simulated", "hang found")


def note_lines(report: PlanReport) -> list[str]:
    """What each set's figures rest on (Megatron Bridge's crash loop, computed timeouts, ...)."""
    return [f"{s.mechanism.name}: {note}" for s in report.sets for note in s.mechanism.notes] + list(report.notes)


def write_plot(report: PlanReport, path: str) -> str:
    """Goodput vs persistent save interval, one line per mechanism set (simulated: solid with markers;
    closed form: dashed), Daly's interval marked. Needs matplotlib (a clear error when it is missing)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as err:
        raise RuntimeError(f"--plot needs matplotlib, which is not installed here ({err})") from None
    fig, ax = plt.subplots(figsize=(9, 5.2), dpi=110)
    colors = ("#c0392b", "#2874a6", "#1e8449")
    for s, color in zip(report.sets, colors, strict=False):
        ax.plot(
            s.sweep_intervals_s, s.sweep_simulated, "-o", ms=3.5, color=color, label=f"{s.mechanism.name} (simulated)"
        )
        ax.plot(
            s.sweep_intervals_s,
            s.sweep_closed_form,
            "--",
            color=color,
            alpha=0.6,
            label=f"{s.mechanism.name} (closed form)",
        )
    ax.axvline(report.daly_s, color="grey", ls=":", label=f"Daly optimum {_dur(report.daly_s)}")
    ax.set_xscale("log")
    ax.set_ylim(0, 1)
    ax.set_xlabel("persistent checkpoint interval (seconds of training, log scale)")
    ax.set_ylabel("goodput (useful training / wall time)")
    p = report.params
    ax.set_title(
        f"{p.gpus:,} GPUs, {p.days:g} days, {report.failures.name} failures: goodput vs save interval", fontsize=10
    )
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7.5, loc="lower right", bbox_to_anchor=(1.0, 0.04))
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def to_json(report: PlanReport, plot: str | None = None) -> dict[str, Any]:
    return report.to_json() | {"plot": plot}


def print_report(console: Any, report: PlanReport, png: str | None) -> None:
    """The text form of ``nemo-resiliency plan`` on a rich console: facts, the table, notes, recommendations,
    flags."""
    from rich.markup import escape
    from rich.table import Table

    for line in summary_lines(report):
        console.print(line, markup=False, highlight=False)
    table = Table(title=f"predicted goodput (useful training / wall time); yours: {report.plugins_from}")
    for column in SET_COLUMNS:
        table.add_column(column)
    for row in set_rows(report):
        table.add_row(*(escape(cell) for cell in row))
    console.print(table)
    for line in note_lines(report):
        console.print("  " + line, markup=False, highlight=False)
    console.print("[bold]recommended settings[/bold]")
    for line in recommendation_lines(report):
        console.print("  " + line, markup=False, highlight=False)
    if report.flags:
        console.print("[bold]your settings far from the optimum[/bold]")
        for flag in report.flags:
            console.print(
                f"  {flag.setting}: {flag.yours} -> {flag.recommended}: {flag.why}", markup=False, highlight=False
            )
    console.print(f"planned in {report.wall_s:.2f} s (simulation seed {report.seed})", highlight=False)
    if png:
        console.print(f"plot: {png}", highlight=False)
