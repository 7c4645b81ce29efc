"""An in-job restart broken into its phases (issue 52 item 2): one LocalExecutor job of the reference workload under
FaultTolerancePlugin, rank 1 SIGKILLed at step 13, ft_launcher restarts both ranks; ``report``'s model and
``plan --from``'s phases (tools/planning/measured.py) from the job's own log: the launcher (stop, rendezvous,
spawn), the imports, the process group, the model's build, the checkpoint's load, the first step.

Run from the repository root (the launch lock shared with the tests):

    flock /tmp/nrp-launch.lock .venv/bin/python benchmarks/restart_phases.py [--repeat N]

Prints one row per restart, each phase's share of the restart, and the phase that takes longest. Whole-second
stamps (Megatron Bridge's format) make each phase good to about 1 s.

``--log PATH`` runs nothing: the same rows from a job that already ran elsewhere (a GPU job's ``combined.log`` or
its job directory, e.g. what ``benchmarks/gpu/restart_phases_gpu.sh`` brings back from the lent GPU), read by the
same ``report`` model and ``restart_phases``:

    .venv/bin/python benchmarks/restart_phases.py --log benchmarks/results/gpu/2026-12-05/call1/nemorun
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
from pathlib import Path

from nemo_resiliency_plugins import FaultTolerancePlugin
from nemo_resiliency_plugins.testing.local_run import run_local, workload_task
from nemo_resiliency_plugins.tools.planning.measured import PHASES, restart_phases
from nemo_resiliency_plugins.tools.report import report_job


def one_job(work: Path, index: int) -> list[dict[str, float | None]]:
    """One kill job; each restart's phases (and its span)."""
    save = work / f"save-{index}"
    env = {"NRP_STEP_TIME": "0.15", "NRP_FAULT": "kill", "NRP_FAULT_STEP": "13", "NRP_FAULT_RANK": "1"}
    plugin = FaultTolerancePlugin(
        num_in_job_restarts=1,
        section_timeouts={"setup": 120, "step": 5, "checkpointing": 60},
        out_of_section_timeout=60,
        workload_check_interval=1,
    )
    result = run_local(
        workload_task([f"checkpoint.save={save}"], env=env), [plugin], name=f"phases-{index}", base_dir=str(work)
    )
    if result.state != "SUCCEEDED":
        raise SystemExit(f"job {index} ended {result.state}:\n{result.log[-3000:]}")
    logs = sorted(Path(result.job_dir).glob("**/combined.log"))
    return phase_rows(logs[0].parent)


def phase_rows(job_dir: Path) -> list[dict[str, float | None]]:
    """Each restart's phases (and its span) of the job in ``job_dir``, by report's model."""
    return [{**r.phases, "span": r.span_s} for r in restart_phases(report_job(job_dir))]


def logged_job(path: Path, work: Path) -> Path:
    """A job directory report reads: ``path`` itself, or a copy of its one ``*combined.log`` as ``combined.log`` (the
    name report reads a LocalExecutor job's log under; the GPU proofs bring it back as ``nemorun_combined.log``)."""
    if path.is_dir() and (path / "combined.log").is_file():
        return path
    logs = [path] if path.is_file() else sorted(path.glob("*combined.log"))
    if len(logs) != 1:
        raise SystemExit(f"--log {path}: wanted one combined.log (a file, or a folder holding one), found {len(logs)}")
    shutil.copy(logs[0], work / "combined.log")
    return work


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--log", type=Path, help="read this job's log instead of running jobs")
    args = parser.parse_args()
    rows: list[dict[str, float | None]] = []
    with tempfile.TemporaryDirectory(prefix="nrp-phases-") as tmp:
        if args.log is not None:
            rows = phase_rows(logged_job(args.log, Path(tmp)))
        for i in range(0 if args.log is not None else args.repeat):
            rows += one_job(Path(tmp), i)
    if not rows:
        raise SystemExit("no restart in the job's log (a detection followed by a training_log line)")
    print_rows(rows)


def print_rows(rows: list[dict[str, float | None]]) -> None:
    """The table, each phase's median share of the restart, and the largest phase."""
    names = [*PHASES, "span"]
    print("restart | " + " | ".join(names))
    for n, row in enumerate(rows):
        print(f"{n} | " + " | ".join("-" if row[k] is None else f"{row[k]:.3f}" for k in names))
    medians = {k: statistics.median(r[k] for r in rows if r[k] is not None) for k in PHASES if any(r[k] for r in rows)}
    span = statistics.median(r["span"] for r in rows)
    print("median share of the restart: " + ", ".join(f"{k} {v / span:.0%}" for k, v in medians.items()))
    largest = max(medians, key=medians.__getitem__)
    print(f"largest phase: {largest} ({medians[largest]:.1f} s of {span:.1f} s)")


if __name__ == "__main__":
    main()
