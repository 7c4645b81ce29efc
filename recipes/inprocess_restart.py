"""inprocess-restart: NVRx in-process restart for exceptions, with ft_launcher behind it for killed or hung ranks."""

from nemo_resiliency_plugins.recipes._catalog import Recipe

SCRIPT = """\
import nemo_run as run

from nemo_resiliency_plugins.recipes import get_recipe

task = run.Script(
    path="/workspace/pretrain.py",
    entrypoint="python",
    args=["checkpoint.save=/checkpoints/llama", "checkpoint.load=/checkpoints/llama", "checkpoint.save_interval=500"],
)
executor = run.LocalExecutor(ntasks_per_node=8)  # not Slurm: the plugin refuses run.SlurmExecutor
run.run(task, executor=executor, plugins=get_recipe("inprocess-restart"), name="pretrain")
"""

RECIPE = Recipe(
    name="inprocess-restart",
    summary="In-process restart (experimental), layered with job-level fault tolerance; refuses Slurm",
    description=(
        "NVRx in-process restart (same processes, no relaunch) for exceptions, with FaultTolerancePlugin's "
        "ft_launcher as the fallback for killed or hung ranks, as Megatron Bridge's own CI runs it. "
        "Refuses run.SlurmExecutor (use srun --kill-on-bad-exit=0 with NVRx's wait daemon there)."
    ),
    executors=("local",),
    plugins={
        "InProcessRestartPlugin": {},
        "FaultTolerancePlugin": {"num_in_job_restarts": 3, "num_job_retries_on_failure": 0},
    },
    script=SCRIPT,
    step_time_s=6.0,
    save_time_s=30.0,
)
