"""FaultTolerancePlugin on a real local Slurm through NeMo-Run's SlurmExecutor: ft_launcher inside the job
(the FT branch of NeMo-Run's sbatch template), an in-job restart of a killed rank, a failed job requeued by
``num_job_retries_on_failure`` and resumed from its checkpoint, and a finished job NOT requeued again.

NeMo-Run's FT template (``ft_launcher_slurm.j2``) ends every run with ``scontrol requeue`` unless a
"finished flag" file exists or the failure limit is reached, and Megatron Bridge never writes the flag: without
the plugins' requeue guard a job that succeeded is requeued, resumes at its last iteration, succeeds again
and is requeued again, for ever (``S`` lines never count as failures). The fault-free job here is the proof
that the guard ends it after one run.

Issue 18's life-of-a-job cases run in the same batch of jobs (all submitted together, followed concurrently):

* a crash loop (a rank killed at the same step in every cycle): NVRx's progress tracker, pointed by the plugin at
  Megatron Bridge's iteration file, stops restarting after ``max_no_progress_cycles`` cycles; ft_launcher exits
  with NVRx's no-restart code and the guard does not requeue: the job ends FAILED with that code;
* a rank killed later in each cycle (progress every time) keeps being restarted until the job finishes;
* a 2-node job on the multi-node cluster (one ft_launcher per node, c10d rendezvous): every process of the node
  running rank 1 is SIGKILLed from outside (a node lost) -> requeued with that node excluded -> resumes on a
  spare node; then that node hangs as a whole (every process on it SIGSTOPped: a kernel, driver or file-system
  hang) -> the healthy node's step section timeout fires, the hung node's launcher stays silent -> requeued
  excluding the hung node -> finishes with the fault-free run's parameters. The hung node is the one hosting the
  rendezvous store: the healthy launcher then blocks in a TCPStore call for good, and only the guard's watchdog
  (``silent_node_timeout``) ends the step.
* issue 34, a 2-node job with two hot spares (4 nodes, ``ft_launcher --nnodes 2:4``): every process of a training
  node that does not host the rendezvous store is SIGKILLed after the step-5 checkpoint -> a spare joins the next
  rendezvous in the same Slurm job (no requeue) -> resumes from step 5 with the same world size; then that spare's
  node freezes after the step-15 save -> the other spare joins the next round -> resumes from step 15, finishes,
  and the spare block stops the step the frozen task held.
* issue 34, spares running out: a 2-node job with one spare (3 nodes): a training node lost after the step-5
  checkpoint (the spare takes its place), then the spare's node after the step-15 checkpoint -> the store host's
  launcher waits NRP_SPARE_JOIN_TIMEOUT for a second node, exits, and the guard requeues the job excluding the first
  lost node -> the second run resumes from step 15 and finishes.
* issue 36, a 2-node job with diagnostics on: rank 1 hangs outside the all-reduce rank 0 waits in -> both ranks
  time out and dump their stacks (each line with its global rank) -> the guard excludes rank 1's node, whichever
  node srun named first -> the second run resumes from step 10 and finishes.

The faulty runs' final parameters must equal the fault-free run's, bit for bit.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from nemo_resiliency_plugins.job import log_lines as ll
from nemo_resiliency_plugins.testing.faults import SPOOF_LINES
from nemo_resiliency_plugins.tools.report import report_experiment
from tests.helpers import assert_ended_by_kill
from tests.slurm.nrp_jobs import (
    ASSIGNED_ACTIVE,
    finished_hash,
    job_processes,
    launcher_times,
    nemo_run_state,
    newest_training_node_without_store,
    signal_node_when,
    store_pids,
    submit,
    training_node_without_store,
)
from tests.slurm_fixture import REQUEUE_RELEASE_DELAY, TERMINAL_STATES

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

STEPS = 20  # the reference config's train.train_iters; checkpoint every 5 steps
FAULT_STEP = 13  # the killed rank's attempt resumes from step 10


# The user's own setup_lines (kept and called by the plugins' srun function): in the first run only, the launchers'
# step asks for more CPUs per task than a node has, and Slurm refuses to create it ("srun: error: Unable to create
# step for job <id>: More processors requested than permitted"): a failed step with no line naming a node.
NO_STEP_ON_FIRST_RUN = """if [ "${SLURM_RESTART_COUNT:-0}" = 0 ]; then
  srun() { case " $* " in *" ft_launcher "*) command srun --cpus-per-task=64 "$@" ;; *) command srun "$@" ;; esac; }
