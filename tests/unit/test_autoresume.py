"""Autoresume preconditions (nemo_resiliency_plugins/core/autoresume.py) through each restarting plugin's real setup on
real NeMo-Run tasks: Megatron Bridge 0.6.2 resumes only from checkpoint.load, so every plugin that restarts a job
wires it to checkpoint.save where unset and refuses what would train from iteration 0."""

from __future__ import annotations

import logging

import fiddle as fdl
import nemo_run as run
import pytest
import yaml

from nemo_resiliency_plugins import (
    FaultTolerancePlugin,
    InProcessRestartPlugin,
    PreemptionPlugin,
    ResiliencyConfigError,
    StragglerDetectionPlugin,
)
from nemo_resiliency_plugins.core.nvrx_launcher import CONFIG_PATH_ENV, ITERATION_FILE
from tests.helpers import add_job, local, slurm

MODULE = "nemo_resiliency_plugins.testing.workload"

# Every plugin that restarts (or ends-to-be-requeued) a job, built so that it accepts a 2-rank LocalExecutor.
RESTARTING = {
    "FaultTolerancePlugin": lambda: FaultTolerancePlugin(),
    "PreemptionPlugin": lambda: PreemptionPlugin(),
    "InProcessRestartPlugin": lambda: InProcessRestartPlugin(),
    "StragglerDetectionPlugin": lambda: StragglerDetectionPlugin(stop_if_detected=True),
}


def script(*args: str) -> run.Script:
    return run.Script(path=MODULE, m=True, entrypoint="python", args=list(args))


def partial(save: str | None, load: str | None):
    from nemo_resiliency_plugins.testing import workload

    task = run.Partial(workload.pretrain, config=workload.reference_config_buildable(save))
    task.config.checkpoint.load = load
    return task


@pytest.mark.parametrize("name", RESTARTING)
def test_load_is_wired_to_save_on_a_script(name):
    job = add_job(script("checkpoint.save=/ck/run1"), local(), [RESTARTING[name]()])
    assert "checkpoint.load=/ck/run1" in job.task.args, job.task.args


@pytest.mark.parametrize("name", RESTARTING)
def test_load_is_wired_to_save_on_a_partial(name):
    job = add_job(partial("/ck/run1", None), local(), [RESTARTING[name]()])
    cfg = fdl.build(job.task).keywords["config"]
    assert (cfg.checkpoint.save, cfg.checkpoint.load) == ("/ck/run1", "/ck/run1")


@pytest.mark.parametrize("name", RESTARTING)
def test_a_different_load_is_refused_naming_both(name):
    with pytest.raises(ResiliencyConfigError) as err:
        add_job(script("checkpoint.save=/ck/new", "checkpoint.load=/ck/old"), local(), [RESTARTING[name]()])
    text = str(err.value)
    assert name in text and "checkpoint.load" in text and "/ck/old" in text and "/ck/new" in text
    assert "pretrained_checkpoint" in text


@pytest.mark.parametrize("name", RESTARTING)
def test_no_checkpoint_at_all_is_refused_with_the_consequence(name):
    with pytest.raises(ResiliencyConfigError, match="every restart would train from iteration 0"):
        add_job(partial(None, None), local(), [RESTARTING[name]()])
    with pytest.raises(ResiliencyConfigError, match="every restart would train from iteration 0"):
        add_job(script("checkpoint.save=null"), local(), [RESTARTING[name]()])
    with pytest.raises(ResiliencyConfigError, match="every restart would train from iteration 0"):
        add_job(script("checkpoint.save=/ck", "~checkpoint.load"), local(), [RESTARTING[name]()])


def test_no_periodic_save_is_refused():
    with pytest.raises(ResiliencyConfigError, match="checkpoint.save_interval"):
        add_job(script("checkpoint.save=/ck", "checkpoint.save_interval=null"), local(), [FaultTolerancePlugin()])


def test_the_same_load_written_differently_is_kept():
    job = add_job(script("checkpoint.save=/ck/run1/", "checkpoint.load=/ck/run1"), local(), [FaultTolerancePlugin()])
    assert job.task.args.count("checkpoint.load=/ck/run1") == 1


