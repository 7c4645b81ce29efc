"""What the requeue guard reads from a multi-node step's own log (``core/sbatch/step_verdict.sh``), run by real bash
on lines in NVRx 0.7's and Megatron Bridge 0.6.2's formats: NVRx's no-restart verdict on any node (srun reports
143 when one node's ft_launcher exits 93 and the others are stopped), a straggler stop and the node of the
straggler rank, and a failed step without srun's node line under the template's ``set -e``.

The 2-node crash loop also runs end to end on the 4-node local Slurm (tests/slurm/test_fault_tolerance_slurm.py,
``test_two_node_crash_loop_*``); the step without a node line and the straggler stop are proven here only (see
docs/multi-node.md, "How this is proven").
"""

from __future__ import annotations

import os
import subprocess

import pytest

from nemo_resiliency_plugins.core import slurm_script
from tests.slurm_fixture import local_slurm  # noqa: F401
from tests.unit.test_silent_node_evidence import E, I, line, run_bash

NO_RESTART = (
    "NVRx decided the job must not be restarted (no_progress): Progress tracker: no progress in 2 cycles. "
    "Agent's exit code = 93"
)
ASSIGNED = "ft_rendezvous_barrier.py:2752 Assigned active rank {g} (round=0)"
REPORT = (
    "[default0]:[NVRx] STRAGGLER DETECTION WARNING: Some GPUs have worse relative performance. Affected ranks: {ids}"
)
STOP = "[default0]:Exiting program due to straggler detection."


def guard(tmp_path, lines: list[str], script: str, *, srun_err: str = "", nodelist: str = "n[1-4]", rc: int = 0) -> str:
    log = tmp_path / "step.log"
    log.write_text("old run's line: " + NO_RESTART + "\n")  # before the mark: not this step's
    err = tmp_path / "srun.err"
    err.write_text(srun_err)
    setup = (
        f"NRP_SRUN_ERR={err}; NRP_SCONTROL='command scontrol'; SLURM_JOB_ID=7; SLURM_JOB_NODELIST='{nodelist}'; "
        f"nrp_step_logs_mark srun --output {log} --kill-on-bad-exit=1 ft_launcher x; "
        f"printf '%s\\n' {' '.join(repr(x) for x in lines)} >> {log}; "
    )
    done = run_bash(setup + script)
    assert done.returncode == rc, (done.stdout, done.stderr)
    return done.stdout.strip()


def test_the_no_restart_verdict_is_read_from_any_node_and_only_from_this_step(tmp_path):
    lines = [line("30,236", I, 1, ASSIGNED.format(g=1)), line("35,448", E, 1, NO_RESTART)]
    assert guard(tmp_path, lines, "nrp_no_restart_reason") == "no_progress"
    assert guard(tmp_path, lines[:1], "nrp_no_restart_reason") == ""  # only the earlier run said it


def test_the_verdict_ends_the_job_failed_with_the_no_restart_code_and_no_exclusion(tmp_path):
    lines = [line("35,448", E, 0, NO_RESTART)]
    script = (
        "set -e; exitcode=143; NRP_NO_RESTART_EXIT_CODE=93; NRP_EXCLUDE_FAILED_NODES=1; "
        'scontrol requeue 7; echo "exitcode=$exitcode"'
    )
    # The guard's EXIT trap then ends the batch script with that code, which Slurm reports.
    out = guard(tmp_path, lines, script, srun_err="srun: error: n2: task 1: Terminated\n", rc=93)
    assert "NVRx decided the job must not be restarted (no_progress; step exit code 143" in out, out
    assert "not requeued, no node excluded" in out and "excludes" not in out, out
    assert out.endswith("exitcode=93"), out


def _guard_with_tmpdir(tmp_path, script: str):
    """The guard's blocks, then ``script``, in real bash whose TMPDIR is a fresh folder (returned with the result)."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    program = f"TORCHX_MAX_RETRIES=0\n{slurm_script._CHAIN_HELPERS}\n{slurm_script._REQUEUE_GUARD}\n{script}"
    env = {**os.environ, "TMPDIR": str(scratch)}
    return scratch, subprocess.run(["bash", "-c", program], capture_output=True, text=True, timeout=30, env=env)


@pytest.mark.parametrize("exitcode", [0, 143])
def test_the_guard_leaves_no_scratch_file_on_the_batch_host(tmp_path, exitcode):
    """The guard's files in the batch host's TMPDIR (srun's captured stderr, the step-log marks, the watcher's
    folder) are removed when the batch script exits, whatever the step's exit code."""
    scratch, done = _guard_with_tmpdir(tmp_path, f'ls "$TMPDIR" | wc -l; exitcode={exitcode}')
    assert done.returncode == exitcode and done.stdout.split() == ["3"], (done.stdout, done.stderr)
    assert list(scratch.iterdir()) == []


def test_the_guard_removes_its_scratch_files_before_it_requeues(tmp_path):
    """Slurm kills a requeued batch script (no EXIT trap runs then): the files go before scontrol requeue."""
    script = 'count() { echo "$* with $(ls "$TMPDIR" | wc -l) files"; }; NRP_SCONTROL=count; exitcode=1; '
    _, done = _guard_with_tmpdir(tmp_path, script + "scontrol requeue 7; trap - EXIT")
    assert done.stdout.strip().splitlines()[-1] == "requeue 7 with 0 files", (done.stdout, done.stderr)


def test_a_failure_without_a_node_line_survives_set_e_and_says_so(tmp_path):
    # NeMo-Run's template turns `set -e` on after the step; the first grep finding nothing used to end the script.
    script = "set -e; nrp_exclude_failed_node; echo survived"
    out = guard(tmp_path, [], script, srun_err="srun: error: Unable to create step for job 7: Invalid node list\n")
    assert "cannot tell which node failed; requeue without excluding one" in out and out.endswith("survived"), out


@pytest.mark.slurm
def test_a_straggler_rank_is_mapped_to_its_node(local_slurm, tmp_path):  # noqa: F811
    # The mapping asks the controller (`scontrol show node`) for each node's host name: with no slurmctld to
    # answer, scontrol retries for MessageTimeout (30 s on the local cluster), hence the real cluster here.
    # Every node of the local cluster reports the same host name ('vm'): rank 1 -> group 1 -> task 0 (the task
    # that was assigned group rank 1) -> the first node of the allocation.
    lines = [
        line("10,480", I, 0, ASSIGNED.format(g=1)),
        line("10,487", I, 1, ASSIGNED.format(g=0)),
        REPORT.format(ids="{StragglerId(rank=0, node='vm')}"),
        REPORT.format(ids="{StragglerId(rank=1, node='vm')}"),  # the last report counts
        STOP,
    ]
    prefix = "SLURM_NTASKS_PER_NODE=1; "
    assert guard(tmp_path, lines, prefix + "nrp_straggler_nodes", nodelist="n[3-4]") == "n3"
    assert guard(tmp_path, lines, "nrp_straggler_stopped && echo stopped") == "stopped"
    assert guard(tmp_path, lines[:-1], "nrp_straggler_stopped || echo running") == "running"
    # Two ranks per node; a reported host name that is one of the job's nodes is taken as it is.
    lines = [REPORT.format(ids="{StragglerId(rank=3, node='vm'), StragglerId(rank=0, node='n3.cluster')}")]
    out = guard(tmp_path, lines, "SLURM_NTASKS_PER_NODE=2; nrp_straggler_nodes", nodelist="n[3-4]")
    assert out.split() == ["n4", "n3"], out