fi"""


def _ft(**overrides) -> dict:
    settings = dict(
        num_in_job_restarts=1,
        num_job_retries_on_failure=1,
        section_timeouts={"setup": 300, "step": 60, "checkpointing": 120},
        out_of_section_timeout=120,
        workload_check_interval=2,
    )
    settings.update(overrides)
    return settings


def _two_nodes(env: dict, **ft) -> dict:
    """A job of 2 training nodes, one rank each. The cluster's nodes share one host (one address): NVRx's rendezvous
    would take their launchers for a misconfiguration on one node unless told that this simulates several nodes.
    calc_ft_timeouts off: with it, Megatron Bridge 0.6.2 fails a requeued run that had already finished
    (Megatron-Bridge#5711, which the plugin warns about), so one spurious requeue would end the job FAILED."""
    return dict(
        env={**env, "NVRX_ENABLE_MULTI_LAUNCHERS_PER_NODE": "1"},
        ft=_ft(calc_ft_timeouts=False, **ft),
        nodes=2,
        ntasks_per_node=1,
    )


def _store_host_node(job) -> str:
    """SLURM_NODEID of the node whose ft_launcher hosts the rendezvous TCPStore."""
    listening = store_pids(job)
    for node in ("0", "1"):
        if listening & set(job_processes(job.job_id, node)):
            return node
    return "1"


#: The ranks of the attempt run (a training_log line): the node to signal can be chosen ahead of its trigger.
RANKS_RUN = ll.MB_ITERATION.pattern


def _lose_a_training_node_then_freeze_its_spare(job, killed: dict, frozen: dict, second=signal.SIGSTOP) -> None:
    """Issue 34: a training node lost after the step-5 save (a spare takes its place), then the node that spare
    was on frozen (or, ``second``, lost too) after the resumed ranks' step-15 save. Both triggers are in the first
    run's log; the second node is chosen once the ranks resumed."""
    if signal_node_when(
        job,
        0,
        ll.exact(ll.WORKLOAD_SAVED, 5).pattern,
        signal.SIGKILL,
        killed,
        training_node_without_store,
        choose_after=RANKS_RUN,
    ):
        signal_node_when(
            job,
            0,
            ll.WORKLOAD_RESUMED.pattern + r"[\s\S]*" + ll.exact(ll.WORKLOAD_SAVED, 15).pattern,
            second,
            frozen,
            newest_training_node_without_store,
            choose_after=ll.WORKLOAD_RESUMED.pattern + r"[\s\S]*" + RANKS_RUN,
        )


def _lose_then_freeze_a_node(job, killed: dict, frozen: dict) -> None:
    if signal_node_when(job, 0, ll.exact(ll.WORKLOAD_SAVED, 5).pattern, signal.SIGKILL, killed, choose_after=RANKS_RUN):
        # The node hosting the store: the case where the healthy launcher blocks for good and only the guard's
        # watchdog ends the step (the other case, srun ending it, is replayed in test_silent_node_evidence.py).
        signal_node_when(
            job,
            1,
            ll.exact(ll.WORKLOAD_SAVED, 10).pattern,
            signal.SIGSTOP,
            frozen,
            _store_host_node,
            choose_after=RANKS_RUN,
        )


@pytest.fixture(scope="module")
def jobs(local_slurm, tmp_path_factory):
    t0 = time.monotonic()
    crash_loop = {"NRP_FAULT": "kill", "NRP_FAULT_REPEAT": "same"}
    # Issue 51 / 47.15: in the requeue, crash-loop and spare jobs every rank also prints NVRx's verdict lines
    # verbatim (testing/faults.py SPOOF_LINES): each job must still end as it does without them.
    spoof = {"NRP_SPOOF_LINES": "1"}
    specs = {
        "fault-free": dict(env={}, ft=_ft()),
        "requeue": dict(env={"NRP_FAULT": "kill", **spoof}, ft=_ft(num_in_job_restarts=0)),
        "no-retry-left": dict(env={"NRP_FAULT": "kill"}, ft=_ft(num_in_job_restarts=0, num_job_retries_on_failure=0)),
        # 3 restarts allowed, but the tracker stops after 1 cycle without a new checkpoint (one cycle fewer than
        # the 2 of earlier runs: the same decision, one rank generation less of CI time).
        "crash-loop": dict(env={**crash_loop, **spoof}, ft=_ft(num_in_job_restarts=3, max_no_progress_cycles=1)),
        # Killed 8 steps after each resume: a new checkpoint every cycle; even a 1-cycle limit never stops it.
        "progress-each-cycle": dict(
            env={"NRP_FAULT": "kill", "NRP_FAULT_REPEAT": "after_resume", "NRP_FAULT_STEP": "8"},
            ft=_ft(num_in_job_restarts=3, max_no_progress_cycles=1),
        ),
        # Issue 32. The crash loop on 2 nodes, one rank each: the killed rank's launcher exits 93, srun stops the
        # other node and returns 143; the guard reads NVRx's verdict in the launchers' log and ends the job FAILED,
        # no requeue, no node excluded. (It once failed before NVRx's decision: every multi-node job on this
        # one-host cluster shared NeMo-Run's rendezvous port 29500, so another job's end took its store away;
        # FaultTolerancePlugin now gives each multi-node job a port of its own.)
        "two-node-crash-loop": dict(
            env={**crash_loop, "NVRX_ENABLE_MULTI_LAUNCHERS_PER_NODE": "1"},
            ft=_ft(num_in_job_restarts=3, max_no_progress_cycles=1, num_job_retries_on_failure=2),
            nodes=2,
            ntasks_per_node=1,
        ),
        # Issue 32, two endings of a 2-node job in one launch (each asserted on its own run). Run 0: the step Slurm
        # refuses to create (NO_STEP_ON_FIRST_RUN), no "srun: error: <node>: task" line; the guard requeues without
        # excluding a node, and says so once (no launcher starts: seconds). Run 1: the second node is slow (every
        # rank started on it 3x slower, NRP_FAULT=slow_node); NVRx's detector reports once its 16 estimation
        # iterations are done and then every iteration (an interval below one step), so Megatron Bridge's straggler
        # stop saves and exits 0 at step 17 of 20, on iteration counts, not time; the guard requeues excluding the
        # node reported. Run 2, on other nodes at full speed, resumes there and finishes.
        "straggler-stop": dict(
            env={"NRP_FAULT": "slow_node", "NRP_FAULT_STEP": "0", "NVRX_ENABLE_MULTI_LAUNCHERS_PER_NODE": "1"},
            ft=_ft(num_in_job_restarts=0, num_job_retries_on_failure=2, calc_ft_timeouts=False),
            straggler=dict(stop_if_detected=True, report_time_interval=0.05, gpu_relative_perf_threshold=0.7),
            setup_lines=NO_STEP_ON_FIRST_RUN,
            nodes=2,
            ntasks_per_node=1,
        ),
        # Issue 34. Two training nodes and two hot spares (4 nodes); a training node that does not host the
        # rendezvous store is lost after the step-5 checkpoint (killed from outside): a spare takes its place in
        # the same job, no requeue. Then that spare's node freezes after the step-15 save: the store host's step
        # section times out (10 s: the two-node job's 6 s and a margin for the resumed first step), the other
        # spare takes its place, and once training finished the spare block stops the step the frozen task held
        # (5 s after the launchers' exit lines: NRP_SPARE_FINISH_GRACE).
        "spare": _two_nodes(
            {"NRP_STEP_TIME": "0.3", "NRP_SPARE_FINISH_GRACE": "5", **spoof},
            num_in_job_restarts=2,
            num_job_retries_on_failure=1,
            spare_nodes=2,
            section_timeouts={"setup": 300, "step": 10, "checkpointing": 120},
        ),
        # Issue 34, spares running out: two training nodes and one spare (3 nodes). A training node without the
        # store is lost after the step-5 save (the spare takes its place), then the spare's node after the step-15
        # save: the store host's launcher waits for a second node until NRP_SPARE_JOIN_TIMEOUT (30 s, NVRx's
        # join_timeout; 600 s by default), exits, and the requeue path takes over: the first lost node excluded
        # (the 4-node cluster still has 3 for the job), the second run resumes from step 15 and finishes.
        "spare-exhausted": _two_nodes(
            {"NRP_STEP_TIME": "0.3", "NRP_SPARE_JOIN_TIMEOUT": "30"},
            num_in_job_restarts=2,
            num_job_retries_on_failure=1,
            spare_nodes=1,
            exclude_failed_nodes=True,
            section_timeouts={"setup": 300, "step": 10, "checkpointing": 120},
        ),
        # Issue 36: rank 1 (the second node's one rank) hangs at step 13 outside the step's all-reduce, where rank 0
        # waits. Both step sections time out (6 s); with diagnostics on, NVRx stops each with SIGABRT and Python's
        # faulthandler writes its stack under a prefix with the global rank (the guard sets torch elastic's
        # template). The guard excludes the node of the rank that was not in the collective, whichever launcher
        # srun saw end first; the second run resumes from step 10. Each node's rank monitor checks every 0.25 s on its
        # own clock, so both ranks are stopped (and dump) well before the first launcher ends (seconds after its
        # ranks were stopped) and srun stops the other node.
        "collective-hang": _two_nodes(
            {"NRP_FAULT": "hang"},
            num_in_job_restarts=0,
            num_job_retries_on_failure=1,
            diagnostics=True,
            workload_check_interval=0.25,
            section_timeouts={"setup": 300, "step": 6, "checkpointing": 120},
        ),
        # One rank per node on 2 of the cluster's nodes; the node of rank 1 is lost (killed from outside), then
        # the node rank 1 was moved to hangs as a whole. No in-job restart: each failure is a requeue.
        "two-nodes": _two_nodes(
            {"NRP_STEP_TIME": "0.3"},
            num_in_job_restarts=0,
            num_job_retries_on_failure=4,
            section_timeouts={"setup": 300, "step": 6, "checkpointing": 120},
            silent_node_timeout=20,
        ),
    }

    # The faults injected from outside, each started as soon as its own job is submitted: a job can start (and train
    # past its trigger) while the other submissions, seconds of CPU each, are still being made (seen in a loaded run:
    # the spare job finished before a killer started after all submissions had found it).
    killed: dict = {}
    frozen: dict = {}
    spare_killed: dict = {}
    spare_frozen: dict = {}
    exhausted_first: dict = {}
    exhausted_second: dict = {}
    faults = {
        "two-nodes": (_lose_then_freeze_a_node, (killed, frozen)),
        "spare": (_lose_a_training_node_then_freeze_its_spare, (spare_killed, spare_frozen)),
        "spare-exhausted": (
            _lose_a_training_node_then_freeze_its_spare,
            (exhausted_first, exhausted_second, signal.SIGKILL),
        ),
    }
    injectors: list[threading.Thread] = []

    def submit_one(name: str, spec: dict):
        tmp = tmp_path_factory.mktemp(name)
        save = tmp / "ckpt"
        env = {"NRP_STEP_TIME": "0.15", "NRP_FAULT_STEP": str(FAULT_STEP), "NRP_FAULT_RANK": "1", **spec["env"]}
        job = submit(
            local_slurm,
            tmp,
            name=f"nrp-ft-{name}",
            args=[f"checkpoint.save={save}"],
            time_limit="00:10:00",
            env=env,
            ft=spec["ft"],
            nodes=spec.get("nodes", 1),
            ntasks_per_node=spec.get("ntasks_per_node", 2),
            straggler=spec.get("straggler"),
            setup_lines=spec.get("setup_lines"),
        )
        if name in faults:
            inject, records = faults[name]
            injectors.append(threading.Thread(target=inject, args=(job, *records), daemon=True))
            injectors[-1].start()
        return job, save

    # Submitted two at a time (each submission is a fresh interpreter importing NeMo-Run: seconds of CPU), and each
    # job followed from its own submission on, not after the last one: a job that ended while others were still being
    # submitted was followed only once its live record was gone (a loaded run: the requeue job's final state came from
    # the jobcomp line), and a requeued job's BeginTime hold is lifted only while its wait runs (else 120 s idle).
    submitting = threading.Semaphore(2)

    def submit_and_wait(name: str, spec: dict):
        with submitting:
            job, save = submit_one(name, spec)
        return job, save, local_slurm.wait(job.job_id, timeout=600)

    with ThreadPoolExecutor(len(specs)) as pool:
        futures = {name: pool.submit(submit_and_wait, name, spec) for name, spec in specs.items()}
        results = {name: future.result() for name, future in futures.items()}
    for injector in injectors:
        injector.join(timeout=5)
    for pid in frozen.get("pids", []) + spare_frozen.get("pids", []):  # ended with the step; never left stopped
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    results["two-nodes-killed"], results["two-nodes-frozen"] = killed, frozen
    results["spare-killed"], results["spare-frozen"] = spare_killed, spare_frozen
    results["exhausted-first"], results["exhausted-second"] = exhausted_first, exhausted_second
    print(
        f"\nFT Slurm jobs: {time.monotonic() - t0:.0f} s for all {len(results)}; node killed: {killed}; "
        f"node frozen: {frozen}"
    )
    return results


def test_fault_free_job_runs_under_ft_launcher_and_is_not_requeued_after_success(jobs):
    job, save, res = jobs["fault-free"]
    logs = job.logs()
    assert (res.state, res.exit_code) == ("COMPLETED", 0), (res.record, logs[-6000:])
    script = job.sbatch_script()
    assert "ft_launcher" in script and "JOB_RESULTS_FILE" in script, "not NeMo-Run's FT template branch"
    assert "Agent exits with exit code = 0" in logs or "exit code = 0" in logs, logs[-4000:]
    # The trap: the template would requeue this successful job; the guard wrote the flag instead.
    assert res.restarts == 0, res.record
    assert "finished, not requeued" in logs, logs[-4000:]
    assert any(job.task_dir().glob("*_finished_flag"))
    results = next(job.task_dir().glob("*_job_results")).read_text().split()
    assert results == [job.job_id, "0", "S"], results
    assert finished_hash(logs)[0] == STEPS
    report = _report(job)
    assert (report.requeues, report.restarts, report.finished) == (0, 0, True), report.rows
    (row,) = report.rows
    assert (row.injected, row.detected_by, row.checkpoints) == ([], None, [5, 10, 15, 20]), row


def test_killed_rank_is_restarted_inside_the_job(jobs):
    """Read on the progress-each-cycle job (killed at steps 8, 13 and 18, each time restarted by ft_launcher in the
    same allocation): a job of its own for one in-job restart cost a whole Slurm job of the batch and proved
    nothing this one does not."""
    baseline = finished_hash(jobs["fault-free"][0].logs())
    job, save, res = jobs["progress-each-cycle"]
    logs = job.logs()
    assert (res.state, res.exit_code, res.restarts) == ("COMPLETED", 0, 0), (res.record, logs[-6000:])
    assert f"FAULT_INJECTED kind=kill step={FAULT_STEP} rank=1" in logs
    assert "will restart worker group" in logs, logs[-6000:]
    assert "RESUMED from step 10 (iter_0000010.pt)" in logs
    assert finished_hash(logs) == baseline


def test_failed_job_is_requeued_resumes_and_matches_the_fault_free_run(jobs):
    baseline = finished_hash(jobs["fault-free"][0].logs())
    job, save, res = jobs["requeue"]
    logs = job.logs()
    assert (res.state, res.exit_code) == ("COMPLETED", 0), (res.record, logs[-6000:])
    # num_job_retries_on_failure=1 is one requeue after the failure (NeMo-Run's template alone gives none),
    # and none after the success.
    assert res.restarts == 1, res.record
    attempts = job.attempt_logs()
    assert f"FAULT_INJECTED kind=kill step={FAULT_STEP} rank=1" in attempts[0]
    assert "FINISHED" not in attempts[0]
    assert "RESUMED from step 10 (iter_0000010.pt)" in attempts[1], attempts[1][-6000:]
    assert finished_hash(attempts[1]) == baseline
    results = next(job.task_dir().glob("*_job_results")).read_text().split("\n")
    assert [ln.split()[-1] for ln in results if ln.strip()] == ["F", "S"], results
    assert "finished, not requeued" in logs
    gap = launcher_times(attempts[1])[0] - launcher_times(attempts[0])[-1]
    print(f"\nrequeue job {job.job_id}: failed run's launcher exit -> requeued run's launcher up: {gap:.1f} s")


def _ft_template_script(tmp_path, guard: bool) -> str:
    """NeMo-Run's real FT sbatch script for a FaultTolerancePlugin job whose training step is ``true``
    (succeeds at once), with or without the plugins' requeue guard."""
    import re

    import nemo_run as run

    from nemo_resiliency_plugins import FaultTolerancePlugin
    from tests.helpers import add_job
    from tests.unit.test_preemption_plugin import sbatch_script

    executor = run.SlurmExecutor(
        account="local",
        partition="debug",
        nodes=1,
        ntasks_per_node=2,
        time="00:05:00",
        tunnel=run.LocalTunnel(job_dir=str(tmp_path / "jobs")),
        packager=run.Packager(),
    )
    task = run.Script(path="nemo_resiliency_plugins.testing.workload", m=True, entrypoint="python")
    job = add_job(task, executor, [FaultTolerancePlugin(num_job_retries_on_failure=2)], name=f"trap-{guard}")
    text = re.sub(r"srun --output .*? ft_launcher .*", "srun true", sbatch_script(job))
    assert "srun true" in text and "is_training_finished" in text
    if not guard:
        guard_block = r"# nemo-resiliency-plugins: requeue guard.*?\n  \$NRP_SCONTROL \"\$@\"\n}\n"
        text = re.sub(guard_block, "", text, flags=re.S)
        assert "scontrol() {" not in text
    results = re.search(r'JOB_RESULTS_FILE="([^"]+)"', text).group(1)
    Path(results).parent.mkdir(parents=True, exist_ok=True)
    Path(re.search(r"#SBATCH --output=(\S+)", text).group(1)).parent.mkdir(parents=True, exist_ok=True)
    return text


@pytest.mark.parametrize("guard", [False, True], ids=["nemo-run-template-alone", "with-guard"])
def test_successful_ft_job_requeue_trap(local_slurm, tmp_path, guard):
    """The trap, on the real template: without the guard a job whose every run succeeds is requeued again
    and again (stopped here after 2 requeues); with it, it ends COMPLETED after its first run."""
    job_id, _ = local_slurm.sbatch(_ft_template_script(tmp_path, guard), args=["--requeue"])
    deadline = time.monotonic() + 120
    hold_seen: dict[int, float] = {}
    while True:
        rec, _ = local_slurm.job_record(job_id)
        restarts = int(rec.get("Restarts", "0") or 0)
        if rec.get("Reason") == "BeginTime":
            # Skip Slurm's 120 s hold of a requeued job, not at once (see LocalSlurm.wait: credential revoked).
            first = hold_seen.setdefault(restarts, time.monotonic())
            if time.monotonic() - first >= REQUEUE_RELEASE_DELAY:
                subprocess.run(["scontrol", "update", f"jobid={job_id}", "StartTime=now"], capture_output=True)
        if rec.get("JobState") in TERMINAL_STATES or restarts >= 2:
            break
        assert time.monotonic() < deadline, rec
        time.sleep(0.5)
    if guard:
        assert (rec["JobState"], restarts) == ("COMPLETED", 0), rec
    else:
        subprocess.run(["scancel", job_id], capture_output=True)
        assert restarts >= 2, rec  # succeeded, requeued, succeeded, requeued...


def test_job_out_of_retries_ends_failed_not_completed(jobs):
    """NeMo-Run's template alone ends such a job COMPLETED with exit code 0; the guard keeps the failure."""
    job, save, res = jobs["no-retry-left"]
    logs = job.logs()
    assert res.state == "FAILED" and res.exit_code not in (0, None), (res.record, logs[-4000:])
    assert res.restarts == 0, res.record
    assert f"FAULT_INJECTED kind=kill step={FAULT_STEP} rank=1" in logs
    assert "FINISHED step=" not in logs
    results = next(job.task_dir().glob("*_job_results")).read_text().split()
    assert results == [job.job_id, "0", "F"], results
    report = _report(job)
    assert (report.requeues, report.restarts, report.finished) == (0, 0, False), report.rows
    (row,) = report.rows
    assert row.injected == [f"kill at step {FAULT_STEP} on rank 1"], row
    assert_ended_by_kill(row, rank=1)
    assert row.checkpoints == [5, 10], row


# ------------------------------------------------------------------ issue 18: crash loops, progress, lost nodes


def test_crash_loop_stops_with_no_restart_code_and_is_not_requeued(jobs):
    job, save, res = jobs["crash-loop"]
    logs = job.logs()
    # NVRx's progress tracker read Megatron Bridge's iteration file (10 after the first cycle, never more).
    assert (save / "latest_checkpointed_iteration.txt").read_text() == "10"
    assert "made NO progress" in logs and "Consecutive cycles without progress: 1/1" in logs, logs[-6000:]
    assert logs.count(f"FAULT_INJECTED kind=kill step={FAULT_STEP} rank=1") == 2  # cycles 0 and 1 of 4 allowed
    # ft_launcher exited with NVRx's no-restart code; the guard did not requeue; Slurm says FAILED with it.
    assert "no-restart code 93" in logs and "not requeued, no node excluded, the job ends FAILED" in logs, logs[-4000:]
    assert (res.state, res.exit_code, res.restarts) == ("FAILED", 93, 0), res.record
    assert "] FINISHED step=" not in logs


def test_nemo_run_reports_the_crash_loop_failed_and_the_finished_jobs_succeeded(jobs):
    """What a user of NeMo-Run sees: the detached experiment reloaded by id reports the crash loop FAILED (its
    scheduler reads sacct, i.e. the cluster's accounting), the fault-free job and the requeued-then-finished job
    SUCCEEDED. The same jobs as above: no new Slurm job."""
    expected = {"crash-loop": "FAILED", "fault-free": "SUCCEEDED", "requeue": "SUCCEEDED"}
    with ThreadPoolExecutor(2) as pool:  # each is a fresh interpreter importing NeMo-Run (seconds of CPU)
        states = {name: pool.submit(nemo_run_state, jobs[name][0]) for name in expected}
    for name, want in expected.items():
        job = jobs[name][0]
        state, out = states[name].result()
        sacct = subprocess.run(["sacct", "--parsable2", "-j", job.job_id], capture_output=True, text=True)
        assert state == want, (name, job.job_id, out[-3000:], sacct.stdout, sacct.stderr)


def test_progress_in_every_cycle_keeps_the_job_restarting_until_it_finishes(jobs):
    baseline = finished_hash(jobs["fault-free"][0].logs())
    job, save, res = jobs["progress-each-cycle"]
    logs = job.logs()
    assert (res.state, res.exit_code, res.restarts) == ("COMPLETED", 0, 0), (res.record, logs[-6000:])
    # Killed at 8, 13, 18 (8 steps after resuming from 0, 5, 10); each cycle left a newer checkpoint.
    for step in (8, 13, 18):
        assert f"FAULT_INJECTED kind=kill step={step} rank=1" in logs, logs[-6000:]
    assert len(ll.NVRX_PROGRESS.findall(logs)) >= 3, logs[-6000:]
    assert "made NO progress" not in logs
    assert finished_hash(logs) == baseline


def test_two_node_job_leaves_a_lost_node_and_a_hung_node_behind(jobs):
    """A lost node is named by srun and excluded. A node that hangs as a whole is named by the launchers' log: the
    healthy node's section timeout fires and the hung node's launcher says nothing more, whichever node srun names
    first (the healthy launcher exits first) and even when the healthy launcher blocks on the hung node's store."""
    baseline = finished_hash(jobs["fault-free"][0].logs())
    job, save, res = jobs["two-nodes"]
    killed, frozen = jobs["two-nodes-killed"], jobs["two-nodes-frozen"]
    logs = job.logs()
    attempts = job.attempt_logs()
    assert killed.get("pids") and len(killed["node"]) == 1, killed
    assert frozen.get("pids") and len(frozen["node"]) == 1, (frozen, logs[-8000:])
    lost, hung = killed["node"][0], frozen["node"][0]
    assert (res.state, res.exit_code) == ("COMPLETED", 0), (res.record, logs[-8000:])
    assert res.restarts >= 2, res.record
    # Run 0: every process on the node of rank 1 killed; srun names that node and the requeued job excludes it.
    assert f"node {lost} failed first (srun: error: {lost}: task 1: Killed): the requeued job excludes" in logs, logs[
        -8000:
    ]
    # Run 1 resumed on other nodes; the node of rank 1 stopped; the healthy node's step section timed out.
    assert re.search(ll.exact(ll.WORKLOAD_RESUMED, 5).pattern + r" \(iter_", attempts[1]), attempts[1][-6000:]
    assert ll.exact(ll.NVRX_SECTION, "step").search(attempts[1]), attempts[1][-6000:]
    # The guard's own line (the batch log also holds bash's trace of the echo, with quotes: not matched here).
    silent = re.findall(
        r"^nemo-resiliency-plugins: node (\S+) went silent: no launcher line after a section timeout on another "
        r"node: the requeued job excludes (\S+)\n",
        logs,
        re.M,
    )
    assert [name for name, _ in silent] == [hung], (silent, frozen, logs[-8000:])
    # It hosted the store: the healthy launcher blocked, and the watchdog stopped the step.
    assert re.search(
        r"^nemo-resiliency-plugins: no launcher line from task\(s\) \d for 20 s after a section timeout "
        r"on another node: stopping step \d+\.\d+$",
        logs,
        re.M,
    ), logs[-8000:]
    # The last run resumed from the newest checkpoint and matched the fault-free run, bit for bit.
    last = attempts[max(attempts)]
    assert "RESUMED from step 10 (iter_0000010.pt)" in last, last[-8000:]
    assert finished_hash(last) == baseline
    # ExcNodeList is in the live record only (scontrol; the jobcomp line has no such field): the job was followed from
    # its submission on and its record lives MinJobAge = 600 s after its end, so the final record is the live one.
    rec = res.record
    assert res.source == "scontrol" and "ExcNodeList" in rec, (res.source, rec)
    excluded = subprocess.run(
        ["scontrol", "show", "hostnames", rec["ExcNodeList"]], capture_output=True, text=True
    ).stdout.split()
    assert {lost, hung} <= set(excluded), rec
    ran_on = subprocess.run(
        ["scontrol", "show", "hostnames", rec.get("NodeList", "")], capture_output=True, text=True
    ).stdout.split()
    assert not set(ran_on) & set(excluded), rec


# ----------------------------------------------------------------- issue 32: multi-node ends as the proofs promise


def test_two_node_crash_loop_ends_failed_with_the_no_restart_reason_not_requeued(jobs):
    job, save, res = jobs["two-node-crash-loop"]
    logs = job.logs()
    assert "Consecutive cycles without progress: 1/1" in logs, logs[-6000:]
    assert "NVRx decided the job must not be restarted (no_progress)" in logs, logs[-6000:]
    assert logs.count(f"FAULT_INJECTED kind=kill step={FAULT_STEP} rank=1") == 2  # cycles 0 and 1
    # The guard's verdict line. srun's code is 143 when one launcher exited 93 first and srun stopped the other (the
    # usual order), 93 when both exited 93 before srun stopped either: a race, so either is accepted here.
    verdict = re.findall(
        r"^nemo-resiliency-plugins: NVRx decided the job must not be restarted \((\w+); step exit code (\d+):.*"
        r"not requeued, no node excluded, the job ends FAILED with no-restart code 93$",
        logs,
        re.M,
    )
    assert [reason for reason, _ in verdict] == ["no_progress"], (verdict, logs[-6000:])
    print(f"\n2-node crash loop {job.job_id}: srun's exit code {verdict[0][1]}")
    assert (res.state, res.exit_code, res.restarts) == ("FAILED", 93, 0), res.record
    # No exclusion line of the guard's own (the batch log also holds bash's trace of the guard's source).
    assert not re.search(r"^nemo-resiliency-plugins: .*the requeued job excludes", logs, re.M), logs[-6000:]
    assert "] FINISHED step=" not in logs
    # ExcNodeList: the live record's field (module fixture: each job followed from its submission on, the record kept
    # 600 s), so its absence here means no exclusion, not a source without the field.
    assert res.source == "scontrol" and res.record.get("ExcNodeList") in (None, "(null)", ""), (res.source, res.record)


def test_a_step_that_fails_without_a_node_line_is_requeued_without_excluding_a_node(jobs):
    """Issue 32: a failed multi-node step whose output names no node (Slurm could not create it) is requeued with no
    node excluded, and the guard says why; NeMo-Run's template turns `set -e` on after the step, and the guard's
    search for a node line that finds none must not end the batch script before the requeue."""
    job, _, res = jobs["straggler-stop"]
    attempts, logs = job.attempt_logs(), job.logs()
    assert any(ll.SRUN_STEP_REFUSED.match(ln) for ln in logs.splitlines()), logs[-6000:]
    assert not any(ll.SRUN_ERROR.fullmatch(ln) for ln in logs.splitlines()), logs[-6000:]
    assert "FINISHED" not in attempts.get(0, "") and "iteration" not in attempts.get(0, ""), attempts.get(0)
    guard = [ln for ln in logs.splitlines() if ln.startswith("nemo-resiliency-plugins: ")]
    no_line = [i for i, ln in enumerate(guard) if "no 'srun: error: <node>: task' line: cannot tell" in ln]
    assert len(no_line) == 1, guard
    # Its requeue excludes nothing: the next guard line is the next run's (the straggler stop's).
    following = guard[no_line[0] + 1 :]
    assert following and "straggler" in following[0], guard
    assert not any("excludes" in ln for ln in guard[: no_line[0] + 1]), guard
    assert res.restarts >= 1 and 1 in attempts, (res.record, logs[-6000:])


def test_straggler_stop_requeues_the_job_without_the_slow_node(jobs):
    """Issue 32: Megatron Bridge's straggler stop exits 0 like a finished run; the guard tells them apart by its
    log lines and requeues the job away from the node the report names; the next run finishes with the fault-free
    parameters."""
    baseline = finished_hash(jobs["fault-free"][0].logs())
    job, save, res = jobs["straggler-stop"]
    attempts, logs = job.attempt_logs(), job.logs()
    slow = (save / "nrp_slow_node").read_text().strip()
    assert (res.state, res.exit_code) == ("COMPLETED", 0), (res.record, logs[-8000:])
    assert res.restarts == 2, res.record
    # Run 1: the slow node's rank is reported, Megatron Bridge's loop stops (exit 0), the guard requeues without it.
    assert f"SLOW_NODE {slow} rank=1" in attempts[1], attempts[1][-6000:]
    assert "StragglerId(rank=1," in attempts[1] and "Exiting program due to straggler detection." in attempts[1]
    excluded = re.findall(
        r"^nemo-resiliency-plugins: node (\S+) was reported as a straggler \(training stopped\): the requeued job "
        r"excludes (\S+)$",
        logs,
        re.M,
    )
    assert [node for node, _ in excluded] == [slow], (excluded, slow, logs[-8000:])
    assert "finished, not requeued" in logs
    # Run 2 ran elsewhere at full speed, resumed from the straggler stop's checkpoint, and matches the fault-free run.
    last = attempts[2]
    assert "SLOW_NODE" not in last and "Exiting program due to straggler" not in last, last[-6000:]
    stopped = int(ll.WORKLOAD_EXIT_ON_STRAGGLER.findall(attempts[1])[-1])
    assert stopped < STEPS and f"RESUMED from step {stopped}" in last, last[-6000:]
    assert finished_hash(last) == baseline
    # The report: run 1 ended by the straggler stop, on rank 1, on the slow node (NVRx's rank assignment).
    report = _report(job)
    (stop_row,) = [row for row in report.rows if row.detected_by and "straggler" in row.detected_by]
    assert (stop_row.attempt, stop_row.detected_on_rank, stop_row.node) == (1, 1, slow), report.rows
    # Rank 1 (the slow node's) announces its slowness at its first step, 0: run 1 started from scratch (run 0 never
    # trained). The stop saved at the step it stopped; run 2, on other nodes, injected nothing and resumed there.
    assert stop_row.injected == ["slow_node at step 0 on rank 1"], report.rows
    assert stop_row.checkpoints[-1] == stopped and stop_row.finished_step is None, report.rows
    assert report.rows[-1].injected == [], report.rows
    assert (report.rows[-1].resumed_from, report.rows[-1].finished_step) == (stopped, STEPS), report.rows


# ------------------------------------------------------ issue 36: `nemo-resiliency report` on the jobs above


def _guard_said(logs: str, line: str) -> None:
    """The batch log has the plugins' line ``nemo-resiliency-plugins: <line>`` (a regex), whole: not bash's trace
    of the echo, nor the script's own text."""
    assert re.search(rf"^nemo-resiliency-plugins: {line}$", logs, re.M), logs[-8000:]


def _report(job):
    (one,) = report_experiment(job.exp_dir)
    return one


def test_report_of_the_requeued_and_the_crash_loop_jobs(jobs):
    requeue = _report(jobs["requeue"][0])
    assert (requeue.requeues, requeue.restarts, requeue.finished) == (1, 0, True)
    (killed,), (resumed,) = (a.cycles for a in requeue.attempts)
    assert killed.injected == [f"kill at step {FAULT_STEP} on rank 1"]
    assert_ended_by_kill(killed, rank=1)
    assert killed.checkpoints == [5, 10], killed
    assert (resumed.injected, resumed.resumed_from, resumed.finished_step) == ([], 10, STEPS)
    assert resumed.checkpoints == [15, 20], resumed
    assert requeue.guard[-1].endswith("finished, not requeued"), requeue.guard

    loop = _report(jobs["crash-loop"][0])
    assert (loop.requeues, loop.restarts, loop.finished) == (0, 1, False)
    assert [row.injected for row in loop.rows] == [[f"kill at step {FAULT_STEP} on rank 1"]] * 2
    assert [row.resumed_from for row in loop.rows] == [None, 10]
    assert [row.checkpoints for row in loop.rows] == [[5, 10], []], loop.rows
    for row in loop.rows:
        assert_ended_by_kill(row, rank=1)
    assert "no-restart code 93" in loop.guard[-1] and "not requeued" in loop.guard[-1], loop.guard


def test_report_of_the_two_node_crash_loop(jobs):
    """The same two cycles as on one node, read from two launchers' interleaved lines; the guard's verdict came
    from the log (srun's own code is 143 or, in a race, 93)."""
    loop = _report(jobs["two-node-crash-loop"][0])
    assert (loop.requeues, loop.restarts, loop.finished) == (0, 1, False)
    assert [row.injected for row in loop.rows] == [[f"kill at step {FAULT_STEP} on rank 1"]] * 2
    assert [row.resumed_from for row in loop.rows] == [None, 10]
    assert [row.checkpoints for row in loop.rows] == [[5, 10], []]
    # torch's launcher on the killed rank's node says local rank 0; with its group rank from NVRx's events: rank 1
    for row in loop.rows:
        assert_ended_by_kill(row, rank=1)
    # Rank 1 is the second node's: srun's task 1 (its own line names the node that task ran on)
    task1 = ll.exact(ll.SRUN_ERROR, None, 1).search(jobs["two-node-crash-loop"][0].logs())
    assert task1 is not None and [row.node for row in loop.rows] == [task1.group(1)] * 2, loop.rows
    assert loop.rows[0].restart_s is not None and loop.rows[0].restart_s > 0
    (verdict,) = loop.guard
    assert verdict.startswith("NVRx decided the job must not be restarted (no_progress; step exit code"), verdict
    assert verdict.endswith("not requeued, no node excluded, the job ends FAILED with no-restart code 93"), verdict


def test_report_of_the_progress_each_cycle_job(jobs):
    job = _report(jobs["progress-each-cycle"][0])
    assert (job.requeues, job.restarts, job.finished) == (0, 3, True)
    assert [row.injected for row in job.rows] == [[f"kill at step {s} on rank 1"] for s in (8, 13, 18)] + [[]]
    assert [row.resumed_from for row in job.rows] == [None, 5, 10, 15]
    # Each cycle saved once before its kill, 3 steps after the save: a new checkpoint every cycle.
    assert [row.checkpoints for row in job.rows] == [[5], [10], [15], [20]], job.rows
    for row in job.rows[:3]:
        assert_ended_by_kill(row, rank=1)
    assert job.rows[-1].finished_step == STEPS


def test_report_of_the_two_node_job(jobs):
    """Three attempts: the lost node (srun's line), the hung node (a section timeout on the healthy node), the run
    that finishes; the guard's verdicts name both nodes."""
    job = _report(jobs["two-nodes"][0])
    lost, hung = jobs["two-nodes-killed"]["node"][0], jobs["two-nodes-frozen"]["node"][0]
    assert job.requeues == jobs["two-nodes"][2].restarts and job.requeues >= 2 and job.finished
    # No in-job restart (num_in_job_restarts=0) and no fault of the workload's own: both came from outside.
    assert job.restarts == 0, job.rows
    assert [row.injected for row in job.rows] == [[]] * len(job.rows), job.rows
    assert job.attempts[1].cycles[0].resumed_from == 5
    assert job.attempts[1].cycles[0].detected_by.startswith("section 'step' timeout")
    assert job.attempts[-1].cycles[-1].resumed_from == 10 and job.attempts[-1].cycles[-1].finished_step == STEPS
    assert job.guard[0].startswith(f"node {lost} failed first") and "excludes" in job.guard[0], job.guard
    assert any(line.startswith(f"node {hung} went silent") for line in job.guard), job.guard
    assert job.guard[-1].endswith("finished, not requeued"), job.guard
    # The node of each fault, as the test injected it (tools/report/nodes.py): the SIGKILLed node lost (its launcher
    # task killed outright, srun says), the SIGSTOPped node silent, nothing in the run that finished.
    first, frozen, last = job.attempts[0].cycles[-1], job.attempts[1].cycles[0], job.attempts[-1].cycles[-1]
    assert first.node == lost, job.rows
    assert (first.node_fault or "").startswith(f"lost (srun: error: {lost}: task 1: Killed"), job.rows
    assert frozen.node == hung, job.rows
    assert (frozen.node_fault or "").startswith("went silent"), job.rows
    assert (last.node, last.node_fault) == (None, None), job.rows


# ----------------------------------------------------------------- issue 34: a lost node replaced inside the job


def test_a_spare_node_replaces_a_lost_node_inside_the_job(jobs):
    """FaultTolerancePlugin(spare_nodes=2) on a 2-node job: 4 nodes, ft_launcher --nnodes 2:4. Every process of a
    training node is killed after the step-5 checkpoint; a spare joins the next rendezvous in the same Slurm job
    (no requeue: one run, restart count 0), training resumes from step 5 with the same world size and ends with the
    fault-free parameters; srun's code for the dead task does not make the guard requeue a finished job. (The same
    job's later freeze: the next test.)"""
    baseline = finished_hash(jobs["fault-free"][0].logs())
    job, save, res = jobs["spare"]
    killed = jobs["spare-killed"]
    logs = job.logs()
    assert killed.get("pids") and len(killed["node"]) == 1, (killed, logs[-8000:])
    assert "Cycle: 1 Event: failure_detected" in logs, "no training node was lost"
    assert (res.state, res.exit_code, res.restarts) == ("COMPLETED", 0, 0), (res.record, logs[-8000:])
    assert list(job.attempt_logs()) == [0], "requeued"
    script = job.sbatch_script()
    assert "#SBATCH --nodes=4" in script and "--kill-on-bad-exit=0 --wait=0" in script
    node_range = {m.group(1): m.group(2) for ln in logs.splitlines() if (m := ll.TORCH_NODES_RANGE.fullmatch(ln))}
    assert node_range == {"min_nodes": "2", "max_nodes": "4"}, logs[-8000:]
    # A spare's launcher was given an active rank in the second round, in place of the lost node's.
    rounds = ASSIGNED_ACTIVE.findall(logs)
    round0 = {task for task, _, rnd in rounds if rnd == "0"}
    round1 = {task for task, _, rnd in rounds if rnd == "1"}
    assert len(round0) == len(round1) == 2 and round0 != round1 and "0" in round0 & round1, rounds
    # One launcher closed the rounds (the first node's, told is_host=1 by the spare block): no rank given twice.
    for rnd in {r for _, _, r in rounds}:
        given = [rank for _, rank, r in rounds if r == rnd]
        assert sorted(given) == ["0", "1"], rounds
    assert len(ll.NVRX_STORE_HOST_WAITING.findall(logs)) == 1, logs[-8000:]
    assert f"srun: error: {killed['node'][0]}: task" in logs, logs[-8000:]
    assert "finished, not requeued" in logs, logs[-8000:]
    report = _report(job)
    assert (report.requeues, report.finished) == (0, True), report.rows
    # From the newest checkpoint saved before the loss: the kill follows the step-5 save within a 0.1 s poll, and
    # the next save is 5 steps of 0.3 s later, but on a loaded host that one may come first; either is right.
    newest = max(report.rows[0].checkpoints)
    assert newest in (5, 10) and report.rows[1].resumed_from == newest, report.rows
    assert report.rows[0].node == killed["node"][0], report.rows  # the lost node, in the cycle it ended
    assert (report.rows[0].node_fault or "").startswith(f"lost (srun: error: {killed['node'][0]}: task"), report.rows
    assert ll.exact(ll.WORKLOAD_RESUMED, newest).findall(logs), logs[-8000:]
    assert finished_hash(logs) == baseline


def test_a_spare_node_replaces_a_frozen_node_and_the_step_ends_when_training_does(jobs):
    """The same job: the node the first spare was on freezes (every process SIGSTOPped) after the resumed ranks'
    step-15 save. The store host's step section times out, the second spare joins the third rendezvous round,
    training resumes from step 15 and ends with the fault-free parameters; the frozen task never ends, so srun
    (--wait=0) would hold the job until its time limit: the spare block stops the step once the active launchers
    exited 0, and the job ends COMPLETED, never requeued."""
    baseline = finished_hash(jobs["fault-free"][0].logs())
    job, save, res = jobs["spare"]
    killed, frozen = jobs["spare-killed"], jobs["spare-frozen"]
    logs = job.logs()
    assert frozen.get("pids") and len(frozen["node"]) == 1 and frozen["node"] != killed["node"], (frozen, killed)
    assert (res.state, res.exit_code, res.restarts) == ("COMPLETED", 0, 0), (res.record, logs[-8000:])
    assert "Cycle: 2 Event: failure_detected" in logs, logs[-8000:]
    assert ll.exact(ll.NVRX_SECTION, "step").search(logs), logs[-8000:]
    # Round 2: the store host and the second spare; every one of the 4 launchers trained in some round.
    rounds = ASSIGNED_ACTIVE.findall(logs)
    round1 = {task for task, _, rnd in rounds if rnd == "1"}
    round2 = {task for task, _, rnd in rounds if rnd == "2"}
    assert len(round2) == 2 and round1 != round2 and "0" in round2, rounds
    assert len({task for task, _, _ in rounds}) == 4, rounds
    assert sorted(rank for _, rank, rnd in rounds if rnd == "2") == ["0", "1"], rounds
    # The block's watcher stopped the step the frozen task held, after training finished.
    _guard_said(
        logs,
        r"training finished on the active nodes, but the step still ran 5 s later \(a task on a frozen node\): "
        r"stopping step \d+\.\d+",
    )
    report = _report(job)
    assert (report.requeues, report.restarts, report.finished) == (0, 2, True), report.rows
    assert report.rows[-1].resumed_from == 15 and report.rows[-1].finished_step == STEPS, report.rows
    # The frozen node on the cycle it ended (srun's "Killed" line for its task came after the spare block's stop).
    assert report.rows[1].node == frozen["node"][0], report.rows
    assert (report.rows[1].node_fault or "").startswith("froze ("), report.rows
    assert ll.exact(ll.WORKLOAD_RESUMED, 15).search(logs), logs[-8000:]
    assert finished_hash(logs) == baseline


def test_when_spares_run_out_the_requeue_path_takes_over(jobs):
    """FaultTolerancePlugin(spare_nodes=1) on a 2-node job (3 nodes): a training node is lost after the step-5
    save and the spare takes its place in the job; then the spare's node is lost after the step-15 save. No spare
    is left: the store host's launcher waits NRP_SPARE_JOIN_TIMEOUT (NVRx's join_timeout) for a second node, exits,
    and the guard requeues the job with the first lost node excluded; the second run resumes from step 15 and ends
    with the fault-free parameters."""
    baseline = finished_hash(jobs["fault-free"][0].logs())
    job, save, res = jobs["spare-exhausted"]
    first, second = jobs["exhausted-first"], jobs["exhausted-second"]
    logs = job.logs()
    assert first.get("pids") and second.get("pids") and first["node"] != second["node"], (first, second)
    assert (res.state, res.exit_code, res.restarts) == ("COMPLETED", 0, 1), (res.record, logs[-8000:])
    assert sorted(job.attempt_logs()) == [0, 1], "not requeued once"
    run0 = job.attempt_logs()[0]
    assert "#SBATCH --nodes=3" in job.sbatch_script()
    # The spare took the first lost node's place inside the job (round 1), then no node was left to take the second's.
    rounds = ASSIGNED_ACTIVE.findall(run0)
    assert {rnd for _, _, rnd in rounds} == {"0", "1"}, rounds
    assert ll.exact(ll.NVRX_RDZV_TIMEOUT, None, 30.0).search(run0), run0[-8000:]
    assert any(
        ll.exact(ll.NVRX_AGENT_EXIT, 1).search(ln)
        for ln in run0.splitlines()
        if "infra:0(" in ln and "Agent's exit" in ln
    ), run0[-8000:]
    # The guard (the batch script's output, one file for both runs): the first node srun named is excluded, and the
    # job requeued (not the spare block's finished verdict).
    lost = first["node"][0]
    assert f"node {lost} failed first (srun: error: {lost}: task" in logs, logs[-8000:]
    assert f"the requeued job excludes {lost}" in logs, logs[-8000:]
    assert not re.search(r"^nemo-resiliency-plugins: step exit code \d+, but every launcher", logs, re.M), logs[-8000:]
    report = _report(job)
    assert (report.requeues, report.finished) == (1, True), report.rows
    assert any(line.endswith(f"the requeued job excludes {lost}") for line in report.guard), report.guard
    assert len(report.attempts[1].cycles) == 1, report.rows  # the second run: no fault, no restart
    # Each lost node on the cycle it ended: the first in round 0, the spare's node in round 1.
    assert [row.node for row in report.rows[:2]] == [first["node"][0], second["node"][0]], report.rows
    for row in report.rows[:2]:
        assert (row.node_fault or "").startswith(f"lost (srun: error: {row.node}: task"), report.rows
    assert report.rows[-1].resumed_from == 15 and report.rows[-1].finished_step == STEPS, report.rows
    assert finished_hash(logs) == baseline


# ----------------------------------------- issue 36: the node of a rank hung inside a collective, from its stack


def test_a_rank_hung_outside_the_collective_is_the_node_the_guard_excludes(jobs):
    """FaultTolerancePlugin(diagnostics=True) on a 2-node job, one rank per node: rank 1 hangs at step 13 outside
    the all-reduce rank 0 waits in. Both ranks time out and dump their stacks (each line prefixed with its global
    rank); the guard names the node of rank 1, not whichever launcher srun saw end first, and the report puts the
    fault on that node; the requeued run resumes from step 10 and ends with the fault-free parameters."""
    baseline = finished_hash(jobs["fault-free"][0].logs())
    job, save, res = jobs["collective-hang"]
    logs = job.logs()
    run0 = job.attempt_logs()[0]
    assert (res.state, res.exit_code, res.restarts) == ("COMPLETED", 0, 1), (res.record, logs[-8000:])
    assert f"FAULT_INJECTED kind=hang step={FAULT_STEP}" in run0, run0[-8000:]
    # Both ranks dumped, under the global-rank prefix; rank 0 inside torch.distributed's collective.
    dumped = [(m["local"], m["rank"], m["rest"]) for ln in run0.splitlines() if (m := ll.TORCH_RANK_LINE.fullmatch(ln))]
    for rank in ("0", "1"):
        fatal = [r for local, rk, r in dumped if (local, rk) == ("0", rank) and r.startswith("Fatal Python error: ")]
        assert fatal and fatal[0].startswith("Fatal Python error: Aborted"), run0[-8000:]
    frames = [ll.FAULTHANDLER_FRAME.match(rest) for local, rank, rest in dumped if (local, rank) == ("0", "0")]
    assert any(f and f["path"].endswith("torch/distributed/distributed_c10d.py") for f in frames), run0[-8000:]
    # Rank 1's node: the task NVRx gave group rank 1 in the first run (task i runs on the i-th node).
    (first_run_nodes,) = [m.group(2) for ln in logs.splitlines() if (m := ll.SBATCH_HOSTNAMES.fullmatch(ln))][:1]
    hosts = subprocess.run(
        ["scontrol", "show", "hostnames", first_run_nodes], capture_output=True, text=True, check=True
    ).stdout.split()
    task_of_rank1 = next(task for task, rank, rnd in ASSIGNED_ACTIVE.findall(run0) if rank == "1" and rnd == "0")
    hung_node = hosts[int(task_of_rank1)]
    _guard_said(
        logs,
        rf"node {hung_node} held rank 1, not in the collective the other ranks waited in \(their stack dumps\): "
        rf"the requeued job excludes {hung_node}",
    )
    report = _report(job)
    assert (report.requeues, report.restarts, report.finished) == (1, 0, True), report.rows
    hang, last = report.rows
    assert hang.injected == [f"hang at step {FAULT_STEP} on rank 1"], report.rows
    assert hang.outside_collective == ["rank 1"] and len(hang.stacks) == 2, hang.stacks
    assert (hang.node, hang.node_fault) == (hung_node, None), report.rows
    assert (last.resumed_from, last.finished_step) == (10, STEPS), report.rows
    assert finished_hash(logs) == baseline


# ------------------------------------------- issue 51 / 47.15: a rank that prints NVRx's verdict lines decides nothing


def _spoofed(logs: str) -> None:
    """Every rank of the job printed NVRx's verdict lines (NRP_SPOOF_LINES=1), each under torch elastic's prefix."""
    for text in SPOOF_LINES:
        assert re.search(rf"^\[default\d+\]:{re.escape(text)}$", logs, re.M), text


def test_a_failed_run_whose_rank_printed_nvrx_s_no_restart_verdict_is_requeued(jobs):
    """The rank printed "NVRx decided the job must not be restarted (attribution_stop) ... exit code = 93" before
    it was killed: the guard reads launcher lines only, so the run that failed (137) is requeued, not ended FAILED."""
    job, _, res = jobs["requeue"]
    logs = job.logs()
    _spoofed(job.attempt_logs()[0])
    said = re.findall(r"^nemo-resiliency-plugins: .*", logs, re.M)
    assert said and not [line for line in said if "must not be restarted" in line], said
    assert (res.state, res.exit_code, res.restarts) == ("COMPLETED", 0, 1), (res.record, logs[-6000:])


def test_the_crash_loop_s_no_restart_reason_is_the_launcher_s_not_the_rank_s(jobs):
    """The rank printed a no-restart line with another reason (attribution_stop) before NVRx's own (no_progress):
    the guard's verdict names NVRx's."""
    job, _, res = jobs["crash-loop"]
    logs = job.logs()
    _spoofed(logs)
    _guard_said(logs, r"NVRx decided the job must not be restarted \(no_progress; step exit code 93: .*")
    assert (res.state, res.exit_code, res.restarts) == ("FAILED", 93, 0), res.record


def test_a_spare_job_whose_ranks_printed_nvrx_s_exit_lines_still_finishes(jobs):
    """Its ranks printed a launcher's "exit code = 93" line and four "Agent exits with exit code = 0." lines: the
    spare block counts the launchers' own exit lines only, so the step that srun ended with the lost node's code
    is still a finished step, not a failure (nor a no-restart verdict)."""
    job, _, res = jobs["spare"]
    logs = job.logs()
    _spoofed(logs)
    _guard_said(logs, r"step exit code \d+, but every launcher that ended says training finished .*")
    assert (res.state, res.exit_code, res.restarts) == ("COMPLETED", 0, 0), (res.record, logs[-8000:])
