#!/usr/bin/env python
"""Time lost to a lost node: a hot spare inside the job vs a requeue with the node excluded, side by side.

Run from the repository root with the local Slurm up (``bash .ci/slurm-up``)::

    .venv/bin/python benchmarks/spare_nodes/run.py [--repeat N]

Each repetition submits 2-node jobs of the reference workload through NeMo-Run's real SlurmExecutor (one rank per
node, 20 steps of 0.3 s, a checkpoint every 5) and, once the step-5 checkpoint is saved, SIGKILLs every process of
a training node that does not host the rendezvous store (the loss a spare can make good):

* spare: ``FaultTolerancePlugin(spare_nodes=1)`` (3 nodes, ``ft_launcher --nnodes 2:3``): the spare joins the next
  rendezvous in the same job;
* requeue: ``FaultTolerancePlugin()`` (today's default on 2 nodes): srun ends the step, the requeue guard requeues
  the job with the lost node excluded, Slurm starts it on other nodes, training resumes from the checkpoint. Slurm
  keeps every requeued batch job pending (Reason=BeginTime) for ``AuthInfo=cred_expire`` seconds, 120 by default
  (slurm.conf(5): "This also controls how long a requeued job must wait before starting again"): in ``requeue``
  that hold stays, as on a cluster with Slurm's defaults; in ``requeue-hold-lifted`` it is lifted after 2 s (as the
  tests do), which leaves the requeue's own cost on an idle cluster;
* in-place, the yardstick for ``plan``: ``FaultTolerancePlugin()`` and only the training rank of that node killed
  (the node stays): the launchers restart the workers on the same nodes, an in-job restart.

Time lost = the kill -> the first training iteration after the resume (the first training_log line after the
workload's "RESUMED from step" line; whole seconds; every variant redoes the same steps after step 5). No variant
includes a queue wait for free nodes (the cluster is idle). The variants alternate, so a change of the machine's
load hits each. Prints the rows and the ratios; writes nothing else.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import signal
import statistics
import sys
import tempfile
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from nemo_resiliency_plugins.job import log_lines as ll
from tests.slurm.nrp_jobs import signal_node_when, submit, training_node_without_store  # noqa: E402
from tests.slurm_fixture import STATE_DIR, LocalSlurm  # noqa: E402

_ITERATION = ll.MB_ITERATION  # groups 1, 2: its time, the iteration
# variant -> (FaultTolerancePlugin fields, only the rank killed (not the node), Slurm's requeue hold lifted)
VARIANTS = {
    "spare": (dict(spare_nodes=1), False, True),
    "requeue": (dict(), False, False),
    "requeue-hold-lifted": (dict(), False, True),
    "in-place": (dict(), True, True),
}


def _ft(**extra) -> dict:
    return dict(
        num_in_job_restarts=2,
        num_job_retries_on_failure=1,
        calc_ft_timeouts=False,
        section_timeouts={"setup": 300, "step": 60, "checkpointing": 120},
        out_of_section_timeout=120,
        workload_check_interval=2,
        **extra,
    )


def one(slurm: LocalSlurm, variant: str, work: Path) -> dict:
    fields, ranks_only, lift_hold = VARIANTS[variant]
    tmp = Path(tempfile.mkdtemp(prefix=f"{variant}-", dir=work))
    env = {"NRP_STEP_TIME": "0.3", "NVRX_ENABLE_MULTI_LAUNCHERS_PER_NODE": "1"}
    job = submit(
        slurm,
        tmp,
        name=f"nrp-bench-{variant}",
        args=[f"checkpoint.save={tmp / 'ckpt'}"],
        time_limit="00:15:00",
        env=env,
        ft=_ft(**fields),
        nodes=2,
        ntasks_per_node=1,
    )
    killed: dict = {}
    killer = threading.Thread(
        target=signal_node_when,
        args=(job, 0, ll.exact(ll.WORKLOAD_SAVED, 5).pattern, signal.SIGKILL, killed, training_node_without_store),
        kwargs=dict(choose_after=ll.MB_ITERATION.pattern, ranks_only=ranks_only),  # chosen once the ranks run
        daemon=True,
    )
    killer.start()
    res = slurm.wait(job.job_id, timeout=900, release_requeue_hold=lift_hold)
    killer.join(timeout=5)
    at = dt.datetime.fromtimestamp(killed["at"]) if killed.get("at") else None
    after = None  # the first training iteration after the resume (the workload's RESUMED line) of that attempt
    for _, text in sorted(job.attempt_logs().items()):
        resumed = text.find("RESUMED from step")
        m = _ITERATION.search(text, resumed) if resumed >= 0 else None
        if m:
            after = dt.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S")
            break
    lost = (after - at).total_seconds() if after and at else None
    return dict(variant=variant, state=res.state, requeues=res.restarts, node=killed.get("node"), lost_s=lost)


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    slurm = LocalSlurm(
        partition="debug", state_dir=STATE_DIR, jobs_dir=Path(tempfile.mkdtemp()), started_here=False, accounting=True
    )
    work = Path(tempfile.mkdtemp(prefix="nrp-spare-bench-"))
    load0 = os.getloadavg()
    rows = []
    for rep in range(args.repeat):
        for variant in VARIANTS if rep % 2 == 0 else reversed(list(VARIANTS)):
            row = one(slurm, variant, work)
            rows.append(row)
            print(f"rep {rep} {variant:8s} {row}", flush=True)
    print(f"\nload average before: {load0}, after: {os.getloadavg()}")
    print("| variant | runs | time lost (s): each | median | Slurm requeues |")
    print("|---|---|---|---|---|")
    medians = {}
    for variant in VARIANTS:
        lost = sorted(r["lost_s"] for r in rows if r["variant"] == variant and r["lost_s"] is not None)
        medians[variant] = statistics.median(lost) if lost else None
        requeues = [r["requeues"] for r in rows if r["variant"] == variant]
        each = ", ".join(f"{x:.0f}" for x in lost)
        print(f"| {variant} | {len(lost)} | {each} | {_seconds(medians[variant])} | {requeues} |")
    print()
    for other in ("requeue", "requeue-hold-lifted", "in-place"):
        if medians["spare"] and medians[other]:
            print(f"spare / {other} (median time lost): {medians['spare'] / medians[other]:.2f}")


if __name__ == "__main__":
    main()
