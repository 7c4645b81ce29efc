"""A killed rank recovered without a job restart: InProcessRestartPlugin with a warm reserve, through NeMo-Run's
LocalExecutor on CPU (3 ranks: 2 active + 1 reserve), and what happens when the reserve is used up.

Nothing is mocked: torch + gloo ranks, NVRx's ``inprocess.Wrapper`` built by Megatron Bridge's own
``maybe_wrap_for_inprocess_restart`` (its ``Tree`` rank assignment with ``min_ranks = max_ranks =
active_world_size``, monitor processes, store), NVRx's ft_launcher, and the plugin's rank keeper between the
launcher and each rank. The reserve waits inside NVRx's ``reserve_fn``; the workload computes with the two active
ranks only (NVRx sets ``RANK``/``WORLD_SIZE`` to the active rank and active world size).

One launch, two faults (``NRP_FAULT=kill@13,kill@17``, rank 1 both times), each behaviour asserted on its own:

* step 13: rank 1 is SIGKILLed; the reserve takes its place in the same job (NVRx: "Hot spare activated"), rank 0
  keeps its PID, no process is started and the launcher does not restart anything; both active ranks resume
  from the step-10 checkpoint and the recovered pair writes a step-15 checkpoint equal to a fault-free run's;
* step 17: the former reserve, now rank 1, is SIGKILLed; no reserve is left, so NVRx terminates rank 0
  (``RankDiscarded``), ft_launcher restarts the worker group once (with a fresh reserve), the ranks resume from
  step 15 and finish with parameters equal to a fault-free 2-rank run's.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from nemo_resiliency_plugins import FaultTolerancePlugin
from nemo_resiliency_plugins.inprocess_restart import InProcessRestartPlugin
from nemo_resiliency_plugins.job import log_lines as ll
from nemo_resiliency_plugins.testing.inprocess_loop import SHORT_TIMEOUTS
from nemo_resiliency_plugins.testing.local_run import run_local, workload_task
from nemo_resiliency_plugins.tools.report import PEER_NOTE, report_job
from tests.helpers import after_store_collisions, assert_same_params, before_fault, fault_line, final_params

pytestmark = pytest.mark.slow

FIRST_KILL, SECOND_KILL = 13, 17  # resume from step 10, then from step 15
# Divisible by the data-parallel size Megatron Bridge derives from WORLD_SIZE=3 in runtime_config_update (before
# NVRx assigns ranks) and by the active 2 (the toy model's data does not depend on it).
OVERRIDES = ["train.global_batch_size=12"]
ENV = {"NRP_STEP_TIME": "0.15"}
_INPROCESS = ll.WORKLOAD_INPROCESS_TIMED
_START = ll.WORKLOAD_START
_PID = re.compile(r"pid=(\d+)")


def reserve_plugin() -> InProcessRestartPlugin:
    return InProcessRestartPlugin(**SHORT_TIMEOUTS, active_world_size=2)  # one host, a reserve of one rank


def ft_plugin() -> FaultTolerancePlugin:
    # Fixed section timeouts above the in-process barrier_timeout: calculated ones (about a second per step here)
    # would let ft_launcher's rank monitor kill the survivor while NVRx restarts it (the plugin refuses them).
    return FaultTolerancePlugin(
        num_in_job_restarts=2,
        calc_ft_timeouts=False,
        section_timeouts={"setup": 120, "step": 90, "checkpointing": 90},
        # Above barrier_timeout (60 s) too, as the plugin's rule asks: equal to it, a recovery that uses the whole
        # barrier wait on a loaded host would meet the rank monitor's out-of-section kill at the same moment.
        out_of_section_timeout=90,
        workload_check_interval=1,
    )


@pytest.fixture(scope="module")
def baseline(tmp_path_factory):
    """A fault-free 2-rank run (torchrun, no resiliency plugin): the reference parameters and checkpoints."""
    save = tmp_path_factory.mktemp("reserve-baseline")
    task = workload_task([f"checkpoint.save={save}", *OVERRIDES], env=ENV)
    result = run_local(task, [], name="reserve-baseline", ntasks=2, launcher="torchrun")
    assert result.state == "SUCCEEDED", result.log[-4000:]
    return save


@pytest.fixture(scope="module")
def two_kills(tmp_path_factory):
    save = tmp_path_factory.mktemp("reserve-two-kills")
    env = ENV | {"NRP_FAULT": f"kill@{FIRST_KILL},kill@{SECOND_KILL}", "NRP_FAULT_RANK": "1"}
    task = workload_task([f"checkpoint.save={save}", *OVERRIDES], env=env)
    result = run_local(task, [ft_plugin(), reserve_plugin()], name="reserve-two-kills", ntasks=3)
    return result, save


def entries(result) -> dict[int, list[tuple[int, float]]]:
    """pid -> [(NVRx restart iteration, unix time)] for every entry into the training function."""
    seen: dict[int, list[tuple[int, float]]] = {}
    for line in result.lines:
        m = _INPROCESS.search(line)
        if m:
            seen.setdefault(int(m.group(2)), []).append((int(m.group(1)), float(m.group(3))))
    return seen


def marker(save: Path, index: int) -> tuple[int, float]:
    text = (save / ("nrp_fault_injected" + ("" if index == 0 else f".{index}"))).read_text()
    return int(_PID.search(text).group(1)), float(re.search(r"time=([0-9.]+)", text).group(1))


def model_at(save: Path, step: int) -> dict:
    return torch.load(save / f"iter_{step:07d}.pt", weights_only=True)["model"]


def test_a_killed_rank_is_replaced_by_the_reserve_in_the_same_job(baseline, two_kills, record_property):
    result, save = two_kills
    run, collisions = after_store_collisions(result)  # a start-up store collision's restart is not the keeper's
    first = before_fault(run, save, index=1)  # the second kill
    assert first.grep(f"FAULT_INJECTED kind=kill step={FIRST_KILL} rank=1"), result.log[-4000:]
    starts = [_START.search(line).groups() for line in first.grep("] START rank=")]
    launch = str(collisions)
    assert sorted(starts) == [("0", "3", launch), ("1", "3", launch), ("2", "3", launch)], "one process per rank"
    assert not first.grep("will restart worker group"), "the launcher restarted what the reserve handles"

    killed_pid, kill_time = marker(save, 0)
    assert first.grep(f"RANK_DIED pid={killed_pid} signal=SIGKILL"), "the keeper did not report the killed rank"
    assert first.grep(
        "Hot spare activated: terminated rank (initial_rank=1, active_rank=1) replaced by spare rank "
        "(initial_rank=2, new_active_rank=1)"
    )
    by_pid = entries(first)
    assert by_pid[killed_pid] == [(0, by_pid[killed_pid][0][1])], "the killed rank entered once"
    survivors = [pid for pid, seen in by_pid.items() if [it for it, _ in seen] == [0, 1]]
    reserves = [pid for pid, seen in by_pid.items() if [it for it, _ in seen] == [1]]
    assert len(survivors) == 1 and len(reserves) == 1, by_pid  # rank 0 in its own process; the reserve's first entry
    assert len(by_pid) == 3, by_pid
    assert len(first.grep(f"RESUMED from step {FIRST_KILL // 5 * 5}")) == 2, "both active ranks resume from step 10"
    assert first.grep("CHECKPOINT saved step=15"), "the recovered pair trained on to the next checkpoint"
    assert_same_params(model_at(save, 15), model_at(baseline, 15))

    reentry = max(seen[-1][1] for seen in by_pid.values() if seen[-1][0] == 1) - kill_time
    record_property("reserve_kill_to_reentry_s", round(reentry, 2))
    record_property(
        "reserve_kill_to_step15_checkpoint_s", round((save / "iter_0000015.pt").stat().st_mtime - kill_time, 2)
    )
    record_property("two_kills_wall_s", round(result.wall_s, 1))


def test_with_no_reserve_left_the_next_kill_falls_back_to_ft_launchers_restart(baseline, two_kills):
    result, save = two_kills
    assert result.state == "SUCCEEDED", result.log[-4000:]
    run, collisions = after_store_collisions(result)
    second = run.lines[fault_line(run, save, index=1)[0] :]  # from the second kill's marker line on
    second_pid, _ = marker(save, 1)
    assert any(f"FAULT_INJECTED kind=kill step={SECOND_KILL} rank=1" in line for line in second)
    assert any(f"RANK_DIED pid={second_pid} signal=SIGKILL" in line for line in second)
    # The survivor's line comes through its own tail thread, in no set order with rank 1's marker: the whole log
    # (NVRx discards a rank only when no reserve is left, so only after this kill).
    assert result.grep("RankDiscarded"), "NVRx did not give the survivor up"
    assert len(run.grep("will restart worker group")) == 1, "exactly one launcher restart, for the second kill"
    restarted = [line for line in second if "] START rank=" in line and f"restart={collisions + 1}" in line]
    assert len(restarted) == 3, "ft_launcher started the 3 ranks again (2 active + a fresh reserve)"
    assert len([line for line in second if f"RESUMED from step {SECOND_KILL // 5 * 5}" in line]) == 2
    assert result.grep("FINISHED step=20")
    assert_same_params(final_params(save), final_params(baseline))


def test_report_of_the_two_kills_job(two_kills):
    """`nemo-resiliency report` (issue 36): the first kill recovered inside the launcher's cycle (an in-process
    restart back to the step-10 checkpoint: 11-13 trained twice), the second ending the cycle, the restart resuming
    from step 15 (16-17 trained twice)."""
    result, _ = two_kills
    job = report_job(result.job_dir)
    _, collisions = after_store_collisions(result)  # each one a cycle that never trained
    assert (job.requeues, job.restarts, job.finished) == (0, 1 + collisions, True)
    first, last = job.rows[collisions:]
    assert first.injected == [f"kill at step {FIRST_KILL} on rank 1", f"kill at step {SECOND_KILL} on rank 1"]
    assert (first.inprocess_restarts, first.resumed_from, first.resumed_from_first) == (1, 10, None)
    assert first.checkpoints == [5, 10, 15] and first.finished_step is None
    assert (first.last_iteration, first.recomputed_inside) == (SECOND_KILL, FIRST_KILL - 10)
    # The launcher's view of the end: no reserve left, NVRx discarded the surviving rank (exit 1), and its worker
    # is the one ft_launcher names first. The killed process sat under a rank keeper, not the launcher; the survivor
    # had logged the lost connection to it (NVRx's wrapper, fn_ex), so the report says it only lost a peer.
    assert first.exit_after_peer and first.exit_code == 1, first
    assert first.detected_by == f"rank exited with code 1{PEER_NOTE}", first
    assert first.restart_s is not None and first.restart_s > 0
    assert (last.resumed_from, last.injected, last.checkpoints, last.finished_step) == (15, [], [20], 20)
    assert job.iterations() == (20, (FIRST_KILL - 10) + (SECOND_KILL - 15)) and 0 < job.goodput() < 1
