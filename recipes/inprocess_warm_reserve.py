"""inprocess-warm-reserve: a killed rank's place goes to a warm reserve rank of the same job."""

from nemo_resiliency_plugins.recipes._catalog import Recipe

SCRIPT = """\
import nemo_run as run

from nemo_resiliency_plugins.recipes import get_recipe

# 8 ranks on one node: 7 train, 1 waits as the reserve.
task = run.Script(
    path="/workspace/pretrain.py",
    entrypoint="python",
    args=["checkpoint.save=/checkpoints/llama", "checkpoint.load=/checkpoints/llama", "checkpoint.save_interval=500"],
)
plugins = get_recipe("inprocess-warm-reserve", InProcessRestartPlugin={"active_world_size": 7})
run.run(task, executor=run.LocalExecutor(ntasks_per_node=8), plugins=plugins, name="pretrain")
"""

RECIPE = Recipe(
    name="inprocess-warm-reserve",
    summary="A killed rank is replaced by a warm reserve rank in the same job (in-process restart, rank "
    "granularity); ft_launcher restarts the group once no reserve is left",
    description=(
        "InProcessRestartPlugin with active_world_size below the executor's ranks: the extra ranks wait "
        "inside NVRx's wrapper, a killed or hung rank's place goes to one of them, the survivors re-enter "
        "training in the same processes and resume from the last checkpoint. Each rank runs under "
        "nemo_resiliency_plugins.job.rank_keeper so that torchrun/ft_launcher do not tear the group down when "
        "one rank dies. FaultTolerancePlugin comes first, with fixed section timeouts above the in-process "
        "barrier (calculated ones would kill the survivors mid-restart), as the fallback once the reserves "
        "are used up. run.Script tasks only; refuses Slurm."
    ),
    executors=("local",),
    plugins={
        "FaultTolerancePlugin": {
            "num_in_job_restarts": 3,
            "num_job_retries_on_failure": 0,
            "calc_ft_timeouts": False,
            "section_timeouts": {"setup": 600.0, "step": 300.0, "checkpointing": 600.0},
        },
        "InProcessRestartPlugin": {"granularity": "rank", "active_world_size": 1},
    },
    notes=(
        "active_world_size=1 is the 2-rank demonstration (1 training rank + 1 reserve); set it to your "
        "training world size, e.g. InProcessRestartPlugin={'active_world_size': 7} on one 8-GPU node.",
        "Megatron Bridge 0.6 computes data_parallel_size from WORLD_SIZE (reserves included) before NVRx "
        "assigns ranks: global batch sizes must divide by both the full and the active data-parallel size.",
    ),
    script=SCRIPT,
    step_time_s=6.0,
    save_time_s=30.0,
)
