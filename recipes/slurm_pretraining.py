"""slurm-pretraining: production pretraining on Slurm, every mechanism a long run wants there."""

from nemo_resiliency_plugins.recipes._catalog import Recipe

SCRIPT = """\
import os

import nemo_run as run

from nemo_resiliency_plugins.recipes import get_recipe

# Run on the cluster's login node (LocalTunnel); the training script and Megatron Bridge are in the job's image.
executor = run.SlurmExecutor(
    account="my-account",
    partition="batch",
    nodes=2,
    ntasks_per_node=8,
    time="04:00:00",
    packager=run.Packager(),
    tunnel=run.LocalTunnel(job_dir=os.path.expanduser("~/nemo-run-jobs")),
)
task = run.Script(
    path="/workspace/pretrain.py",
    entrypoint="python",
    args=["checkpoint.save=/checkpoints/llama", "checkpoint.load=/checkpoints/llama", "checkpoint.save_interval=500"],
)
run.run(task, executor=executor, plugins=get_recipe("slurm-pretraining"), name="pretrain")
"""

RECIPE = Recipe(
    name="slurm-pretraining",
    summary="Production pretraining on Slurm: FT, computed timeouts, restarts, retries, preemption, stragglers",
    description=(
        "NVRx fault tolerance under ft_launcher with section timeouts (600/180/420 s, out-of-section 300 s) "
        "and timeouts computed from the first run (ft_state.json), 3 in-job restarts and 2 job retries "
        "(Slurm requeues); SIGTERM 60 s before the time limit with Megatron Bridge's exit handler saving a "
        "checkpoint; NVRx straggler detection with threshold 0.7 and a report every 300 seconds; "
        "checkpoints saved asynchronously (NVRx's writer, torch_dist), so a save does not stall training."
    ),
    executors=("slurm",),
    plugins={
        "FaultTolerancePlugin": {
            # Megatron Bridge's plugin defaults, with the section timeouts its docs recommend.
            "num_in_job_restarts": 3,
            "num_job_retries_on_failure": 2,
            "calc_ft_timeouts": True,
        },
        "PreemptionPlugin": {"preempt_time": 60},
        "StragglerDetectionPlugin": {"gpu_relative_perf_threshold": 0.7, "report_time_interval": 300.0},
        "AsyncCheckpointPlugin": {},
    },
    notes=("AsyncCheckpointPlugin needs checkpoint.save on the task (a torch_dist or fsdp_dtensor format).",),
    script=SCRIPT,
    step_time_s=6.0,
    save_time_s=30.0,
)
