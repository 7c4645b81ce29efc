"""The local one-node Slurm cluster (.ci/slurm-up) does what the resiliency tests rely on:
multi-task steps, a warning signal before the time limit, and requeue with SLURM_RESTART_COUNT."""

from __future__ import annotations

import re
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.slurm


def test_two_task_job_completes(local_slurm):
    t0 = time.monotonic()
    job_id, state, exit_code, out = local_slurm.run_sbatch(
        """#!/bin/bash
#SBATCH --ntasks=2
srun -n2 bash -c 'echo "task $SLURM_PROCID of $SLURM_NTASKS on $(hostname -s) job $SLURM_JOB_ID"'
""",
        timeout=60,
    )
    assert (state, exit_code) == ("COMPLETED", 0), out
    for rank in (0, 1):
        assert re.search(rf"^task {rank} of 2 on \S+ job {job_id}$", out, re.M), out
    print(f"2-task job {job_id}: {time.monotonic() - t0:.1f} s")


# The warning signal. slurmctld checks time limits every PERIODIC_TIMEOUT (30 s) and sends the
# --signal=SIG@N warning at the first check where now + N + 30 >= end, so it arrives between N and
# about N + 30 s before the limit (Slurm documents "up to 60 seconds earlier than specified"). With
# --time=2 and @60 it comes 30..60 s after the start, i.e. 60..90 s before the limit.
WARN_N = 60
_END_AND_START = r"""
end=$(scontrol show job -o "$SLURM_JOB_ID" | grep -o 'EndTime=[^ ]*' | cut -d= -f2)
echo "start=$(date +%s.%N) end=$(date -d "$end" +%s)"
"""

B_SCRIPT = f"""#!/bin/bash
#SBATCH --ntasks=1 --time=2 --signal=B:TERM@{WARN_N}
{_END_AND_START}
# The batch shell itself gets the signal (B:); bash runs the trap between commands, so wait on a
# background sleep instead of sleeping in the foreground.
trap 'echo "batch TERM at $(date +%s.%N)"; exit 0' TERM
while true; do sleep 1 & wait $!; done
"""

STEP_SCRIPT = f"""#!/bin/bash
#SBATCH --ntasks=1 --time=2 --signal=TERM@{WARN_N}
{_END_AND_START}
# Without B: only the step's tasks get the signal, not this shell.
srun -n1 {sys.executable} -c '
import signal, sys, time
def on_term(signum, frame):
    print(f"task TERM at {{time.time():.3f}}", flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
print("task started", flush=True)
while True:
    time.sleep(1)
'
echo "srun rc=$?"
"""


def _seconds_before_limit(out: str, marker: str) -> tuple[float, float]:
    start = float(re.search(r"^start=([\d.]+)", out, re.M).group(1))
    end = float(re.search(r" end=(\d+)$", out, re.M).group(1))
    m = re.search(rf"^{marker} TERM at ([\d.]+)", out, re.M)
    assert m, f"no SIGTERM recorded:\n{out}"
    got = float(m.group(1))
    return end - got, got - start


def test_warning_signal_arrives_before_time_limit(local_slurm):
    t0 = time.monotonic()
    # Both variants run at the same time (the partition oversubscribes), so the test takes one window.
    jid_b, out_b = local_slurm.sbatch(B_SCRIPT)
    jid_s, out_s = local_slurm.sbatch(STEP_SCRIPT)
    res_b = local_slurm.wait(jid_b, timeout=170, output_path=out_b)
    res_s = local_slurm.wait(jid_s, timeout=170, output_path=out_s)

    assert (res_b.state, res_b.exit_code) == ("COMPLETED", 0), res_b.stdout_text
    before_b, after_start_b = _seconds_before_limit(res_b.stdout_text, "batch")

    assert (res_s.state, res_s.exit_code) == ("COMPLETED", 0), res_s.stdout_text
    assert "task started" in res_s.stdout_text and "srun rc=0" in res_s.stdout_text, res_s.stdout_text
    before_s, after_start_s = _seconds_before_limit(res_s.stdout_text, "task")

    for before in (before_b, before_s):
        # Never later than N before the limit (1 s slack for the whole-second EndTime), never more than
        # N + 60 early.
        assert WARN_N - 1 <= before <= WARN_N + 61, (before, res_b.stdout_text, res_s.stdout_text)
    print(
        f"B:TERM@{WARN_N}: {after_start_b:.1f} s after start, {before_b:.1f} s before the limit; "
        f"TERM@{WARN_N} (step): {after_start_s:.1f} s after start, {before_s:.1f} s before the limit; "
        f"test {time.monotonic() - t0:.1f} s"
    )


REQUEUE_SCRIPT = """#!/bin/bash
#SBATCH --ntasks=1
echo "run restart=${SLURM_RESTART_COUNT:-0} at $(date +%T)"
srun -n1 bash -c 'exit 3'
rc=$?
if [ "$rc" -ne 0 ] && [ "${SLURM_RESTART_COUNT:-0}" = 0 ]; then
  echo "step failed rc=$rc; requeueing"
  scontrol requeue "$SLURM_JOB_ID"   # Slurm kills this run right after
  exit "$rc"
fi
echo "second run sees SLURM_RESTART_COUNT=$SLURM_RESTART_COUNT"
exit 0
"""


def test_failed_job_requeues_itself_once(local_slurm):
    t0 = time.monotonic()
    # release_requeue_hold (default): lift Slurm's 120 s BeginTime hold on the requeued job.
    res = local_slurm.run_sbatch(REQUEUE_SCRIPT, timeout=90)
    out = res.stdout_text
    assert (res.state, res.exit_code) == ("COMPLETED", 0), out
    assert res.restarts == 1, (res.record, out)
    assert "run restart=0" in out and "step failed rc=3; requeueing" in out, out
    assert "run restart=1" in out and "second run sees SLURM_RESTART_COUNT=1" in out, out
    assert out.count("run restart=") == 2, out
    print(f"requeue job {res.job_id}: {time.monotonic() - t0:.1f} s")
    # The sources a test may read Slurm state from once the live record is gone carry the requeue count too
    # (tests/slurm_fixture.py): the completion log holds one line per run that ended, sacct -D one row per run.
    runs = local_slurm._jobcomp_records(res.job_id)
    assert [r["JobState"] for r in runs] == ["PENDING", "COMPLETED"], runs
    assert local_slurm.accounting  # .ci/slurm-up brings up slurmdbd
    deadline = time.monotonic() + 90  # slurmdbd hears of the job's end after the controller (SACCT_SETTLE_S)
    while True:
        p = subprocess.run(
            ["sacct", "-n", "-X", "-D", "-P", "-j", res.job_id, "-o", "State"], capture_output=True, text=True
        )
        states = [s.split()[0] for s in p.stdout.split()]
        if states[-1:] == ["COMPLETED"] or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert states == ["REQUEUED", "COMPLETED"], p.stdout
