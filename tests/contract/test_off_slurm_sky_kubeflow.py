"""Off Slurm (issue 35) on SkyPilot managed jobs and Kubeflow: what NeMo-Run 0.11.1 hands each platform about
restarts, read back from a dry run and checked with the platforms' own packages (``skypilot``'s task schema and
recovery defaults, ``kubernetes``' client models). Runs in ``.venv-executors`` (``.ci/setup-executors-env``)."""

from __future__ import annotations

import nemo_run as run
import pytest

from nemo_resiliency_plugins import FaultTolerancePlugin, PreemptionPlugin, ResiliencyConfigError
from nemo_resiliency_plugins.core import nvrx_launcher
from nemo_resiliency_plugins.core.executors import for_executor
from nemo_resiliency_plugins.core.executors.kubeflow import NO_RESTART_POD_FAILURE_POLICY
from nemo_resiliency_plugins.preemption import PreemptionSignalWarning
from tests.contract.executor_jobs import render
from tests.contract.test_executors_ft_sky_kubeflow import kube_home, kubeflow  # noqa: F401  (fixture)

# --------------------------------------------------------------------------------------------- SkyPilot


def _sky_task(nodes: int = 1):
    job = render(
        run.SkypilotJobsExecutor(gpus="H100", gpus_per_node=8, num_nodes=nodes, use_spot=True),
        [FaultTolerancePlugin(num_job_retries_on_failure=0)],
    )
    return job.request.task  # the sky.Task NeMo-Run hands to SkyPilot's jobs controller


def test_skypilot_managed_job_reaches_skypilot_with_its_default_recovery_only():
    """NeMo-Run sets no job_recovery: the task passes SkyPilot's own task schema, and SkyPilot then recovers a
    preempted job but never a failed program (max_restarts_on_errors defaults to 0), so exit 93 is final."""
    from sky.utils import common_utils, schemas

    task = _sky_task()
    config = task.to_yaml_config()
    common_utils.validate_schema(config, schemas.get_task_schema(), "Invalid task YAML: ")
    resources = config["resources"]
    for entry in [resources, *resources.get("any_of", []), *resources.get("ordered", [])]:
        assert "job_recovery" not in entry, entry
    assert all(r.job_recovery is None for r in task.resources)


def test_skypilot_recovery_cannot_spare_the_no_restart_exit():
    """What a job_recovery *could* say, through SkyPilot's schema: recover_on_exit_codes lists codes to always
    recover; there is no field for a code never to recover. So 93 cannot be kept final under
    max_restarts_on_errors > 0, and the plugin refuses retries rather than render one."""
    from sky.utils import schemas

    properties = schemas.get_resources_schema()["properties"]["job_recovery"]["anyOf"][1]["properties"]
    assert {"strategy", "max_restarts_on_errors", "recover_on_exit_codes"} <= set(properties)
    never = [name for name in properties if "never" in name or "exclude" in name or "permanent" in name]
    assert never == [], never
    with pytest.raises(ResiliencyConfigError, match=r"recover_on_exit_codes only adds codes"):
        render(
            run.SkypilotJobsExecutor(gpus="H100", gpus_per_node=8, num_nodes=1),
            [FaultTolerancePlugin(num_job_retries_on_failure=3)],
        )
    assert not for_executor(run.SkypilotJobsExecutor(gpus="H100")).pid1_launch_script


# --------------------------------------------------------------------------------------------- Kubeflow


