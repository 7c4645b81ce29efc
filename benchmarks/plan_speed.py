"""How long ``nemo-resiliency plan`` takes for a 16,384-GPU, 54-day run (the issue's target: <= 10 s here).

    .venv/bin/python benchmarks/plan_speed.py [--repeat 3]

Prints, side by side in one run (medians of --repeat): the planning itself in this process (failure model,
optima, 3 mechanism sets x 23 save intervals x 100 simulated runs each), the whole command as a user runs it
(a fresh interpreter, imports included), and the command with ``--plugins slurm-pretraining`` (which imports
NeMo-Run to build the plugins), next to ``import nemo_run`` alone. Printed, never asserted: the machine is shared.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

ARGS = ["--gpus", "16384", "--step-time", "6", "--save-time", "60", "--async-save", "--days", "54"]
ARGS += ["--failure-profile", "llama3", "--json"]
TARGET_S = 10.0


def in_process() -> float:
    from nemo_resiliency_plugins.tools.planning import RunParams, llama3, plan
    from nemo_resiliency_plugins.tools.planning.mechanisms import our_defaults

    params = RunParams(gpus=16_384, step_time_s=6, save_time_s=60, async_save=True, days=54)
    started = time.perf_counter()
    plan(params, llama3(), our_defaults(params))
    return time.perf_counter() - started


def command(extra: list[str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "nemo_resiliency_plugins.tools.cli", "plan", *ARGS, *extra],
        capture_output=True,
        text=True,
        env=os.environ | {"PYTHONPATH": os.getcwd()},
    )
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"plan failed: {done.stderr.strip()}")
    return elapsed


def import_nemo_run() -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import nemo_run"], check=True)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    rows: dict[str, list[float]] = {
        "plan() in this process": [],
        "nemo-resiliency plan (fresh process)": [],
        "... --plugins slurm-pretraining": [],
        "(python -c 'import nemo_run' alone)": [],
    }
    for _ in range(args.repeat):
        rows["plan() in this process"].append(in_process())
        rows["nemo-resiliency plan (fresh process)"].append(command([]))
        rows["... --plugins slurm-pretraining"].append(command(["--plugins", "slurm-pretraining"]))
        rows["(python -c 'import nemo_run' alone)"].append(import_nemo_run())
    load = os.getloadavg()[0]
    print(
        f"16,384 GPUs x 54 days, Llama 3 profile; {args.repeat} repetitions, medians; load {load:.1f}; "
        f"{os.cpu_count()} cores"
    )
    print(f"| {'what':40} | median s | min s | max s | vs target {TARGET_S:g} s |")
    print(f"|{'-' * 42}|----------|-------|-------|----------------|")
    for name, times in rows.items():
        med = statistics.median(times)
        print(f"| {name:40} | {med:8.2f} | {min(times):5.2f} | {max(times):5.2f} | {med / TARGET_S:14.2f} |")


if __name__ == "__main__":
    main()
