"""Main example job: fault tolerance that survives a killed rank, on one machine.

The reference workload (a small deterministic 2-rank CPU training loop that runs Megatron Bridge's own
config parser and fault-tolerance hooks) is launched through NeMo-Run's LocalExecutor with one line of
resiliency:

    plugins=[FaultTolerancePlugin(num_in_job_restarts=3, ...)]

Rank 1 is killed (SIGKILL) mid-run. NVRx's ft_launcher restarts the worker group, the workload resumes
from its newest checkpoint and finishes. A fault-free run of the same job is made first, and the final
parameters of both runs are compared: nothing is lost if they are bit-identical.

Run it with the README's first command, or directly from the project's environment:

    .venv/bin/python -m nemo_resiliency_plugins.recipes.local_fault_tolerance
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import torch

from nemo_resiliency_plugins import FaultTolerancePlugin
from nemo_resiliency_plugins.testing.local_run import run_local, workload_task

SHOW = ("FAULT_INJECTED", "Worker group", "will restart", "RESUMED", "STARTING", "FINISHED", "Section '", "FT: loaded")


def plugin() -> FaultTolerancePlugin:
    # Short timeouts so a hang would be caught within seconds on this small job; production values are
    # the plugin's defaults (Megatron Bridge's documented 600 / 180 / 420 s).
    return FaultTolerancePlugin(
        num_in_job_restarts=3,
        section_timeouts={"setup": 120, "step": 10, "checkpointing": 60},
        out_of_section_timeout=60,
        workload_check_interval=1,
    )


def train(save_dir: Path, name: str, fault: str | None, steps: int, fault_step: int):
    env = {"NRP_STEP_TIME": "0.1"}
    if fault:
        env |= {"NRP_FAULT": fault, "NRP_FAULT_STEP": str(fault_step), "NRP_FAULT_RANK": "1"}
    task = workload_task(
        [f"train.train_iters={steps}", f"checkpoint.save={save_dir}", "checkpoint.save_interval=10"], env=env
    )
    result = run_local(task, [plugin()], name=name, ntasks=2)
    print(f"\n=== {name}: job {result.state} in {result.wall_s:.1f} s ===")
    for line in result.lines:
        if any(key in line for key in SHOW):
            print("  " + line.strip())
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--fault-step", type=int, default=25)
    parser.add_argument("--fault", default="kill", choices=["kill", "hang", "raise"])
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="nrp-main-job-"))
    clean = train(work / "fault-free", "fault-free", None, args.steps, args.fault_step)
    faulty = train(work / "with-fault", f"{args.fault}-rank-1", args.fault, args.steps, args.fault_step)

    same = False
    if clean.succeeded and faulty.succeeded:
        a = torch.load(work / "fault-free" / "final_params.pt")
        b = torch.load(work / "with-fault" / "final_params.pt")
        same = a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    restarted = bool(faulty.grep("will restart"))
    resumed = bool(faulty.grep("RESUMED from step"))
    print("\n=== summary ===")
    print(f"  fault injected and detected : {bool(faulty.grep('FAULT_INJECTED')) and restarted}")
    print(f"  in-job restart              : {restarted}")
    print(f"  resumed from checkpoint     : {resumed}")
    print(f"  final state                 : {faulty.state}")
    print(f"  parameters equal fault-free : {same}")
    print(f"  wall time fault-free / fault: {clean.wall_s:.1f} s / {faulty.wall_s:.1f} s")
    print(f"  logs: {faulty.job_dir}")
    ok = same and restarted and resumed
    print("OK: the job survived the fault with nothing lost" if ok else "FAILED: see the log above")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
