"""KubeflowExecutor: a Kubeflow Trainer TrainJob (Kubernetes pods)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from nemo_resiliency_plugins.core.entry_command import entry_argv
from nemo_resiliency_plugins.core.executors.base import ExecutorRules
from nemo_resiliency_plugins.core.nvrx_launcher import NO_RESTART_EXIT_CODE
from nemo_resiliency_plugins.errors import ResiliencyConfigError

#: Kubernetes' default terminationGracePeriodSeconds.
KUBERNETES_DEFAULT_GRACE_S = 30.0
#: The Job podFailurePolicy that keeps NVRx's no-restart exit final, for the trainer Job of a
#: ClusterTrainingRuntime (validated against the kubernetes client's models in CI).
NO_RESTART_POD_FAILURE_POLICY = {
    "rules": [{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [NO_RESTART_EXIT_CODE]}}]
}


@dataclass(kw_only=True)
class KubeflowRules(ExecutorRules):
    """``run.KubeflowExecutor`` (``core/execution/kubeflow.py``, NeMo-Run 0.11.1).

    * Env: the trainer's env (and ``launch.sh``'s unquoted exports, with a PVC) are ``executor.env_vars``
      only: ``Script.env`` is dropped (``get_job_body``).
    * Files: only with ``workdir_pvc``: ``package()`` copies ``job_dir`` to ``code_dir`` on the PVC, and the
      section timeouts ride in the launcher, read from ``<code_dir>/configs/<job>_executor.yaml`` (not
      ``/nemo_run/configs``: with the default ``workdir_pvc_path`` ``/nemo_run`` is the PVC itself and
      ``ln -sfn`` makes ``/nemo_run/code``). Without a PVC nothing is shipped and the command runs in exec
      form: refused for fault tolerance.
    * Several nodes: ``GROUP_RANK`` is left unset (NVRx assigns infrastructure ranks itself).
    * Retries: not read (``restart_policy`` is never used either). NeMo-Run submits a Kubeflow Trainer v2
      TrainJob, which has no retry or exit-code field: those live in the ClusterTrainingRuntime (JobSet
      failurePolicy, the trainer Job's backoffLimit and podFailurePolicy). Refused, naming the rule to put there.
    * First process: with ``workdir_pvc``, ``/bin/bash <code_dir>/launch.sh`` (NeMo-Run's Kubeflow scheduler
      writes that command, ``materialize_launch_script`` the script); ``get_job_body`` merges
      ``container_kwargs`` into the trainer after it, so the entry route sets ``container_kwargs['command']``
      to the entry with that command as its arguments. Without a PVC the command itself runs in exec form
      and gets the signal.
    * Preemption: a pod gets SIGTERM and SIGKILL after ``terminationGracePeriodSeconds`` (30 s by default;
      ``pod_spec_overrides={"terminationGracePeriodSeconds": N}`` sets it).
    """

    label: ClassVar[str] = "KubeflowExecutor"
    task_env_reaches_job: ClassVar[bool] = False
    retries_note: ClassVar[str] = (
        "NeMo-Run's KubeflowExecutor submits a Kubeflow Trainer v2 TrainJob (trainer.kubeflow.org/v1alpha1) and "
        "does not read executor.retries; a TrainJob has no retry or exit-code field (JobSet failurePolicy and the "
        "trainer Job's backoffLimit / podFailurePolicy come from the ClusterTrainingRuntime named by runtime_ref), "
        "and PyTorchJob's restartPolicy: ExitCode is the Training Operator v1 API, which NeMo-Run does not submit. "
        "Set job retries in the runtime, with a podFailurePolicy rule FailJob onExitCodes In [93] so that NVRx's "
        "no-restart exit stays final"
    )
    job_restarts: ClassVar[str] = (
        "the ClusterTrainingRuntime named by runtime_ref (JobSet failurePolicy.maxRestarts, the trainer Job's "
        "backoffLimit and podFailurePolicy), not the TrainJob NeMo-Run submits; a podFailurePolicy rule "
        "{action: FailJob, onExitCodes: {operator: In, values: [93]}} keeps a crash loop from being retried"
    )
    entry_route: ClassVar[bool] = True
    preemption_note: ClassVar[str] = (
        "a pod gets SIGTERM, then SIGKILL after terminationGracePeriodSeconds (Kubernetes default 30 s; "
        "pod_spec_overrides={'terminationGracePeriodSeconds': N} sets it)"
    )
    default_grace_s: ClassVar[float | None] = KUBERNETES_DEFAULT_GRACE_S

    def grace_period_s(self, plugin: str = "nemo-resiliency") -> float | None:
        return self.grace_setting(
            self.executor.pod_spec_overrides,
            "terminationGracePeriodSeconds",
            "executor.pod_spec_overrides['terminationGracePeriodSeconds']",
            plugin=plugin,
        )

    @property
    def pid1_launch_script(self) -> bool:  # type: ignore[override]
        """With a PVC the container runs NeMo-Run's ``launch.sh`` through bash; without one, the command itself."""
        return bool(self.executor.workdir_pvc)

    def install_entry(self, *, plugin: str) -> str:
        launch = self.entry_launch_path(self.executor.code_dir, "launch.sh", "executor.workdir_pvc_path", plugin=plugin)
        command = entry_argv(["/bin/bash", launch])
        self.set_command_once(
            self.executor.container_kwargs, {"command": command}, "executor.container_kwargs", plugin=plugin
        )
        return "the trainer's command (executor.container_kwargs['command'])"

    def check_fault_tolerance(self, plugin: str) -> None:
        if not self.executor.workdir_pvc:
            raise ResiliencyConfigError(
                plugin,
                "executor.workdir_pvc",
                None,
                "a PersistentVolumeClaim name on KubeflowExecutor",
                detail=(
                    "without workdir_pvc NeMo-Run ships nothing to the pods (no job directory, so no config for "
                    "ft_launcher's section timeouts) and runs the command without a shell, so '$PET_NODE_RANK' "
                    "stays literal on several nodes. Set workdir_pvc (NeMo-Run copies the job directory there)"
                ),
            )

    def configs_dir(self) -> str:
        return f"{self.executor.code_dir.rstrip('/')}/configs"
