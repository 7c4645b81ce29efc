"""determinism-debugging: tell a reproducible bad loss from a transient fault with the rerun state machine."""

from nemo_resiliency_plugins.recipes._catalog import Recipe

SCRIPT = """\
import nemo_run as run

from nemo_resiliency_plugins.recipes import get_recipe

task = run.Script(
    path="/workspace/pretrain.py",
    entrypoint="python",
    args=["checkpoint.save=/checkpoints/llama", "checkpoint.load=/checkpoints/llama", "checkpoint.save_interval=500"],
)
executor = run.LocalExecutor(ntasks_per_node=8, launcher="torchrun")
run.run(task, executor=executor, plugins=get_recipe("determinism-debugging"), name="debug-nan")
"""

RECIPE = Recipe(
    name="determinism-debugging",
    summary="Find nondeterminism and silent data corruption with the rerun state machine",
    description=(
        "Megatron Core's rerun state machine in validate_results mode: a NaN or spiky loss makes the step "
        "run again to tell a reproducible result (exit 16: a checkpoint is saved; resume on a different GPU "
        "to disambiguate) from a transient fault (exit 17: not reproduced, no checkpoint; resume from the "
        "last one)."
    ),
    executors=("local", "slurm"),
    plugins={
        "RerunStateMachinePlugin": {
            "rerun_mode": "validate_results",
            "check_for_nan_in_loss": True,
            "check_for_spiky_loss": True,
        },
    },
    script=SCRIPT,
    step_time_s=6.0,
    save_time_s=30.0,
)
