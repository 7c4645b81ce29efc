"""kubernetes: Kubeflow, DGX Cloud and Lepton jobs: restarts in the job, a checkpoint when a pod is stopped."""

from nemo_resiliency_plugins.recipes._catalog import Recipe

SCRIPT = """\
import nemo_run as run

from nemo_resiliency_plugins.recipes import get_recipe

executor = run.LeptonExecutor(
    container_image="nvcr.io/nvidia/nemo:25.09",
    nemo_run_dir="/shared/nemo_run",
    nodes=1,  # Lepton: one node (see the recipe's notes)
    gpus_per_node=8,
    nprocs_per_node=8,
    node_group="my-node-group",
    mounts=[{"path": "/shared", "mount_path": "/shared"}],
    packager=run.Packager(),
)
task = run.Script(
    path="/workspace/pretrain.py",
    entrypoint="python",
    args=["checkpoint.save=/shared/ckpt/llama", "checkpoint.load=/shared/ckpt/llama", "checkpoint.save_interval=500"],
)
run.run(task, executor=executor, plugins=get_recipe("kubernetes"), name="pretrain")
"""

RECIPE = Recipe(
    name="kubernetes",
    summary="Kubernetes (Kubeflow, DGX Cloud, Lepton): FT, restarts, preemption save, stragglers, NaN checks",
    description=(
        "NVRx fault tolerance under ft_launcher with section timeouts (600/180/420 s, out-of-section 300 s) "
        "and 3 in-job restarts; the section timeouts ride in NeMo-Run's <job>_executor.yaml (Kubeflow needs "
        "workdir_pvc). No job retries: these executors do not resubmit a failed job. Megatron Bridge's "
        "SIGTERM exit handler saves a checkpoint when a pod is stopped (Kubernetes gives 30 s before SIGKILL "
        "by default), NVRx straggler detection, and the rerun state machine's NaN check."
    ),
    executors=("dgx-cloud", "kubeflow", "lepton"),
    plugins={
        "FaultTolerancePlugin": {"num_in_job_restarts": 3, "num_job_retries_on_failure": 0},
        "PreemptionPlugin": {"preempt_time": 60},
        "StragglerDetectionPlugin": {"gpu_relative_perf_threshold": 0.7, "report_time_interval": 300.0},
        "RerunStateMachinePlugin": {"rerun_mode": "disabled", "check_for_nan_in_loss": True},
    },
    notes=(
        "preempt_time has no effect off Slurm; the pod's SIGTERM -> SIGKILL grace period bounds the save "
        "(Kubeflow: pod_spec_overrides={'terminationGracePeriodSeconds': N}).",
        "The pod's SIGTERM goes to the container's first process: PreemptionPlugin puts this package's "
        "container entry there (DGX Cloud: custom_spec command/args; Lepton: the first pre-launch command; "
        "Kubeflow with workdir_pvc: container_kwargs['command']), which passes it to ft_launcher.",
        "Lepton: one node only (NeMo-Run 0.11.1 renders a multi-node ft_launcher with bash's PID as the node rank).",
    ),
    script=SCRIPT,
    step_time_s=6.0,
    save_time_s=20.0,
)
