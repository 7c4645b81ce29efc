"""inprocess-async: in-process restart with asynchronous checkpoints on Megatron Core's queue (Megatron-Bridge#5842)."""

from nemo_resiliency_plugins.recipes._catalog import Recipe

SCRIPT = """\
import nemo_run as run

from nemo_resiliency_plugins.recipes import get_recipe

task = run.Script(
    path="/workspace/pretrain.py",
    entrypoint="python",
    args=[
        "checkpoint.save=/checkpoints/llama",
        "checkpoint.load=/checkpoints/llama",
        "checkpoint.save_interval=500",
        "checkpoint.ckpt_format=torch_dist",
    ],
)
executor = run.LocalExecutor(ntasks_per_node=8)  # not Slurm: in-process restart refuses run.SlurmExecutor
run.run(task, executor=executor, plugins=get_recipe("inprocess-async"), name="pretrain")
"""

RECIPE = Recipe(
    name="inprocess-async",
    summary="In-process restart with asynchronous checkpoints, on Megatron Core's async queue "
    "(Megatron-Bridge#5842's workaround on 0.6.x)",
    description=(
        "inprocess-restart plus AsyncCheckpointPlugin. On Megatron Bridge 0.6.x the in-process abort resets "
        "only Megatron Core's async results queue, so NVRx's writer (async_strategy='nvrx', the default) would "
        "hand the next save a stale result (Megatron-Bridge#5842, refused by the plugins); this recipe takes "
        "async_strategy='mcore', which the abort resets. doctor reports the bug and the workaround."
    ),
    executors=("local",),
    plugins={
        "InProcessRestartPlugin": {},
        "FaultTolerancePlugin": {"num_in_job_restarts": 3, "num_job_retries_on_failure": 0},
        "AsyncCheckpointPlugin": {"async_strategy": "mcore"},
    },
    notes=("AsyncCheckpointPlugin needs checkpoint.save on the task (a torch_dist format).",),
    script=SCRIPT,
    step_time_s=6.0,
    save_time_s=30.0,
)
