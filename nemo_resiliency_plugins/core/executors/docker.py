"""DockerExecutor: one container per job on this machine's Docker daemon (NeMo-Run's docker-py scheduler)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from nemo_resiliency_plugins.core.executors.base import ExecutorRules
from nemo_resiliency_plugins.errors import ResiliencyConfigError


@dataclass(kw_only=True)
class DockerRules(ExecutorRules):
    """``run.DockerExecutor`` (``core/execution/docker.py``, NeMo-Run 0.11.1).

    * Env: the container gets ``executor.env_vars | role.env`` through docker-py (no shell), ``Script.env``
      included.
    * Files: ``job_dir`` is bind-mounted at ``/nemo_run`` (``schedule()``), so NeMo-Run's
      ``configs/<job>_executor.yaml`` is ``/nemo_run/configs/<job>_executor.yaml`` in the container: the
      section timeouts ride in the launcher (:class:`~.base.FaultToleranceWithSections`). There is no
      pre-launch hook.
    * One node (``nnodes()`` is always 1): ``GROUP_RANK=0`` is right.
    * Retries: refused. ``retries > 0`` sets a restart policy next to ``remove=True``, and Docker refuses to
      create the container ("can't create 'AutoRemove' container with restart policy", measured on Docker
      20.10): the job never starts. In-job restarts (``--max-restarts``) work.
    * Job state: NeMo-Run's wait can report a finished job as never finished (:attr:`state_note`,
      ``tools/job_outcome.py``). The container cannot be kept for it: NeMo-Run passes ``remove=True`` itself,
      and docker-py turns it into ``auto_remove`` over anything ``additional_kwargs`` says.
    * Job groups: the group's other containers get copies of the executor made before plugins run
      (``DockerExecutor.merge``) and its YAML is named ``<group>-<i>``: refused for fault tolerance.
    """

    label: ClassVar[str] = "DockerExecutor"
    env_in_shell: ClassVar[bool] = False
    retries_note: ClassVar[str] = (
        "NeMo-Run's DockerExecutor with retries > 0 cannot create its container (restart policy next to "
        "auto-remove: Docker refuses it), so job retries are never set on Docker; in-job restarts "
        "(num_in_job_restarts) still apply"
    )
    retries_break_job: ClassVar[bool] = True
    pid1_launch_script: ClassVar[bool] = True
    preemption_note: ClassVar[str] = (
        "NeMo-Run cancels a Docker job with 'docker rm --force' (SIGKILL, no save); 'docker stop' gives the "
        "container SIGTERM and 10 s before SIGKILL (docker-py's stop_timeout in additional_kwargs changes it)"
    )
    default_grace_s: ClassVar[float | None] = 10.0
    state_note: ClassVar[str] = (
        "NeMo-Run's DockerExecutor removes the container as it exits, and its wait can lose that race (docker-py: "
        "'404 ... No such container'; the job then stays SUBMITTED): the container's own exit code is in "
        "<job_dir>/status_<container>.out, and `nemo-resiliency doctor <experiment dir>` reads it"
    )

    def grace_period_s(self, plugin: str = "nemo-resiliency") -> float | None:
        return self.grace_setting(
            self.executor.additional_kwargs, "stop_timeout", "executor.additional_kwargs['stop_timeout']", plugin=plugin
        )

    def check_fault_tolerance(self, plugin: str) -> None:
        if getattr(self.executor, "run_as_group", False):
            raise ResiliencyConfigError(
                plugin,
                "executor",
                "DockerExecutor job group",
                detail=(
                    "in a NeMo-Run job group the other containers get copies of the DockerExecutor made before "
                    "plugins run, so ft_launcher's config cannot reach them; add each task with its own exp.add"
                ),
            )

    def configs_dir(self) -> str:
        return "/nemo_run/configs"