def test_kubeflow_trainjob_carries_no_restart_setting_and_restart_policy_is_never_used(kube_home):  # noqa: F811
    """The TrainJob NeMo-Run submits (get_job_body, as launch() builds it): no retry or exit-code field, and the
    executor's restart_policy appears nowhere; its pod overrides are valid Kubernetes pod-spec fields."""
    from kubernetes.client import ApiClient

    job = render(kubeflow(), [FaultTolerancePlugin(num_job_retries_on_failure=0)])
    executor = job.executor
    executor.restart_policy = "ExitCode"  # whatever it says, it is not rendered
    body = executor.get_job_body("train-abc123", ["/bin/bash", f"{executor.code_dir}/launch.sh"])
    assert body["apiVersion"] == "trainer.kubeflow.org/v1alpha1" and body["kind"] == "TrainJob"
    assert "ExitCode" not in repr(body) and "OnFailure" not in repr(body)
    assert set(body["spec"]) <= {"runtimeRef", "trainer", "podTemplateOverrides"}, body["spec"]
    client = ApiClient()
    for override in body["spec"].get("podTemplateOverrides", []):
        spec = override.get("spec", {})
        for volume in spec.get("volumes", []):
            assert client._ApiClient__deserialize(volume, "V1Volume").name == volume["name"]


def test_kubeflow_retries_are_refused_with_the_runtimes_rule_to_use(kube_home):  # noqa: F811
    with pytest.raises(ResiliencyConfigError, match=r"TrainJob.*ClusterTrainingRuntime.*onExitCodes In \[93\]"):
        render(kubeflow(), [FaultTolerancePlugin(num_job_retries_on_failure=3)])


def test_the_runtime_rule_the_docs_give_is_a_valid_kubernetes_pod_failure_policy():
    """The podFailurePolicy the error and docs/off-slurm.md tell users to put in their ClusterTrainingRuntime,
    loaded into the kubernetes client's own models (which validate required fields and enum values)."""
    from kubernetes.client import ApiClient

    client = ApiClient()
    job_spec = client._ApiClient__deserialize(
        {
            "template": {"spec": {"containers": []}},
            "backoffLimit": 3,
            "podFailurePolicy": NO_RESTART_POD_FAILURE_POLICY,
        },
        "V1JobSpec",
    )
    (rule,) = job_spec.pod_failure_policy.rules
    assert rule.action == "FailJob"
    assert rule.on_exit_codes.operator == "In" and rule.on_exit_codes.values == [nvrx_launcher.NO_RESTART_EXIT_CODE]


def test_kubeflow_preemption_makes_the_entry_the_trainers_command(kube_home):  # noqa: F811
    """With a PVC the pod runs NeMo-Run's launch.sh through bash (the scheduler's dry run wrote it and gives the
    command); the TrainJob's trainer command becomes the entry with that command as its arguments, and it is a
    valid Kubernetes container command (the client's V1Container model)."""
    import base64
    import warnings

    from kubernetes.client import ApiClient

    from nemo_resiliency_plugins.core.container_entry import INTERPRETER, entry_source
    from nemo_resiliency_plugins.core.entry_command import BOOTSTRAP

    with warnings.catch_warnings():
        warnings.simplefilter("error", PreemptionSignalWarning)
        job = render(kubeflow(), [FaultTolerancePlugin(num_job_retries_on_failure=0), PreemptionPlugin()])
    executor = job.executor
    assert job.request.cmd == ["/bin/bash", f"{executor.code_dir}/launch.sh"]
    body = executor.get_job_body("train-abc123", job.request.cmd)
    command = body["spec"]["trainer"]["command"]
    assert command[:3] == [INTERPRETER, "-c", BOOTSTRAP]
    assert base64.b64decode(command[3]).decode() == entry_source()
    assert command[4:] == job.request.cmd
    container = ApiClient()._ApiClient__deserialize({"name": "node", "command": command}, "V1Container")
    assert container.command == command
    with pytest.raises(ResiliencyConfigError, match=r"container_kwargs\['command'\].*replaces NeMo-Run's launch"):
        render(kubeflow(container_kwargs={"command": ["python", "train.py"]}), [PreemptionPlugin()])


def test_kubeflow_without_a_pvc_needs_no_entry(kube_home):  # noqa: F811
    """Without a PVC the command runs in exec form: it is the container's first process and gets SIGTERM."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", PreemptionSignalWarning)
        job = render(kubeflow(pvc=None), [PreemptionPlugin()])
    assert "command" not in job.executor.container_kwargs
