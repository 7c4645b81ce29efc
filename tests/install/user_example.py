"""The user's example the launching-host tier runs (docs/install.md shows it): three plugins on a Slurm job,
dry run, the sbatch script written to the path given as the first argument. Needs only this package and its
declared dependencies: no torch, NVRx or Megatron Bridge on the host that launches the job."""

import os
import sys

import nemo_run as run

from nemo_resiliency_plugins import FaultTolerancePlugin, PreemptionPlugin, StragglerDetectionPlugin

executor = run.SlurmExecutor(
    account="my-account",
    partition="batch",
    nodes=2,
    ntasks_per_node=8,
    time="04:00:00",
    packager=run.Packager(),  # ship nothing: the training code is in the job's image
    tunnel=run.LocalTunnel(job_dir=os.path.join(os.environ["NEMORUN_HOME"], "experiments")),
)
task = run.Script(
    path="/workspace/pretrain.py",
    entrypoint="python",
    args=["checkpoint.save=/checkpoints/llama", "checkpoint.load=/checkpoints/llama"],
)
plugins = [FaultTolerancePlugin(num_in_job_restarts=3), PreemptionPlugin(), StragglerDetectionPlugin()]
with run.Experiment("pretrain", executor=executor) as exp:
    exp.add(task, name="train", plugins=plugins)
    exp.dryrun(log=False)
    script = exp.jobs[0]._dryrun_info.request.materialize()  # the sbatch script NeMo-Run would submit
with open(sys.argv[1], "w") as handle:
    handle.write(str(script))