def test_two_plugins_agree_on_the_load_they_wired():
    job = add_job(script("checkpoint.save=/ck"), local(), [FaultTolerancePlugin(), PreemptionPlugin()])
    assert job.task.args.count("checkpoint.load=/ck") == 1


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_preemption_builds_a_task_that_hides_its_checkpoint_dir_and_warns():
    """Megatron Bridge's own scripts/performance passes --save_dir (its own flag): drop-in means it builds."""
    collect = _Collect()
    logging.getLogger("nemo_resiliency_plugins").addHandler(collect)
    try:
        job = add_job(
            run.Script(path="/tmp/train.py", entrypoint="python", args=["--save_dir", "/ck"]),
            local(),
            [PreemptionPlugin()],
        )
    finally:
        logging.getLogger("nemo_resiliency_plugins").removeHandler(collect)
    assert "PreemptionPlugin: the task does not show checkpoint.save" in "\n".join(collect.lines)
    assert "train.exit_signal_handler=true" in job.task.args and job.task.args[:2] == ["--save_dir", "/ck"]


def test_preemption_checkpoint_dir_must_agree_with_a_shown_checkpoint_save():
    with pytest.raises(ResiliencyConfigError) as err:
        add_job(
            run.Script(path="/tmp/train.py", entrypoint="python", args=["checkpoint.save=/a"]),
            local(),
            [PreemptionPlugin(checkpoint_dir="/b")],
        )
    text = str(err.value)
    assert "PreemptionPlugin" in text and "checkpoint_dir" in text and "'/a'" in text
    # The same directory, or one declared for a task that does not show its own, is accepted.
    add_job(
        run.Script(path="/tmp/train.py", entrypoint="python", args=["checkpoint.save=/a"]),
        local(),
        [PreemptionPlugin(checkpoint_dir="/a/")],
    )


def test_fault_tolerance_warns_when_it_cannot_see_the_checkpoint_dir():
    collect = _Collect()
    logging.getLogger("nemo_resiliency_plugins").addHandler(collect)
    try:
        job = add_job(run.Script(path="/tmp/train.py", entrypoint="python"), local(), [FaultTolerancePlugin()])
    finally:
        logging.getLogger("nemo_resiliency_plugins").removeHandler(collect)
    text = "\n".join(collect.lines)
    assert "does not show checkpoint.save" in text and "max_no_progress_cycles=3 has no effect" in text
    cfg = yaml.safe_load(open(job.executor.env_vars[CONFIG_PATH_ENV]))["fault_tolerance"]
    assert "checkpoint_iteration_file" not in cfg


def test_progress_tracking_reads_megatron_bridges_iteration_file_in_the_save_dir():
    job = add_job(script("checkpoint.save=/ck/a"), local(), [FaultTolerancePlugin(max_no_progress_cycles=2)])
    cfg = yaml.safe_load(open(job.executor.env_vars[CONFIG_PATH_ENV]))["fault_tolerance"]
    assert cfg["checkpoint_iteration_file"] == f"/ck/a/{ITERATION_FILE}"
    assert cfg["max_no_progress_cycles"] == 2


def test_an_iteration_file_path_reaches_the_yaml_exactly_whatever_it_holds():
    odd = "/lustre/my ck: #1 {x}"
    job = add_job(
        run.Script(path="/tmp/t.py", entrypoint="python"), local(), [FaultTolerancePlugin(checkpoint_dir=odd)]
    )
    cfg = yaml.safe_load(open(job.executor.env_vars[CONFIG_PATH_ENV]))["fault_tolerance"]
    assert cfg["checkpoint_iteration_file"] == f"{odd}/{ITERATION_FILE}"


def test_checkpoint_dir_serves_a_script_that_hides_its_save_dir_and_must_agree_with_a_visible_one():
    plugin = FaultTolerancePlugin(checkpoint_dir="/lustre/ck")
    job = add_job(run.Script(path="/tmp/train.py", entrypoint="python"), local(), [plugin])
    cfg = yaml.safe_load(open(job.executor.env_vars[CONFIG_PATH_ENV]))["fault_tolerance"]
    assert cfg["checkpoint_iteration_file"] == f"/lustre/ck/{ITERATION_FILE}"
    with pytest.raises(ResiliencyConfigError, match="checkpoint_dir"):
        add_job(script("checkpoint.save=/other"), local(), [FaultTolerancePlugin(checkpoint_dir="/lustre/ck")])


