"""slurm-pretraining-local-checkpoints: slurm-pretraining plus node-local checkpoints, less work lost per failure."""

from nemo_resiliency_plugins.recipes._catalog import Recipe
from nemo_resiliency_plugins.recipes.slurm_pretraining import RECIPE as SLURM_PRETRAINING

SCRIPT = """\
import os

import nemo_run as run

from nemo_resiliency_plugins.recipes import get_recipe

executor = run.SlurmExecutor(
    account="my-account",
    partition="batch",
    nodes=2,
    ntasks_per_node=8,
    time="04:00:00",
    packager=run.Packager(),
    tunnel=run.LocalTunnel(job_dir=os.path.expanduser("~/nemo-run-jobs")),
)
# The persistent schedule (save_interval 500) stays; local checkpoints come every 20 steps between its saves.
task = run.Script(
    path="/workspace/pretrain.py",
    entrypoint="python",
    args=["checkpoint.save=/checkpoints/llama", "checkpoint.load=/checkpoints/llama", "checkpoint.save_interval=500"],
)
plugins = get_recipe(
    "slurm-pretraining-local-checkpoints",
    LocalCheckpointPlugin={"replication": True, "replication_jump": 8},  # 2 nodes of 8 ranks
)
run.run(task, executor=executor, plugins=plugins, name="pretrain")
"""

RECIPE = Recipe(
    name="slurm-pretraining-local-checkpoints",
    summary="slurm-pretraining plus node-local checkpoints every 20 steps: less work lost per failure",
    description=(
        "Everything in slurm-pretraining, plus NVRx local checkpoints (Megatron Bridge "
        "non_persistent_ckpt_type='local') to /local/scratch/ckpt every 20 steps beside the persistent "
        "schedule: an in-job restart on the same nodes resumes from the newest local checkpoint, a requeue "
        "onto other nodes from the newest persistent one (the preemption exit always writes one)."
    ),
    executors=("slurm",),
    plugins={
        **SLURM_PRETRAINING.plugins,  # Recipe.build deep-copies the settings: the two recipes share nothing mutable
        "LocalCheckpointPlugin": {
            "non_persistent_local_ckpt_dir": "/local/scratch/ckpt",
            "non_persistent_save_interval": 20,
        },
    },
    notes=(
        "The task must set checkpoint.save, checkpoint.load and checkpoint.save_interval (> 20).",
        "Set LocalCheckpointPlugin.non_persistent_local_ckpt_dir to your nodes' local disk; with 2+ nodes "
        "add replication: LocalCheckpointPlugin={'replication': True, 'replication_jump': <ranks per node>}.",
    ),
    script=SCRIPT,
    step_time_s=6.0,
    save_time_s=30.0,
)
