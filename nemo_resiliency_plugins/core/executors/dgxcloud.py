"""DGXCloudExecutor: a Run:ai distributed workload on DGX Cloud (Kubernetes), job directory on a PVC."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import ClassVar

from nemo_resiliency_plugins.core.entry_command import entry_shell
from nemo_resiliency_plugins.core.executors.base import ExecutorRules


@dataclass(kw_only=True)
class DGXCloudRules(ExecutorRules):
    """``run.DGXCloudExecutor`` (``core/execution/dgxcloud.py``, ``templates/dgxc.sh.j2``, NeMo-Run 0.11.1).

    * Env: ``torchrun_job.sh`` exports ``executor.env_vars`` and ``Script.env`` as ``export KEY=value``,
      unquoted: a plugin's value must be a shell word.
    * Files: ``move_data`` copies the whole ``job_dir`` to ``pvc_job_dir``; the section timeouts ride in the
      launcher, read from ``<pvc_job_dir>/configs/<job>_executor.yaml``.
    * Restarts: NeMo-Run drops ``--max-restarts`` on DGX Cloud (warning "max_restarts is ignored"), and
      ``PET_MAX_RESTARTS`` (ft_launcher's env fallback, which the plugin always sets) carries it.
    * ``GROUP_RANK``: the template exports it per node (from the host name) after the env vars, so the
      plugin leaves it alone.
    * Retries: only exported as ``TORCHX_MAX_RETRIES``; nothing resubmits a failed workload.
    * First process: the workload's ``command`` is ``/bin/bash <pvc_job_dir>/launch_script.sh``
      (``create_training_job``), and ``custom_spec`` is merged into the spec after it, so a ``command`` and
      ``args`` there replace it. The entry route uses the form NeMo-Run's own data mover sends Run:ai
      (``"command": "sh -c"`` with the script single-quoted in ``args``): ``sh`` execs the entry, which runs
      NeMo-Run's launch script as its child.
    """

    label: ClassVar[str] = "DGXCloudExecutor"
    sets_group_rank: ClassVar[bool] = True
    retries_note: ClassVar[str] = (
        "NeMo-Run's DGXCloudExecutor only exports TORCHX_MAX_RETRIES: the Run:ai workload it posts "
        "(create_training_job) has no retry or exit-code setting of NeMo-Run's, so nothing resubmits a failed "
        "workload and nothing could keep NVRx's no-restart exit (93) from being retried"
    )
    job_restarts: ClassVar[str] = (
        "nothing: a failed or stopped workload stays failed; submit the experiment again to resume from the last "
        "checkpoint. In-job restarts (num_in_job_restarts) still apply"
    )
    pid1_launch_script: ClassVar[bool] = True
    entry_route: ClassVar[bool] = True
    preemption_note: ClassVar[str] = (
        "Run:ai stops a pod with SIGTERM and SIGKILLs it after Kubernetes' terminationGracePeriodSeconds "
        "(30 s by default; custom_spec={'terminationGracePeriodSeconds': N} sets it)"
    )
    default_grace_s: ClassVar[float | None] = 30.0

    def grace_period_s(self, plugin: str = "nemo-resiliency") -> float | None:
        """``custom_spec`` is merged into the Run:ai workload's ``spec`` as it is
        (``DGXCloudExecutor.create_training_job``), and the workload spec carries the pods'
        ``terminationGracePeriodSeconds``: the value there, else Kubernetes' 30 s."""
        return self.grace_setting(
            self.executor.custom_spec,
            "terminationGracePeriodSeconds",
            "executor.custom_spec['terminationGracePeriodSeconds']",
            plugin=plugin,
        )

    def install_entry(self, *, plugin: str) -> str:
        launch = self.entry_launch_path(
            self.executor.pvc_job_dir, "launch_script.sh", "executor.pvc_job_dir", plugin=plugin
        )
        line = entry_shell(f"/bin/bash {launch}")
        ours = {"command": "sh -c", "args": f"'{line}'"}
        self.set_command_once(self.executor.custom_spec, ours, "executor.custom_spec", plugin=plugin)
        return "the workload's command (executor.custom_spec['command'] and ['args'])"

    def configs_dir(self) -> str:
        return os.path.join(self.executor.pvc_job_dir, "configs")
