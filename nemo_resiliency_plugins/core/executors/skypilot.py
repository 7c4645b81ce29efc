"""SkypilotExecutor and SkypilotJobsExecutor: a SkyPilot cluster task, or a SkyPilot managed job."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from nemo_resiliency_plugins.core.executors.base import ExecutorRules


@dataclass(kw_only=True)
class SkypilotRules(ExecutorRules):
    """``run.SkypilotExecutor`` / ``run.SkypilotJobsExecutor`` (``core/execution/skypilot*.py``, NeMo-Run
    0.11.1, SkyPilot >= 0.12).

    * Env: the Sky task's ``envs`` are ``executor.env_vars`` and ``Script.env``; SkyPilot exports them in the
      run script, so a plugin's value is kept to a shell word.
    * Files: ``file_mounts`` always maps ``/nemo_run`` to ``job_dir`` (re-synced at every launch); the
      section timeouts ride in the launcher, read from ``/nemo_run/configs/<job>_executor.yaml``. Not the
      ``setup`` hook: ``SkypilotExecutor.launch`` passes ``fast=True`` and SkyPilot skips ``setup`` on a
      cluster that is already up.
    * Several nodes: ft_launcher gets ``--node-rank $SKYPILOT_NODE_RANK``; ``GROUP_RANK`` is left unset so
      NVRx assigns infrastructure ranks itself (one value in the env would be the same on every node).
    * Retries: neither executor reads ``executor.retries`` (managed jobs recover from preemption with
      SkyPilot's own ``job_recovery``).
    """

    label: ClassVar[str] = "SkypilotExecutor"
    retries_note: ClassVar[str] = (
        "NeMo-Run's Skypilot executors do not read executor.retries, and a task on a SkyPilot cluster is not "
        "recovered by SkyPilot at all"
    )
    job_restarts: ClassVar[str] = (
        "nothing: a task on a SkyPilot cluster is not recovered; launch it again to resume from the last checkpoint"
    )
    preemption_note: ClassVar[str] = (
        "a preempted spot VM gets the cloud's notice (e.g. 2 minutes on AWS, 30 s on GCP) and is then stopped"
    )

    def configs_dir(self) -> str:
        return "/nemo_run/configs"


@dataclass(kw_only=True)
class SkypilotJobsRules(SkypilotRules):
    """A SkyPilot managed job: SkyPilot's jobs controller relaunches it after a preemption (its default
    ``job_recovery``), never after the program fails. NeMo-Run's ``to_resources`` builds the task's resources
    from a fixed list of executor fields, without ``job_recovery``, so ``max_restarts_on_errors`` stays 0; and
    SkyPilot's ``recover_on_exit_codes`` can only add exit codes to recover from, never keep one (NVRx's 93)
    from being retried under ``max_restarts_on_errors``."""

    label: ClassVar[str] = "SkypilotJobsExecutor"
    retries_note: ClassVar[str] = (
        "NeMo-Run's SkypilotJobsExecutor builds the managed job's resources without job_recovery, so SkyPilot's "
        "max_restarts_on_errors stays 0 (a failed program is not relaunched); SkyPilot's own job_recovery could "
        "not keep NVRx's no-restart exit (93) from being retried either (recover_on_exit_codes only adds codes)"
    )
    job_restarts: ClassVar[str] = (
        "SkyPilot's jobs controller relaunches a preempted managed job (default job_recovery) and it resumes from "
        "the last checkpoint; a failed program, a crash loop's exit 93 included, is not relaunched"
    )
