"""dgx-cloud: DGX Cloud (Run:ai) jobs: computed section timeouts, in-job restarts, straggler detection."""

from nemo_resiliency_plugins.recipes._catalog import Recipe

SCRIPT = """\
import nemo_run as run

from nemo_resiliency_plugins.recipes import get_recipe

executor = run.DGXCloudExecutor(
    base_url="https://my-dgx-cloud.example.com/api/v1",
    kube_apiserver_url="https://my-kube-apiserver.example.com",
    client_id="my-client-id",
    client_secret="my-client-secret",
    project_name="my-project",
    container_image="nvcr.io/nvidia/nemo:25.09",
    pvc_nemo_run_dir="/workspace/nemo_run",
    pvcs=[{"name": "workspace", "path": "/workspace", "claimName": "my-pvc"}],
    nodes=2,
    gpus_per_node=8,
    nprocs_per_node=8,
    packager=run.Packager(),
)
task = run.Script(
    path="/workspace/pretrain.py",
    entrypoint="python",
    args=["checkpoint.save=/workspace/ckpt", "checkpoint.load=/workspace/ckpt", "checkpoint.save_interval=500"],
)
run.run(task, executor=executor, plugins=get_recipe("dgx-cloud"), name="pretrain")
"""

RECIPE = Recipe(
    name="dgx-cloud",
    summary="DGX Cloud (Run:ai): FT with section timeouts and in-job restarts, straggler detection",
    description=(
        "NVRx fault tolerance under ft_launcher with section timeouts (600/180/420 s, out-of-section 300 s) "
        "and timeouts computed from the first run (ft_state.json), 3 in-job restarts (PET_MAX_RESTARTS: "
        "NeMo-Run drops --max-restarts on DGX Cloud); GROUP_RANK comes from DGX Cloud's launch script. No job "
        "retries (DGXCloudExecutor does not resubmit). NVRx straggler detection with threshold 0.7."
    ),
    executors=("dgx-cloud",),
    plugins={
        "FaultTolerancePlugin": {
            "num_in_job_restarts": 3,
            "num_job_retries_on_failure": 0,
            "calc_ft_timeouts": True,
        },
        "StragglerDetectionPlugin": {"gpu_relative_perf_threshold": 0.7, "report_time_interval": 300.0},
    },
    script=SCRIPT,
    step_time_s=6.0,
    save_time_s=30.0,
)
