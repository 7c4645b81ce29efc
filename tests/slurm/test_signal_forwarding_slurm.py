"""PreemptionPlugin's signal forwarding (core/sbatch/forward_signal.sh) on the local Slurm, on a node other than
the host's first slurmd.

The local cluster runs several slurmd on one host. ``scontrol listpids JOB`` asks the host's first slurmd unless a
node is named, so on any other node it found none of the job's tasks, and the forwarded preemption signal reached
no rank: the job trained on into its time limit and was requeued as if it had saved (seen when three preemption
jobs ran at once and one landed on the second node). The forwarding names its node (``SLURMD_NODENAME``).
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from tests.helpers import RANK, forward_block_program
from tests.slurm_fixture import TERMINAL_STATES

pytestmark = pytest.mark.slurm


def _second_node() -> str:
    nodes = subprocess.run(["sinfo", "-h", "-N", "-o", "%N"], capture_output=True, text=True, check=True)
    names = sorted(set(nodes.stdout.split()))
    assert len(names) >= 2, names
    return names[1]


def test_forwarding_finds_the_tasks_of_a_job_on_another_slurmd_of_the_host(local_slurm, tmp_path):
    node = _second_node()
    (tmp_path / "rank.py").write_text(RANK)
    ready = tmp_path / "ready"
    job_id, out = local_slurm.sbatch(
        f"#!/bin/bash\nsrun -n1 {sys.executable} {tmp_path / 'rank.py'} {ready}\n",
        args=[f"--nodelist={node}", "--ntasks=1", "--time=5"],
    )
    try:
        deadline = time.monotonic() + 120  # the job may wait for the node behind another test's job
        while not (ready.exists() and ready.read_text()):
            rec, _ = local_slurm.job_record(job_id)
            assert rec.get("JobState") not in TERMINAL_STATES, rec  # passing states (CONFIGURING, ...) too
            assert time.monotonic() < deadline, rec
            time.sleep(0.2)
        program = forward_block_program(
            'echo "node=$SLURMD_NODENAME"; echo "unnamed: $(scontrol listpids "$SLURM_JOB_ID" | tail -n +2 | wc -l)"\n'
            "nrp_signal_tasks TERM\n"
        )
        done = subprocess.run(
            ["srun", "--overlap", f"--jobid={job_id}", "-N1", "-n1", "bash", "-c", program],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        # Why the node is named: this node's tasks are invisible to listpids without it.
        assert f"node={node}" in done.stdout and "unnamed: 0" in done.stdout, done.stdout
        assert f"sent SIGTERM to task pid {ready.read_text()} (python" in done.stdout, done.stdout
        res = local_slurm.wait(job_id, timeout=60, output_path=out)
    finally:
        subprocess.run(["scancel", job_id], capture_output=True)
    assert (res.state, res.exit_code) == ("COMPLETED", 0), res.stdout_text
    assert "rank got SIGTERM, saved" in res.stdout_text, res.stdout_text
