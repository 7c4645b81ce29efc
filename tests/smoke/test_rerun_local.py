"""RerunStateMachinePlugin end to end through NeMo-Run's LocalExecutor: 2 gloo ranks of the reference workload,
Megatron Core's real re-run state machine initialised by Megatron Bridge's ``init_rerun_state``, the loss
validated by Megatron Bridge's ``masked_next_token_loss``, and a NaN put into rank 1's forward pass at one step
(NRP_FAULT=nan: once; nan_persistent: on every run of that step). The CPU accommodations (no CUDA RNG, flag
all-reduce on CPU tensors) are inside the reference workload.
"""

from __future__ import annotations

from pathlib import Path

import nemo_run as run
import pytest
import torch

from nemo_resiliency_plugins import FaultTolerancePlugin, RerunStateMachinePlugin
from nemo_resiliency_plugins.job import log_lines as ll
from nemo_resiliency_plugins.testing.local_run import run_local, workload_task
from nemo_resiliency_plugins.tools.report import report_job

STEPS = 20  # the reference config's train.train_iters; checkpoint every 5 steps
NAN_STEP = 7
FT_NAN_STEP = 13  # under ft_launcher: resume from step 10
RESTARTS = 2


def exit_code_seen(result, code: int) -> bool:
    """torchrun / ft_launcher report a worker's exit code as 'exitcode: N' (torch's agent), 'exitcode  : N' (torch's
    error summary) or 'exitcode=N' (NVRx's list of failures)."""
    shapes = (ll.exact(ll.TORCH_EXITCODE, code), ll.exact(ll.TORCH_SUMMARY_EXITCODE, code))
    nvrx = ll.exact(ll.NVRX_FAILURE, None, code)
    return any(shape.search(line) for line in result.lines for shape in (*shapes, nvrx))


def script_task(save: Path, fault: str, step: int = NAN_STEP):
    env = {"NRP_STEP_TIME": "0.05", "NRP_FAULT": fault, "NRP_FAULT_STEP": str(step), "NRP_FAULT_RANK": "1"}
    return workload_task([f"checkpoint.save={save}"], env=env)


@pytest.fixture(scope="module")
def nan_under_ft(tmp_path_factory):
    """One job read by two tests: a NaN in rank 1's loss at step 13, the re-run check on (validate_results), and
    ft_launcher restarting the worker group after the exit code 17 (restart budget 2). A job of its own for the
    first reading (the same NaN under plain torchrun, ending FAILED) cost 48 s of a loaded CI run and showed the
    same Megatron Core lines."""
    save = tmp_path_factory.mktemp("rerun-ft")
    ft = FaultTolerancePlugin(
        num_in_job_restarts=RESTARTS,
        section_timeouts={"setup": 120, "step": 10, "checkpointing": 60},
        out_of_section_timeout=60,
        workload_check_interval=1,
    )
    return run_local(script_task(save, "nan", step=FT_NAN_STEP), [ft, RerunStateMachinePlugin()], name="rerun-ft"), save


def test_nan_is_caught_in_validate_results_mode_and_the_job_exits_17(nan_under_ft):
    result, save = nan_under_ft
    assert result.grep(f"FAULT_INJECTED kind=nan step={FT_NAN_STEP} rank=1"), result.log[-4000:]
    assert result.grep("Unexpected result nan on rank 1")  # Megatron Core's validate_result
    assert result.grep("Need to rerun step to check reproducibility")
    assert result.grep("First rerun: unexpected result is not reproducible")
    assert result.grep("Possible transient error")
    assert result.grep(f"EXIT rerun_state_machine exit_code=17 step={FT_NAN_STEP}")
    assert exit_code_seen(result, 17), result.log[-4000:]
    # Exit 17 saves no checkpoint: the restarted ranks resume from the step-10 save, not from the NaN's step.
    assert not result.grep(f"CHECKPOINT saved step={FT_NAN_STEP}")
    assert len(result.grep("RESUMED from step 10")) == 2, result.log[-4000:]


