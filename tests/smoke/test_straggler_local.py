"""StragglerDetectionPlugin end to end through NeMo-Run's LocalExecutor (torchrun: the detector needs no
ft_launcher): 2 gloo ranks of the reference workload,
rank 1 made 3x slower (NRP_FAULT=slow), Megatron Bridge's own NVRxStragglerDetectionManager and NVRx's
Detector scoring the ranks. The one CPU accommodation (NVRx's CUPTI timing replaced by CPU timing of the step's
compute part) is inside the reference workload; see its module docstring.

Measured values (scores, first report time) are recorded as test properties (``-rP`` or junit XML).
"""

from __future__ import annotations

import re
from pathlib import Path

import nemo_run as run
import pytest

from nemo_resiliency_plugins import StragglerDetectionPlugin
from nemo_resiliency_plugins.job import log_lines as ll
from nemo_resiliency_plugins.testing.local_run import LocalRunResult, run_local, workload_task
from nemo_resiliency_plugins.tools.report import report_job

ITERS = 30
STEP_TIME = "0.1"  # rank 0's compute part per step; rank 1's is 3x as long
INTERVAL = 1.0  # report_time_interval (s): first report after 16 warm-up iterations, then every ~1 s
SLOW = {"NRP_STEP_TIME": STEP_TIME, "NRP_FAULT": "slow", "NRP_FAULT_STEP": "0", "NRP_FAULT_RANK": "1"}
SCORE = ll.NVRX_STRAGGLER_SCORE
WARNING = "STRAGGLER DETECTION WARNING: Some GPUs have worse relative performance. Affected ranks:"


def script_task(save: Path):
    return workload_task([f"checkpoint.save={save}", f"train.train_iters={ITERS}"], env=SLOW)


def score_blocks(result: LocalRunResult, header: str, world: int = 2) -> list[dict[int, float]]:
    """Each ``<header>`` block Megatron Bridge's manager logged, as {rank: score}: the ``world`` score lines after
    the header. Lines of the other rank's stream (or rank 0's stderr) may come between them in the job's combined
    log (seen: a block cut after its first line by one such line), so only another block's header ends one early."""
    blocks, current = [], None
    for line in result.lines:
        if "GPU " in line and " performance:" in line:
            current = {} if header in line else None
            if current is not None:
                blocks.append(current)
            continue
        match = SCORE.search(line)
        if current is not None and match:
            current[int(match.group(1))] = float(match.group(2))
            if len(current) == world:
                current = None
    return [b for b in blocks if b]


def test_a_score_block_is_read_whole_when_another_streams_line_comes_between():
    lines = [
        "[default0]:[rank0] megatron.bridge.NVRxStragglerDetection INFO: GPU relative performance:",
        "[default0]:  Rank=1 Node=vm Score=0.34",
        "[default1]:[rank1] CHECKPOINT saved step=20",
        "[default0]:  Rank=0 Node=vm Score=1.00",
        "[default0]:",
        "[default0]:[rank0] megatron.bridge.NVRxStragglerDetection INFO: GPU individual performance:",
        "[default0]:  Rank=0 Node=vm Score=1.00",
    ]
    result = LocalRunResult(state="SUCCEEDED", wall_s=0.0, job_dir="", log="\n".join(lines), lines=lines)
    assert score_blocks(result, "GPU relative performance:") == [{1: 0.34, 0: 1.0}]
    assert score_blocks(result, "GPU individual performance:") == [{0: 1.0}]


def first_report_s(result: LocalRunResult) -> float:
    lines = result.grep("STRAGGLER_REPORT step=")
    assert lines, "NVRx never reported:\n" + result.log[-4000:]
    return float(re.search(r"elapsed_s=([0-9.]+)", lines[0]).group(1))


@pytest.fixture(scope="module")
def reported(tmp_path_factory):
    save = tmp_path_factory.mktemp("straggler-report")
    plugin = StragglerDetectionPlugin(report_time_interval=INTERVAL, gpu_relative_perf_threshold=0.7)
    return run_local(script_task(save), [plugin], name="straggler-report", launcher="torchrun"), save


def test_report_names_the_slow_rank_at_the_configured_threshold(reported, record_property):
    result, _ = reported
    assert result.state == "SUCCEEDED", result.log[-4000:]
    assert result.grep("FAULT_INJECTED kind=slow step=0 rank=1")
    assert result.grep("NVRx straggler detection enabled"), "Megatron Bridge's manager did not initialise"
    warnings = result.grep(WARNING)
    assert warnings, "no straggler reported:\n" + result.log[-4000:]
    for line in warnings:
        assert "StragglerId(rank=1," in line and "rank=0," not in line, line
    relative = score_blocks(result, "GPU relative performance:")
    individual = score_blocks(result, "GPU individual performance:")
    assert relative and len(relative) == len(warnings), "every report named the slow rank"
    for scores in relative:
        assert scores[1] < 0.7 <= scores[0], scores
    first = relative[0]
    record_property("relative_score_slow_rank1", first[1])
    record_property("relative_score_normal_rank0", first[0])
    record_property("individual_scores_first_report", individual[0])
    record_property("first_report_s", first_report_s(result))
    record_property("reports", len(relative))
    # A 3x slower compute part: relative score about 1/3 (the rest of the step is shared work).
    assert 0.2 < first[1] < 0.5 and first[0] == 1.0
    # Individual scores compare a rank with its own past: a rank slow from the start is not flagged by them.
    assert not result.grep("Some GPUs performance dropped")
    assert result.grep(f"FINISHED step={ITERS}")


