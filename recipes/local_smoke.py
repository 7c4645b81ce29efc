"""local-smoke: rehearse fault tolerance on one machine, with timeouts short enough to catch a hang in seconds."""

from nemo_resiliency_plugins.recipes._catalog import Recipe

SCRIPT = """\
import nemo_run as run

from nemo_resiliency_plugins.recipes import get_recipe

# The package's reference workload: 2 CPU ranks of a small deterministic training loop (needs torch, NVRx and
# Megatron Bridge on this machine); NRP_FAULT kills rank 1 at step 25, and the job recovers.
task = run.Script(
    path="nemo_resiliency_plugins.testing.workload",
    m=True,
    entrypoint="python",
    args=["train.train_iters=40", "checkpoint.save=/tmp/smoke-ckpt", "checkpoint.load=/tmp/smoke-ckpt",
          "checkpoint.save_interval=10"],
    env={"NRP_FAULT": "kill", "NRP_FAULT_STEP": "25", "NRP_FAULT_RANK": "1"},
)
run.run(task, executor=run.LocalExecutor(ntasks_per_node=2), plugins=get_recipe("local-smoke"), name="smoke")
"""

RECIPE = Recipe(
    name="local-smoke",
    summary="Rehearse on one machine: short timeouts and a fault, what CI runs",
    description=(
        "FaultTolerancePlugin with short section timeouts (setup 120 s, step 10 s, checkpointing 60 s) and "
        "a 1 s rank-monitor check, so a hang is caught within seconds; used with the reference workload "
        "and an injected fault (python -m nemo_resiliency_plugins.recipes.local_fault_tolerance)."
    ),
    executors=("local", "slurm"),
    plugins={
        "FaultTolerancePlugin": {
            "num_in_job_restarts": 3,
            "num_job_retries_on_failure": 0,
            "section_timeouts": {"setup": 120.0, "step": 10.0, "checkpointing": 60.0},
            "out_of_section_timeout": 60.0,
            "workload_check_interval": 1.0,
        },
    },
    example="local_fault_tolerance.py",
    script=SCRIPT,
    step_time_s=0.5,
    save_time_s=5.0,
)
