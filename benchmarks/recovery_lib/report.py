"""The benchmark's report: the table (every row of ``settings.ROWS``), the machine description, where the time
goes, and the PNG timelines.
"""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path
from typing import Any

from recovery_lib.jobs import Bench, Run
from recovery_lib.logs import _WORKER_PREFIX
from recovery_lib.settings import (
    FAULT_RANK,
    FAULT_STEP,
    FT,
    HANG_CHECK_INTERVAL_S,
    HANG_COMPUTED,
    HANG_EXPLICIT,
    HANG_SECTION_TIMEOUTS,
    INPROCESS,
    LAUNCHER_RESTART,
    MB_DEFAULT_CHECK_INTERVAL_S,
    MB_DEFAULT_PG_TIMEOUT_S,
    MB_DEFAULT_STEP_TIMEOUT_S,
    RESERVE,
    SAVE_INTERVAL,
    STEPS,
    TARGETS,
    TORCHRUN,
)
from recovery_lib.stats import _clean, fmt_ratio, median, ratio, triple


def _sh(cmd: list[str]) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, check=False).stdout.strip()
    except OSError as e:
        return f"({e})"


def _version(dist: str) -> str:
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def foreign_jobs() -> int:
    """Training processes on the machine that this benchmark did not start (ft_launcher/torchrun/workload)."""
    mine = {os.getpid()}
    count = 0
    for pid_dir in Path("/proc").iterdir():
        if not pid_dir.name.isdigit() or int(pid_dir.name) in mine:
            continue
        try:
            cmd = (pid_dir / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if "ft_launcher" in cmd or "torchrun" in cmd or "testing.workload" in cmd:
            count += 1
    return count


def machine_description(load: dict[str, Any]) -> list[str]:
    cpuinfo = Path("/proc/cpuinfo").read_text().splitlines()
    cpu = next((line.split(":", 1)[1].strip() for line in cpuinfo if "model name" in line), platform.processor())
    lines = [
        "## Machine",
        "",
        f"* `nproc`: {_sh(['nproc'])} ({cpu})",
        "* `free -g`:",
        "",
        "```",
        _sh(["free", "-g"]),
        "```",
        "",
        f"* OS: {platform.platform()}",
        f"* Python {platform.python_version()}, torch {_version('torch')}, NVRx (nvidia-resiliency-ext) "
        f"{_version('nvidia-resiliency-ext')}, nemo-run {_version('nemo-run')}, megatron-bridge "
        f"{_version('megatron-bridge')}, matplotlib {_version('matplotlib')}",
        f"* Load (1-minute load average): {load['start']:.2f} at start, {load['end']:.2f} at end; at the start of "
        f"each job min / median / max {load['jobs']}. Training processes of others running (ft_launcher, "
        f"torchrun, workload ranks): {load['foreign_start']} at start, {load['foreign_end']} at end.",
        "",
    ]
    return lines


def _wall(runs: list[Run]) -> list[float | None]:
    return [r.wall_s if r.ok else None for r in runs]


def _jwall(runs: list[Run]) -> list[float | None]:
    return [r.launcher_wall() for r in runs]


def _lost(runs: list[Run], fault_free: list[Run]) -> list[float | None]:
    """Launcher wall of each faulty run minus the median launcher wall of the fault-free runs."""
    base = median(_jwall(fault_free))
    return [None if w is None or base is None else w - base for w in _jwall(runs)]


def _ev(runs: list[Run], a: str, b: str) -> list[float | None]:
    out = []
    for r in runs:
        ev = r.events()
        out.append(ev[b] - ev[a] if r.ok and ev.get(a) is not None and ev.get(b) is not None else None)
    return out


# Lines the ranks write to stdout (the rank keeper's report, the workload's); NVRx's own go to stderr, unread here.
RESERVE_SPLIT = ("RANK_DIED", "INPROCESS iteration=1", "RESUMED", "checkpoint")


def _seconds(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def _reserve_split(runs: list[Run], key: str) -> list[float | None]:
    """Seconds from the kill to the last line containing ``key`` (to the first checkpoint after it for
    "checkpoint"), per successful run."""
    out: list[float | None] = []
    for r in runs:
        fault = r.fault_time()
        if not r.ok or fault is None:
            out.append(None)
            continue
        if key == "checkpoint":
            after = [p.stat().st_mtime for p in r.save_dir.glob("iter_*.pt") if p.stat().st_mtime > fault]
            out.append(min(after) - fault if after else None)
            continue
        hits = [t for t, _ in r.grep(key, after=fault - 0.5)]
        out.append(max(hits) - fault if hits else None)
    return out


def _failed(runs: list[Run]) -> str:
    bad = [r for r in runs if not r.ok]
    return f" ({len(bad)}/{len(runs)} FAILED)" if bad else ""


def _met(value: float | None, limit: float) -> str:
    if value is None:
        return "n/a"
    return "**met**" if value <= limit else "**missed**"


def build_table(bench: Bench, notes: dict[str, Any], imports: dict | None, setup: dict | None) -> tuple[list, dict]:
    """Rows of the main table and a dict of headline figures."""
    rows: list[list[str]] = []
    head: dict[str, Any] = {}

    def row(rid, what, base, ours, r, target="", met=""):
        rows.append([rid, what, base, ours, fmt_ratio(r) if not isinstance(r, str) else r, target, met])

    ff_tr, ff_ft = bench.of("fault-free", TORCHRUN), bench.of("fault-free", FT)
    w_tr, w_ft = median(_wall(ff_tr)), median(_wall(ff_ft))
    row(
        "1a",
        "fault-free wall time, NeMo-Run launch -> job seen ended [s] (baseline torchrun, ours ft_launcher + plugin)",
        triple(_wall(ff_tr)) + _failed(ff_tr),
        triple(_wall(ff_ft)) + _failed(ff_ft),
        ratio(w_ft, w_tr),
    )
    row(
        "1b",
        "fault-free launcher wall: the launcher's first -> last log line [s]",
        triple(_jwall(ff_tr)),
        triple(_jwall(ff_ft)),
        ratio(median(_jwall(ff_ft)), median(_jwall(ff_tr))),
    )
    it_tr, it_ft = [r.iteration_time() for r in ff_tr], [r.iteration_time() for r in ff_ft]
    r_step = ratio(median(it_ft), median(it_tr))
    head["step_ratio"] = r_step
    row(
        "1c",
        "time per step: rank 0's median iteration without a checkpoint, FT step hooks included [ms]",
        triple(it_tr, "{:.2f}", 1e3),
        triple(it_ft, "{:.2f}", 1e3),
        r_step,
        f"<= {TARGETS['ft_step_overhead']:.2f}",
        _met(r_step, TARGETS["ft_step_overhead"]),
    )
    st_tr, st_ft = [r.step_time() for r in ff_tr], [r.step_time() for r in ff_ft]
    row(
        "1f",
        f"time per step incl. checkpoints: steps {SAVE_INTERVAL}->{STEPS} by checkpoint mtimes [ms]",
        triple(st_tr, "{:.1f}", 1e3),
        triple(st_ft, "{:.1f}", 1e3),
        ratio(median(st_ft), median(st_tr)),
    )
    row(
        "1d",
        "start-up: launch -> both ranks running (START line) [s]",
        triple(_ev(ff_tr, "launch", "ranks up")),
        triple(_ev(ff_ft, "launch", "ranks up")),
        ratio(median(_ev(ff_ft, "launch", "ranks up")), median(_ev(ff_tr, "launch", "ranks up"))),
    )
    row(
        "1e",
        "shut-down: final parameters written -> job end [s]",
        triple(_ev(ff_tr, "finished", "job end")),
        triple(_ev(ff_ft, "finished", "job end")),
        ratio(median(_ev(ff_ft, "finished", "job end")), median(_ev(ff_tr, "finished", "job end"))),
    )

    k_tr, k_ft = bench.of("kill", TORCHRUN), bench.of("kill", FT)
    row(
        "2a",
        "rank killed at step 13: wall time [s] (torchrun --max-restarts 3 vs ours)",
        triple(_wall(k_tr)) + _failed(k_tr),
        triple(_wall(k_ft)) + _failed(k_ft),
        ratio(median(_wall(k_ft)), median(_wall(k_tr))),
    )
    lost_tr, lost_ft = _lost(k_tr, ff_tr), _lost(k_ft, ff_ft)
    r_lost = ratio(median(lost_ft), median(lost_tr))
    head["lost_ratio"] = r_lost
    row(
        "2b",
        "time lost = launcher wall - median fault-free launcher wall, same launcher [s]",
        triple(lost_tr),
        triple(lost_ft),
        r_lost,
        f"<= {TARGETS['kill_time_lost']:.1f}",
        _met(r_lost, TARGETS["kill_time_lost"]),
    )
    row(
        "2c",
        "fault -> detected by the launcher [s]",
        triple(_ev(k_tr, "fault", "detected"), "{:.2f}"),
        triple(_ev(k_ft, "fault", "detected"), "{:.2f}"),
        ratio(median(_ev(k_ft, "fault", "detected")), median(_ev(k_tr, "fault", "detected"))),
    )
    rec_tr, rec_ft = _ev(k_tr, "fault", "checkpoint after recovery"), _ev(k_ft, "fault", "checkpoint after recovery")
    row(
        "2d",
        "fault -> first checkpoint after recovery (step 15) [s]",
        triple(rec_tr),
        triple(rec_ft),
        ratio(median(rec_ft), median(rec_tr)),
    )

    def restarts(runs: list[Run]) -> list[float | None]:
        return [float(len(r.grep("will restart worker group", launcher_only=True))) if r.ok else None for r in runs]

    row(
        "2e",
        "launcher restarts the job needed (1 = the fault's own; more = a restart that failed again)",
        triple(restarts(k_tr), "{:.0f}"),
        triple(restarts(k_ft), "{:.0f}"),
        ratio(median(restarts(k_ft)), median(restarts(k_tr))),
    )

    k_res, ff_res = bench.of("kill", RESERVE), bench.of("fault-free", RESERVE)
    lost_res = _lost(k_res, ff_res)
    r_res = ratio(median(lost_res), median(lost_tr))
    head["reserve_lost_ratio"] = r_res
    row(
        "2f",
        "rank killed, in-process with a warm reserve (3 ranks: 2 + 1, torchrun): time lost [s] (baseline: torchrun "
        "--max-restarts 3, row 2b; ours: the same 3-rank set-up fault-free vs killed)",
        triple(lost_tr),
        triple(lost_res) + _failed(k_res) + _failed(ff_res),
        r_res,
        f"<= {TARGETS['reserve_time_lost']:.1f}",
        _met(r_res, TARGETS["reserve_time_lost"]),
    )
    row(
        "2g",
        "the same, against ft_launcher's restart (row 2b, ours) [s]",
        triple(lost_ft),
        triple(lost_res),
        ratio(median(lost_res), median(lost_ft)),
    )
    row(
        "2h",
        "warm reserve, how the time splits, seconds after the kill: the rank keeper reports the death / the reserve "
        "and the survivor re-enter training (NVRx: detection, restart barrier, rank reassignment) / resumed from "
        "step 10 / step-15 checkpoint",
        "n/a (a launcher restart: rows 2c, 2d)",
        " / ".join(_seconds(median(_reserve_split(k_res, key))) for key in RESERVE_SPLIT),
        "",
    )

    h_ex, h_co = bench.of("hang", HANG_EXPLICIT), bench.of("hang", HANG_COMPUTED)
    open_ex = [r.hang_open_s() if r.ok else None for r in h_ex]
    open_co = [r.hang_open_s() if r.ok else None for r in h_co]
    m_co = median(open_co)
    head["hang_computed"] = m_co
    computed_timeouts = _clean([r.loaded_step_timeout() for r in h_co])
    default_s = MB_DEFAULT_STEP_TIMEOUT_S
    row(
        "3a",
        f"hang, Megatron Bridge default timeouts (step {default_s:.0f} s, check every "
        f"{MB_DEFAULT_CHECK_INTERVAL_S:.0f} s): detection [s] (not run; from the values). Baseline: torchrun "
        f"has no hang detection, the peer's gloo collective times out after dist.distributed_timeout_minutes",
        f"{MB_DEFAULT_PG_TIMEOUT_S:.0f} (theoretical)",
        f"{default_s:.0f} - {default_s + MB_DEFAULT_CHECK_INTERVAL_S:.0f} (theoretical)",
        ratio(default_s, MB_DEFAULT_PG_TIMEOUT_S),
    )
    row(
        "3b",
        f"hang: detection with explicit step timeout {HANG_SECTION_TIMEOUTS['step']:.0f} s, check every "
        f"{HANG_CHECK_INTERVAL_S:.0f} s (NVRx: 'open for X seconds') [s]; ratio vs defaults",
        f"{default_s:.0f} (defaults)",
        triple(open_ex, "{:.2f}") + _failed(h_ex),
        ratio(median(open_ex), default_s),
    )
    co_note = (
        f" (computed step timeout {triple(computed_timeouts, '{:.2f}')} s)"
        if computed_timeouts
        else (" (ft_state.json NOT loaded)" if h_co else "")
    )
    row(
        "3c",
        "hang, 2nd run with computed timeouts from ft_state.json: detection [s]; ratio vs explicit" + co_note,
        triple(open_ex, "{:.2f}"),
        triple(open_co, "{:.2f}") + _failed(h_co),
        ratio(m_co, median(open_ex)),
        f"<= {TARGETS['hang_computed_s']:.0f} s",
        _met(m_co, TARGETS["hang_computed_s"]),
    )
    lost_ex, lost_co = _lost(h_ex, ff_ft), _lost(h_co, ff_ft)
    row(
        "3d",
        "hang: time lost = launcher wall - median fault-free ft_launcher wall [s] (explicit vs computed)",
        triple(lost_ex),
        triple(lost_co),
        ratio(median(lost_co), median(lost_ex)),
    )

    r_l, r_i = bench.of("raise", LAUNCHER_RESTART), bench.of("raise", INPROCESS)
    reason = notes.get("ipr_reason")
    if reason:
        ours = f"not measured: {reason}"
        row(
            "4a",
            "exception raised at step 13: fault -> first checkpoint after recovery [s] "
            "(ft_launcher restart vs in-process restart)",
            triple(_ev(r_l, "fault", "checkpoint after recovery")) + _failed(r_l),
            ours,
            "n/a",
        )
        row(
            "4b",
            "exception raised: time lost = launcher wall - median fault-free ft_launcher wall [s]",
            triple(_lost(r_l, ff_ft)),
            ours,
            "n/a",
        )
    else:
        a = _ev(r_l, "fault", "checkpoint after recovery")
        b = _ev(r_i, "fault", "checkpoint after recovery")
        row(
            "4a",
            "exception raised at step 13: fault -> first checkpoint after recovery [s] "
            "(ft_launcher restart vs in-process restart + FT)",
            triple(a) + _failed(r_l),
            triple(b) + _failed(r_i),
            ratio(median(b), median(a)),
        )
        la, lb = _lost(r_l, ff_ft), _lost(r_i, ff_ft)
        row(
            "4b",
            "exception raised: time lost = launcher wall - median fault-free ft_launcher wall [s]",
            triple(la),
            triple(lb),
            ratio(median(lb), median(la)),
        )

    if imports:
        base = imports["nemo_run"]
        total = [a + b for a, b in zip(imports["nemo_run"], imports["plugins"], strict=True)]
        r_imp = ratio(median(total), median(base))
        head["import_ratio"] = r_imp
        row(
            "5a",
            f"import time, fresh interpreters x{len(base)} [s] (import nemo_run vs + every plugin of ours)",
            triple(base, "{:.3f}"),
            triple(total, "{:.3f}"),
            r_imp,
            f"<= {TARGETS['import']:.2f}",
            _met(r_imp, TARGETS["import"]),
        )
        row(
            "5b",
            "importing every plugin (`from nemo_resiliency_plugins import *`) on top of nemo_run alone [s]",
            "-",
            triple(imports["plugins"], "{:.3f}"),
            "-",
        )
    else:
        row("5a", "import time", "not measured", "not measured", "n/a")
        row("5b", "importing every plugin on top of nemo_run alone [s]", "not measured", "not measured", "n/a")
    if setup:
        n = setup["n"]
        row(
            "5c",
            f"Experiment.add of {n} run.Script tasks [s] (no plugin vs FaultTolerancePlugin); "
            f"plugin.setup() alone: {triple(setup['setup_only'], '{:.2f}', 1e3 / n)} ms per task",
            triple(setup["without"], "{:.2f}"),
            triple(setup["with"], "{:.2f}"),
            ratio(median(setup["with"]), median(setup["without"])),
        )
    else:
        row("5c", "Experiment.add of 100 tasks", "not measured", "not measured", "n/a")
    return rows, head


def breakdown(bench: Bench) -> list[list[str]]:
    """Where the time of a recovery goes: medians of the intervals between timeline events."""
    spans = [
        ("fault", "detected"),
        ("detected", "restarted"),
        ("restarted", "resumed"),
        ("resumed", "checkpoint after recovery"),
        ("checkpoint after recovery", "finished"),
        ("finished", "job end"),
    ]
    out = []
    for case, variants in (
        ("kill", (TORCHRUN, FT)),
        ("hang", (HANG_EXPLICIT, HANG_COMPUTED)),
        ("raise", (LAUNCHER_RESTART, INPROCESS)),
    ):
        for variant in variants:
            runs = [r for r in bench.of(case, variant) if r.ok]
            if not runs:
                continue
            cells = []
            for a, b in spans:
                m = median(_ev(runs, a, b))
                cells.append("n/a" if m is None else f"{m:.2f}")
            out.append([case, variant, *cells])
    return out


def launcher_phases(bench: Bench) -> list[str]:
    """Measured from the launchers' own log lines: what happens between detection and the new workers."""
    lines = []
    needles = {
        "stop workers (SIGTERM, wait for exit)": (
            "Stopping worker group",
            ["Event: worker_terminated", "Rendezvous'ing worker group"],
        ),
        "rendezvous for the next round": ("Rendezvous'ing worker group", ["Rendezvous complete for workers"]),
        "store-host grace period before exit": ("Store host waiting", ["Agent exits with exit code"]),
    }
    for case, variant in (("kill", TORCHRUN), ("kill", FT), ("fault-free", TORCHRUN), ("fault-free", FT)):
        runs = [r for r in bench.of(case, variant) if r.ok]
        for label, (start, ends) in needles.items():
            vals = []
            for r in runs:
                t0 = r.first([start], launcher_only=True)
                if case == "kill":
                    fault = r.fault_time()
                    t0 = r.first([start], after=fault, launcher_only=True) if fault else None
                t1 = r.first(ends, after=t0, launcher_only=True) if t0 is not None else None
                vals.append(None if t0 is None or t1 is None else t1 - t0)
            if _clean(vals):
                lines.append(f"* {case} / {variant}: {label}: {triple(vals, '{:.2f}')} s")
    # Where a fault-free job's time goes outside the training steps.
    for variant in (TORCHRUN, FT):
        runs = [r for r in bench.of("fault-free", variant) if r.ok]
        spans: dict[str, list[float | None]] = {}
        for r in runs:
            own = [t for t, text, is_own in r.lines if is_own and not _WORKER_PREFIX.match(text)]
            if not own:
                continue
            started = r.first(["Starting worker group"], launcher_only=True)
            done = r.first(["worker group successfully finished"], launcher_only=True)
            ranks_up = r.events()["ranks up"]
            final = r.mtime("final_params.pt")
            points = {
                "NeMo-Run launch -> launcher's first log line": (r.t0, min(own)),
                "launcher start -> workers started": (min(own), started),
                "workers started -> both ranks running (imports)": (
                    started,
                    None if ranks_up is None else r.t0 + ranks_up,
                ),
                "final parameters written -> launcher sees the workers exit": (final, done),
                "workers exited -> launcher's last log line": (done, max(own)),
                "launcher's last log line -> NeMo-Run sees the job end": (max(own), r.t_end),
            }
            for label, (a, b) in points.items():
                spans.setdefault(label, []).append(None if a is None or b is None else b - a)
        for label, vals in spans.items():
            lines.append(f"* fault-free / {variant}: {label}: {triple(vals, '{:.2f}')} s")
    return lines


def markdown_table(header: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(cell.replace("|", "\\|") for cell in r) + " |" for r in rows]
    return out


def draw_timelines(bench: Bench, out_prefix: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    markers = {
        "fault": ("X", "tab:red"),
        "detected": ("v", "tab:orange"),
        "restarted": ("^", "tab:purple"),
        "resumed": ("o", "tab:blue"),
        "checkpoint after recovery": ("s", "tab:green"),
        "finished": ("*", "black"),
    }
    written = []
    for case, variants, title in (
        ("kill", (TORCHRUN, FT), f"rank {FAULT_RANK} killed at step {FAULT_STEP}"),
        ("hang", (HANG_EXPLICIT, HANG_COMPUTED), f"rank {FAULT_RANK} hung in step {FAULT_STEP}"),
        ("raise", (LAUNCHER_RESTART, INPROCESS), f"exception on rank {FAULT_RANK} at step {FAULT_STEP}"),
    ):
        lanes = []
        for variant in variants:
            runs = sorted((r for r in bench.of(case, variant) if r.ok), key=lambda r: r.wall_s)
            if runs:
                lanes.append((variant, runs[len(runs) // 2]))
        if not lanes:
            continue
        fig, ax = plt.subplots(figsize=(11, 2.0 + 1.1 * len(lanes)))
        for y, (_variant, run) in enumerate(lanes):
            ev = run.events()
            ax.barh(y, ev["job end"], left=0, height=0.35, color="0.88", edgecolor="0.6")
            if ev["fault"] is not None and ev["resumed"] is not None:
                ax.barh(y, ev["resumed"] - ev["fault"], left=ev["fault"], height=0.35, color="tab:red", alpha=0.25)
            for name, (marker, color) in markers.items():
                if ev.get(name) is not None:
                    ax.plot(
                        ev[name],
                        y,
                        marker=marker,
                        color=color,
                        markersize=10,
                        linestyle="none",
                        label=name if y == 0 else None,
                    )
            ax.text(ev["job end"], y + 0.28, f" {run.wall_s:.1f} s", va="bottom", fontsize=8)
        ax.set_yticks(range(len(lanes)), [f"{v}\n(median run)" for v, _ in lanes])
        ax.set_xlabel("seconds since launch (light bar: job; red: fault -> resumed)")
        ax.set_title(f"{title}: fault, detection, restart, resume, first checkpoint after recovery, finish")
        ax.set_ylim(-0.6, len(lanes) - 0.3)
        handles, labels = ax.get_legend_handles_labels()
        ax.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, -0.3), fontsize=8, ncol=6)
        fig.tight_layout()
        path = Path(f"{out_prefix}-{case}.png")
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written