def test_with_the_check_off_the_nan_is_not_caught(tmp_path):
    plugin = RerunStateMachinePlugin(check_for_nan_in_loss=False)
    result = run_local(script_task(tmp_path, "nan"), [plugin], name="rerun-nan-check-off", launcher="torchrun")
    assert result.state == "SUCCEEDED", result.log[-4000:]
    assert result.grep(f"FAULT_INJECTED kind=nan step={NAN_STEP} rank=1")
    assert not result.grep("Unexpected result") and not result.grep("EXIT rerun_state_machine")
    assert result.grep(f"FINISHED step={STEPS}")
    params = torch.load(tmp_path / "final_params.pt")
    assert all(torch.isnan(t).any() for t in params.values()), "the NaN went into the weights unnoticed"
    # `nemo-resiliency report` (issue 36): the NaN injected once, nothing detected it, the run finished.
    job = report_job(result.job_dir)
    assert (job.requeues, job.restarts, job.finished) == (0, 0, True)
    (row,) = job.rows
    assert row.injected == [f"nan at step {NAN_STEP} on rank 1"], row
    assert (row.detected_by, row.exit_code, row.finished_step) == (None, None, STEPS), row


def test_reproduced_nan_saves_a_checkpoint_and_exits_16_partial_task(tmp_path):
    from nemo_resiliency_plugins.testing import workload

    task = run.Partial(workload.pretrain, config=workload.reference_config_buildable(str(tmp_path)))
    env = {"NRP_STEP_TIME": "0.05", "NRP_FAULT": "nan_persistent", "NRP_FAULT_STEP": str(NAN_STEP)}
    result = run_local(task, [RerunStateMachinePlugin()], name="rerun-nan-persistent", env=env, launcher="torchrun")
    assert result.state == "FAILED", result.log[-4000:]
    assert len(result.grep(f"FAULT_INJECTED kind=nan_persistent step={NAN_STEP}")) == 2, "initial run + re-run"
    assert result.grep("First rerun: unexpected result is reproducible")
    assert result.grep("Saving a checkpoint and exiting now")
    assert result.grep(f"CHECKPOINT saved step={NAN_STEP}")
    assert (tmp_path / f"iter_{NAN_STEP:07d}.pt").exists()
    assert result.grep(f"EXIT rerun_state_machine exit_code=16 step={NAN_STEP}")
    assert exit_code_seen(result, 16), result.log[-4000:]
    # `nemo-resiliency report` (issue 36): the NaN injected on the run and on the re-run of step 7 (NRP_FAULT_RANK
    # unset: rank 1), the save at that step, the exit code 16 that ended the job unfinished.
    job = report_job(result.job_dir)
    assert (job.requeues, job.restarts, job.finished) == (0, 0, False)
    (row,) = job.rows
    assert row.injected == [f"nan_persistent at step {NAN_STEP} on rank 1"] * 2, row
    assert (row.checkpoints, row.finished_step) == ([5, NAN_STEP], None), row
    assert (row.detected_by, row.exit_code) == ("rank exited with code 16", 16), row


def test_with_fault_tolerance_plugin_exit_17_is_restarted_in_place_and_training_goes_on(nan_under_ft):
    """What ft_launcher does with the rerun exit codes: a failed worker group, restarted from the last checkpoint."""
    result, save = nan_under_ft
    restarts = RESTARTS
    assert result.state == "SUCCEEDED", result.log[-4000:]
    assert result.grep("EXIT rerun_state_machine exit_code=17 step=13")
    assert exit_code_seen(result, 17), "ft_launcher saw the worker exit with 17"
    assert result.grep(f"{restarts}/{restarts} attempts left; will restart worker group")
    assert result.grep("START rank=0 world=2 restart=1")
    assert result.grep("RESUMED from step 10")
    assert result.grep(f"FINISHED step={STEPS}")
    params = torch.load(save / "final_params.pt")
    assert not any(torch.isnan(t).any() for t in params.values()), "the bad step never reached the weights"


def test_report_of_the_nan_job_under_fault_tolerance(nan_under_ft):
    """`nemo-resiliency report` (issue 36): the NaN injected, the exit code 17 that ended the cycle, the restart,
    the resume from step 10 and the finish."""
    job = report_job(nan_under_ft[0].job_dir)
    assert (job.requeues, job.restarts, job.finished) == (0, 1, True)
    nan, last = job.rows
    assert nan.injected == [f"nan at step {FT_NAN_STEP} on rank 1"]
    assert (nan.detected_by, nan.exit_code) == ("rank exited with code 17", 17)
    assert nan.checkpoints == [5, 10] and nan.resumed_from is None
    assert (last.injected, last.resumed_from, last.finished_step) == ([], 10, STEPS)
    # The NaN came in the iteration after step 13 (a fault at step N strikes after iteration N): 11-13 were
    # trained again after the restart.
    assert (nan.last_iteration, job.iterations()) == (FT_NAN_STEP, (STEPS, 3))