def test_progress_tracking_off_writes_no_iteration_file():
    job = add_job(script("checkpoint.save=/ck"), local(), [FaultTolerancePlugin(max_no_progress_cycles=0)])
    cfg = yaml.safe_load(open(job.executor.env_vars[CONFIG_PATH_ENV]))["fault_tolerance"]
    assert "checkpoint_iteration_file" not in cfg


@pytest.mark.parametrize("value", ["rel\npath", "a'b", "$HOME/ck", 3])
def test_checkpoint_dir_is_validated(value):
    with pytest.raises(ResiliencyConfigError, match="checkpoint_dir"):
        FaultTolerancePlugin(checkpoint_dir=value)


def test_slurm_jobs_get_the_no_restart_code_and_multi_node_jobs_exclude_failed_nodes(tmp_path):
    one = add_job(script("checkpoint.save=/ck"), slurm(tmp_path), [FaultTolerancePlugin()], name="one")
    assert one.executor.env_vars["NRP_NO_RESTART_EXIT_CODE"] == "93"
    assert "NRP_EXCLUDE_FAILED_NODES" not in one.executor.env_vars
    two_nodes = slurm(tmp_path)
    two_nodes.nodes = 2
    two = add_job(script("checkpoint.save=/ck"), two_nodes, [FaultTolerancePlugin()], name="two")
    assert two.executor.env_vars["NRP_EXCLUDE_FAILED_NODES"] == "1"
    two_nodes = slurm(tmp_path)
    two_nodes.nodes = 2
    off = add_job(script("checkpoint.save=/ck"), two_nodes, [FaultTolerancePlugin(exclude_failed_nodes=False)])
    assert "NRP_EXCLUDE_FAILED_NODES" not in off.executor.env_vars
    with pytest.raises(ResiliencyConfigError, match="exclude_failed_nodes"):
        add_job(script("checkpoint.save=/ck"), local(), [FaultTolerancePlugin(exclude_failed_nodes=True)])


# ------------------------------------------------------------------- issue 32: settings that redo the training


@pytest.mark.parametrize("name", RESTARTING)
@pytest.mark.parametrize("value", ["true", "True"])
def test_finetune_is_refused_with_the_consequence_named(name, value):
    task = script("checkpoint.save=/ck/run1", f"checkpoint.finetune={value}")
    with pytest.raises(ResiliencyConfigError) as err:
        add_job(task, local(), [RESTARTING[name]()])
    text = str(err.value)
    assert name in text and "checkpoint.finetune" in text, text
    assert "resets the step to 0 after every checkpoint load" in text and "pretrained_checkpoint" in text, text


@pytest.mark.parametrize("name", RESTARTING)
def test_ckpt_step_is_refused_with_the_consequence_named(name):
    with pytest.raises(ResiliencyConfigError) as err:
        add_job(script("checkpoint.save=/ck/run1", "checkpoint.ckpt_step=200"), local(), [RESTARTING[name]()])
    text = str(err.value)
    assert name in text and "checkpoint.ckpt_step" in text and "200" in text, text
    assert "every restart" in text and "goes back to step 200" in text, text


def test_finetune_and_ckpt_step_on_a_partial_are_refused_and_their_defaults_pass():
    task = partial("/ck/run1", None)
    task.config.checkpoint.finetune = True
    with pytest.raises(ResiliencyConfigError, match=r"checkpoint\.finetune"):
        add_job(task, local(), [FaultTolerancePlugin()])
    task = partial("/ck/run1", None)
    task.config.checkpoint.ckpt_step = 40
    with pytest.raises(ResiliencyConfigError, match=r"goes back to step 40"):
        add_job(task, local(), [FaultTolerancePlugin()])
    ok = add_job(
        script("checkpoint.save=/ck/run1", "checkpoint.finetune=false", "checkpoint.ckpt_step=null"),
        local(),
        [FaultTolerancePlugin()],
    )
    assert "checkpoint.load=/ck/run1" in ok.task.args