@pytest.fixture(scope="module")
def stopped(tmp_path_factory):
    save = tmp_path_factory.mktemp("straggler-stop")
    plugin = StragglerDetectionPlugin(report_time_interval=INTERVAL, stop_if_detected=True)
    return run_local(script_task(save), [plugin], name="straggler-stop", launcher="torchrun"), save


def test_stop_if_detected_saves_a_checkpoint_and_exits_cleanly(stopped, record_property):
    result, tmp_path = stopped
    assert result.state == "SUCCEEDED", "exit 0, as Megatron Bridge does:\n" + result.log[-4000:]
    assert result.grep(WARNING) and "StragglerId(rank=1," in result.grep(WARNING)[0]
    assert result.grep("Detected stragglers. Training should be stopped.")
    assert result.grep("Exiting program due to straggler detection.")
    exits = result.grep("EXIT on straggler step=")
    assert len(exits) == 2, "both ranks stop at the same step"
    step = int(ll.WORKLOAD_EXIT_ON_STRAGGLER.search(exits[0]).group(1))
    assert 16 < step < ITERS
    assert (tmp_path / f"iter_{step:07d}.pt").exists(), "checkpoint at the step it stopped"
    assert (tmp_path / "latest_checkpointed_iteration.txt").read_text().strip() == str(step)
    assert not result.grep("FINISHED step=")
    record_property("stopped_at_step", step)
    record_property("first_report_s", first_report_s(result))


@pytest.fixture(scope="module")
def below_threshold(tmp_path_factory):
    from nemo_resiliency_plugins.testing import workload

    config = workload.reference_config_buildable(str(tmp_path_factory.mktemp("straggler-partial")))
    config.train.train_iters = ITERS
    task = run.Partial(workload.pretrain, config=config)
    plugin = StragglerDetectionPlugin(report_time_interval=INTERVAL, gpu_relative_perf_threshold=0.2)
    return run_local(task, [plugin], name="straggler-partial-threshold", env=SLOW, launcher="torchrun")


def test_partial_task_below_the_slow_ranks_score_reports_no_straggler(below_threshold):
    result = below_threshold
    assert result.state == "SUCCEEDED", result.log[-4000:]
    relative = score_blocks(result, "GPU relative performance:")
    assert relative, "reports were made:\n" + result.log[-4000:]
    assert all(0.2 <= scores[1] < 0.7 for scores in relative), relative
    assert not result.grep("STRAGGLER DETECTION WARNING"), "score above the 0.2 threshold: not a straggler"


# `nemo-resiliency report` (issue 36) on the three jobs: the straggler Megatron Bridge reported, and the stop.
def test_report_of_the_straggler_jobs(reported, stopped, below_threshold):
    slow = ["slow at step 0 on rank 1"]  # NRP_FAULT=slow from step 0: announced once, at rank 1's first step
    job = report_job(reported[0].job_dir)
    (row,) = job.rows
    assert row.injected == slow, row.injected
    # (an "individual" report of the same rank may join it: NVRx compares each rank with its own history too)
    assert row.stragglers[0] == f"rank 1 on node {_node(reported[0])} (relative)", row.stragglers
    assert all(found.startswith("rank 1 on node ") for found in row.stragglers), row.stragglers
    assert (row.detected_by, row.finished_step, row.last_iteration) == (None, ITERS, ITERS)
    # torchrun's own lines (torch's logging, no year: the training_log lines give it) time the attempt.
    assert job.attempts[0].launcher_stamped and 0 < job.goodput() < 1

    result, _ = stopped
    step = int(ll.WORKLOAD_EXIT_ON_STRAGGLER.search(result.grep("EXIT on straggler step=")[0]).group(1))
    job = report_job(result.job_dir)
    (row,) = job.rows
    assert row.injected == slow, row.injected
    assert (row.detected_by, row.detected_on_rank) == ("straggler detection (training stopped)", 1)
    assert row.checkpoints[-1] == step and row.finished_step is None and not job.finished
    assert job.iterations() == (step, 0)

    (row,) = report_job(below_threshold.job_dir).rows
    assert row.injected == slow, row.injected
    assert row.stragglers == [] and row.detected_by is None and row.finished_step == ITERS


def _node(result: LocalRunResult) -> str:
    return ll.exact(ll.MB_STRAGGLER_ID, 1).search(result.grep(WARNING)[0]).group(1)
