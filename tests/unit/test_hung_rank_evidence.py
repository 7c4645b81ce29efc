"""Which node held the rank a collective waited for, from the ranks' stack dumps (issue 36): the requeue guard's
bash (``nrp_hung_rank_node``, core/sbatch/step_verdict.sh) and ``nemo-resiliency report`` (tools/report/stacks.py
and report_nodes.py) read the same dumps, one in awk, one in Python. Here both read the same logs and must give
the same node: the log of a real job and variants of it.

The fixture ``slurm-collective-hang`` is the Slurm FT module's 2-node job of 2026-12-07 (commit d758a7a plus this
change): one rank per node, FaultTolerancePlugin(diagnostics=True); rank 1 (task 1, nrp-node2) hangs at step 13
outside the all-reduce rank 0 (nrp-node1) waits in; both step sections time out, NVRx stops both ranks with
SIGABRT and each dumps its stack under torch elastic's prefix with the global rank. srun named nrp-node1 first
("srun: error: nrp-node1: task 0: Exited with exit code 1"): the node srun alone would have excluded.
"""

from __future__ import annotations

import re

import pytest

from nemo_resiliency_plugins.tools.report import report_experiment
from tests.slurm_fixture import local_slurm  # noqa: F401
from tests.unit.test_report import unpack
from tests.unit.test_step_verdict import guard

FIXTURE = "slurm-collective-hang"


def _drop_dump(text: str, rank: int) -> str:
    """The log without rank ``rank``'s dump (it was stopped before it could write one)."""
    out, skipping = [], False
    for line in text.splitlines(keepends=True):
        if line.startswith(f"[default0]:[rank{rank}]:Fatal Python error"):
            skipping = True
        if skipping and line.startswith(f"[default0]:[rank{rank}]:"):
            if "Extension modules:" in line:
                skipping = False
            continue
        out.append(line)
    return "".join(out)


def _no_collective(text: str) -> str:
    """Every rank's dump outside a collective (rank 0's all_reduce frame gone): nobody waited, no evidence."""
    return re.sub(r".*torch/distributed/distributed_c10d\.py.*\n", "", text)


def _step_wrote(log) -> str:
    """Bash that appends the job's launcher log to the step log ``guard`` marked (one rank per node)."""
    return f"cat '{log}' >> \"$(cut -d' ' -f2 \"$NRP_STEP_LOGS\")\"; SLURM_NTASKS_PER_NODE=1; "


VARIANTS = {
    "as-run": (lambda text: text, "nrp-node2 1"),
    "hung-rank-not-dumped": (lambda text: _drop_dump(text, 1), ""),
    "waiting-rank-not-dumped": (lambda text: _drop_dump(text, 0), ""),
    "nobody-in-a-collective": (_no_collective, ""),
}


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_the_guard_and_the_report_name_the_same_node(local_slurm, tmp_path, variant):  # noqa: F811
    change, expected = VARIANTS[variant]
    job_dir = unpack(FIXTURE, tmp_path)
    first = next((job_dir / "train").glob("log-*_0.out"))
    first.write_text(change(first.read_text()))
    found = guard(tmp_path, [], _step_wrote(first) + "nrp_hung_rank_node", nodelist="nrp-node[1-2]")
    assert found == expected, found
    (job,) = report_experiment(job_dir)
    hang = job.rows[0]
    # The report's node for the hang: the dumps' node where they name one; otherwise the rank that detected it.
    if expected:
        assert (hang.node, hang.outside_ranks) == ("nrp-node2", [1]), hang
    else:
        assert hang.node == f"nrp-node{hang.detected_on_rank + 1}", hang


def test_the_guard_excludes_the_hung_rank_s_node_not_the_one_srun_named(local_slurm, tmp_path):  # noqa: F811
    """srun named nrp-node1 first; the dumps say nrp-node2: the requeued job excludes nrp-node2."""
    job_dir = unpack(FIXTURE, tmp_path)
    script = _step_wrote(next((job_dir / "train").glob("log-*_0.out"))) + (
        "SLURM_JOB_NUM_NODES=2; exitcode=1; NRP_EXCLUDE_FAILED_NODES=1; "
        'nrp_exclude_nodes() { echo "exclude $1: $2"; }; nrp_exclude_failed_node'
    )
    err = "".join(f"srun: error: nrp-node{n}: task {n - 1}: Exited with exit code 1\n" for n in (1, 2))
    # (exit 1: the guard's EXIT trap ends the batch script with the step's code)
    out = guard(tmp_path, [], script, srun_err=err, nodelist="nrp-node[1-2]", rc=1)
    assert out == "exclude nrp-node2: held rank 1, not in the collective the other ranks waited in (their stack dumps)"


def test_the_report_of_the_real_job(tmp_path):
    (job,) = report_experiment(unpack(FIXTURE, tmp_path))
    assert (job.requeues, job.restarts, job.finished) == (1, 0, True)
    hang, last = job.rows
    assert hang.injected == ["hang at step 13 on rank 1"]
    assert hang.detected_by.startswith("section 'step' timeout")
    assert hang.outside_collective == ["rank 1"] and len(hang.stacks) == 2, hang.stacks
    assert hang.stacks[1].startswith("rank 0: in all_reduce"), hang.stacks
    assert (hang.node, hang.node_fault) == ("nrp-node2", None)
    assert (last.resumed_from, last.finished_step, last.node) == (10, 20, None)


def test_the_ranks_per_node_come_from_nvrx_s_own_line(local_slurm, tmp_path):  # noqa: F811
    """NVRx logs "Using nproc_per_node=1.": that, not the job's SLURM_NTASKS_PER_NODE (which NeMo-Run may set to
    the ranks of a node or to the one launcher), decides which node group rank 1 is in."""
    first = next((unpack(FIXTURE, tmp_path) / "train").glob("log-*_0.out"))
    script = _step_wrote(first) + "SLURM_NTASKS_PER_NODE=8; nrp_hung_rank_node"
    assert guard(tmp_path, [], script, nodelist="nrp-node[1-2]") == "nrp-node2 1"
