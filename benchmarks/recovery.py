#!/usr/bin/env python
"""Recovery benchmarks: what each resiliency mechanism costs and saves, side by side in one invocation.

Run from the repository root (one command; 30 jobs + host-side figures; how long it takes and why:
``benchmarks/README.md``)::

    .venv/bin/python benchmarks/recovery.py            # 3 repetitions of every case
    .venv/bin/python benchmarks/recovery.py --smoke    # 1 repetition, shorter steps (CI: tests/smoke)

Options: ``--repeat N`` (runs per case), ``--import-repeat N`` (fresh interpreters per import measurement),
``--out DIR`` (default ``benchmarks/results``), ``--keep`` (keep the jobs' logs and checkpoints), ``--job-timeout S``
(default 300; a job still running then is ended and reported as TIMEOUT).

Every case runs the reference workload (``nemo_resiliency_plugins.testing.workload``: 2 CPU ranks, torch +
gloo, Megatron Bridge's config parser and fault-tolerance hooks; 20 steps, a checkpoint every 5, the fault on
rank 1 at step 13 so every recovery resumes from step 10) through NeMo-Run's real ``Experiment`` +
``LocalExecutor``. The variants of a case alternate inside each repetition, so a change of machine load hits
both. Cases:

1. fault-free: plain ``torchrun`` (no plugin) vs ``ft_launcher`` via ``FaultTolerancePlugin()`` (defaults):
   wall time, and the time per step: rank 0's median iteration without a checkpoint, FT hooks included, as
   the workload times it (``STEP_TIMES``), which leaves out process start-up (dominated by importing Megatron
   Bridge in each rank); also steps 5 -> 20 by the checkpoint files' modification times;
2. rank 1 killed (SIGKILL) at step 13: ``torchrun --max-restarts 3`` vs the plugin -> time lost = wall -
   median fault-free wall of the same launcher. NeMo-Run's ``run.Torchrun`` has no restart field (its
   ``max_retries`` is the scheduler's); torchrun reads ``--max-restarts`` from ``PET_MAX_RESTARTS``, which the
   benchmark puts in the executor's environment (the launcher's config dump in the log shows it arrive).
   torchrun's restarted ranks need the workload's per-attempt store prefix (pytorch/pytorch#167288: without
   it a restart failed in gloo set-up in 2 of 3 runs);
3. rank 1 hung in step 13: detection latency as NVRx reports it ("Section 'step' has been open for X
   seconds") with explicit section timeouts, and with the timeouts Megatron Bridge computed on a fault-free
   run (``ft_state.json``, copied from case 1) loaded on the second run; Megatron Bridge's default timeouts
   are reported from their values, not waited for;
2r. the same kill with in-process restart and a warm reserve (``InProcessRestartPlugin(active_world_size=2)`` on 3
   ranks, torchrun, each rank under the plugin's rank keeper): the reserve takes rank 1's place in the same job.
   Time lost = launcher wall - median fault-free launcher wall of the same 3-rank set-up (run in the kill case),
   side by side with torchrun's and ft_launcher's restart; and how it splits (NVRx's log lines and the workload's);
4. an exception raised on rank 1 at step 13: ``ft_launcher`` restart vs in-process restart
   (``InProcessRestartPlugin`` + ``FaultTolerancePlugin``), when ``nemo_resiliency_plugins.inprocess_restart``
   exists and its run recovers in-process; otherwise the row says why it was not measured;
5. ``import nemo_resiliency_plugins`` on top of ``import nemo_run`` (fresh interpreters), and
   ``Experiment.add`` of 100 ``run.Script`` tasks with and without ``FaultTolerancePlugin``.

Output: a markdown table (printed, and written to ``<out>/recovery-<UTC date>[-smoke].md`` with the machine
description and load) and one PNG timeline per fault case (``...-kill.png``, ``-hang.png``, ``-raise.png``:
fault, detection, restart, resume, first checkpoint after recovery, finish). Event times come from the
launchers' own timestamped log lines, the fault marker the workload writes, the checkpoint files'
modification times, and, for worker lines without a timestamp (``RESUMED``), the time the line reached the
job log (polled every 0.1 s). Needs matplotlib for the PNGs.

This file is the command; the pieces live in ``recovery_lib/`` by concern: ``settings`` (the workload's shape,
targets, rows), ``stats``, ``logs`` (timestamps of log lines), ``jobs`` (one job's timeline, the bench),
``cases`` (cases 1-4: plugin settings and job order), ``host`` (case 5) and ``report`` (table, timelines).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# The pieces live in recovery_lib/ beside this file; the smoke test also loads this file by path.
sys.path.insert(0, str(Path(__file__).resolve().parent))

from recovery_lib.cases import run_jobs  # noqa: E402
from recovery_lib.host import measure_imports, measure_setup  # noqa: E402
from recovery_lib.jobs import Bench  # noqa: E402
from recovery_lib.report import (
    breakdown,
    build_table,
    draw_timelines,
    foreign_jobs,
    launcher_phases,
    machine_description,
    markdown_table,
)
from recovery_lib.settings import (
    CASES,
    FAULT_RANK,
    FAULT_STEP,
    HANG_CHECK_INTERVAL_S,
    HANG_SECTION_TIMEOUTS,
    REPO,
    ROWS,
    SAVE_INTERVAL,
    STEPS,
)
from recovery_lib.stats import triple  # noqa: E402

__all__ = ["ROWS", "main"]  # ROWS: every row of the table (tests/smoke reads it from this file)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="1 repetition, shorter steps (CI)")
    parser.add_argument("--repeat", type=int, default=None, help="runs per case (default 3; 1 with --smoke)")
    parser.add_argument("--import-repeat", type=int, default=None, help="fresh interpreters (default 5; smoke 1)")
    parser.add_argument("--setup-tasks", type=int, default=100, help="tasks in the Experiment.add benchmark")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    parser.add_argument("--keep", action="store_true", help="keep the jobs' logs and checkpoints")
    parser.add_argument("--job-timeout", type=float, default=None, help="end a job after this long (default 300 s)")
    parser.add_argument(
        "--cases",
        default=",".join(CASES),
        help=f"comma-separated subset of {','.join(CASES)} (development; default all)",
    )
    args = parser.parse_args(argv)
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    if unknown := sorted(set(cases) - set(CASES)):
        parser.error(f"--cases: unknown {', '.join(unknown)}; allowed: {', '.join(CASES)}")
    repeat = args.repeat or (1 if args.smoke else 3)
    import_repeat = args.import_repeat or (1 if args.smoke else 5)
    step_time = "0.05" if args.smoke else "0.1"

    started = time.time()
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    args.out.mkdir(parents=True, exist_ok=True)
    stem = f"recovery-{date}" + ("-smoke" if args.smoke else "")
    work = Path(tempfile.mkdtemp(prefix="nrp-bench-"))
    # NeMo-Run reads NEMORUN_HOME when it is imported: the benchmark's experiments stay in its work directory.
    os.environ["NEMORUN_HOME"] = str(work / "nemorun-home")
    os.environ["PATH"] = str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", "")
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.path.insert(0, str(REPO))

    def say(msg: str) -> None:
        print(msg, flush=True)

    load = {"start": os.getloadavg()[0], "foreign_start": foreign_jobs()}
    say(f"recovery benchmark: {repeat} repetition(s), step time {step_time} s, work dir {work}")
    say(f"load(1 min) {load['start']:.2f}; training processes of others running: {load['foreign_start']}")

    say("5. imports (fresh interpreters) ...")
    imports = measure_imports(work, import_repeat)
    setup = None
    say(f"5. Experiment.add of {args.setup_tasks} tasks ...")
    try:
        setup = measure_setup(work, args.setup_tasks, repeat) | {"n": args.setup_tasks}
    except RuntimeError as e:
        say(str(e))

    bench = Bench(work, step_time, say)
    bench.job_timeout = args.job_timeout or 300.0
    notes: dict[str, Any] = {}

    def report(final: bool) -> tuple[list[str], str, Path]:
        load.update(end=os.getloadavg()[0], foreign_end=foreign_jobs())
        load["jobs"] = triple([r.load1 for r in bench.runs], "{:.2f}")
        rows, _ = build_table(bench, notes, imports, setup)
        header = [
            "#",
            "measurement",
            "baseline: min / median / max",
            "ours: min / median / max",
            "ratio ours / baseline (medians)",
            "target",
            "met?",
        ]
        table = markdown_table(header, rows)
        png_note = "drawn at the end of the run"
        if final:
            try:
                pngs = draw_timelines(bench, args.out / stem)
                png_note = ", ".join(f"`{p.name}`" for p in pngs) or "none (no successful fault run)"
            except ImportError as e:
                png_note = f"not drawn: {e} (pip install matplotlib)"
        elapsed = time.time() - started
        progress = "" if final else f" PARTIAL: {len(bench.runs)} of {bench.total} jobs done, still running."

        ft_state = notes.get("ft_state")
        doc = [
            f"# Recovery benchmarks, {date}" + (" (smoke)" if args.smoke else ""),
            "",
            f"Command: `{' '.join([Path(sys.executable).name, 'benchmarks/recovery.py', *(argv or sys.argv[1:])])}` "
            f"- {repeat} repetition(s) per case, {len(bench.runs)} jobs, {elapsed / 60:.1f} min in all.{progress}",
            "",
            f"Workload: the reference workload, 2 CPU ranks (torch + gloo), {STEPS} steps of {step_time} s extra "
            f"compute each, a checkpoint every {SAVE_INTERVAL} steps; faults on rank {FAULT_RANK} at step "
            f"{FAULT_STEP} (every recovery resumes from step 10). Launch: NeMo-Run Experiment + LocalExecutor "
            '(ntasks_per_node=2). Baseline torchrun: `launcher="torchrun"`, `PET_MAX_RESTARTS=3` in the executor '
            "environment (NeMo-Run's run.Torchrun has no restart field). Ours: `FaultTolerancePlugin(num_in_job_"
            "restarts=3)` with its defaults (Megatron Bridge's: step 180 s, check every 5 s) for cases 1-2; "
            f"section timeouts {HANG_SECTION_TIMEOUTS}, check every {HANG_CHECK_INTERVAL_S:.0f} s for case 3; step "
            "30 s, check every 1 s for case 4 (both variants), in-process restart with rank granularity, soft/hard "
            "timeout 20/30 s.",
            "",
            *machine_description(load),
            "## Results",
            "",
            *table,
            "",
            "Ratios are of medians. Time lost subtracts the median fault-free wall of the same launcher. "
            "Per-step time (1c) is the median of rank 0's iterations that wrote no checkpoint, timed by the "
            "workload from the FT step-start hook to the end of the iteration (`STEP_TIMES` line); 1f spans "
            f"steps {SAVE_INTERVAL} -> {STEPS} by the checkpoint files' modification times, so it includes three "
            "checkpoints with their FT `checkpointing` section. Both leave process start-up out; start-up and "
            "shut-down are rows 1d/1e. Launcher wall (1b, and every time lost) runs from the launcher's first "
            "to its last own-timestamped log line: it leaves out NeMo-Run's packaging before the job and its "
            "2-second status polling after it, which the NeMo-Run wall (1a, 2a) includes.",
            "",
            "## Where the time of a recovery goes (medians, seconds)",
            "",
            *markdown_table(
                [
                    "case",
                    "variant",
                    "fault -> detected",
                    "detected -> workers restarted",
                    "restarted -> resumed",
                    "resumed -> checkpoint 15",
                    "checkpoint 15 -> finished",
                    "finished -> job end",
                ],
                breakdown(bench),
            ),
            "",
            "Launcher phases, from the launchers' own timestamped log lines (min / median / max):",
            "",
            *(launcher_phases(bench) or ["* (no launcher lines found)"]),
            "",
            "Event sources: fault = the time the injecting rank wrote its fault marker; detected = the launcher's "
            "first failure line (torchrun `Worker group FAILED`, NVRx `failure_detected` / `Section 'step' has "
            "been open for`); restarted = the launcher's next `Starting worker group` (in-process: the later rank's "
            "`INPROCESS iteration=1` time); resumed = arrival of the later rank's `RESUMED` line in the job log "
            "(polled every 0.1 s); checkpoint 15 / finished = file modification times.",
            "",
            f"Computed timeouts used by 3c (ft_state.json of a fault-free ft_launcher run): `{json.dumps(ft_state)}`"
            if ft_state
            else "3c: no ft_state.json was available from case 1.",
            "",
            f"Timelines (median run of each variant): {png_note}.",
            "",
        ]
        text = "\n".join(doc)
        md_path = args.out / f"{stem}.md"
        md_path.write_text(text)
        return table, png_note, md_path

    bench.after_job = lambda: report(final=False)
    run_jobs(bench, repeat, notes, cases)
    table, png_note, md_path = report(final=True)
    say("")
    say("\n".join(table))
    say("")
    say(f"written: {md_path} ({(time.time() - started) / 60:.1f} min); timelines: {png_note}")
    if args.keep:
        say(f"kept: {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
