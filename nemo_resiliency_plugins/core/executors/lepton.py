"""LeptonExecutor: a Lepton batch job; the job directory is copied to shared storage."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import ClassVar

from nemo_resiliency_plugins.core.entry_command import ENTRY_ACTIVE_ENV, entry_shell
from nemo_resiliency_plugins.core.executors.base import ExecutorRules
from nemo_resiliency_plugins.errors import ResiliencyConfigError


@dataclass(kw_only=True)
class LeptonRules(ExecutorRules):
    """``run.LeptonExecutor`` (``core/execution/lepton.py``, NeMo-Run 0.11.1).

    * Env: the job spec's ``envs`` are ``executor.env_vars`` and ``secret_vars`` only: ``Script.env`` is
      dropped (``create_lepton_job``). Values travel in the API request, not through a shell.
    * Files: ``move_data`` copies ``job_dir`` to ``lepton_job_dir``; the section timeouts ride in the
      launcher, read from ``<lepton_job_dir>/configs/<job>_executor.yaml``.
    * More than one node: refused for fault tolerance. NeMo-Run 0.11.1 renders ft_launcher's node rank and
      rendezvous host as ``$$${...}`` with no Lepton macro values (``ft_launcher()`` has no ``lepton``
      branch), so bash puts its own PID there and no two nodes meet.
    * Retries: ignored (the job spec's ``max_failure_retry`` / ``max_job_failure_retry`` stay None).
    * First process: ``/bin/bash -c "bash <lepton_job_dir>/launch_script.sh"``, fixed in ``create_lepton_job``
      (bash runs a lone command in place, so the launch script's bash is the container's init). The script's
      first lines are ``executor.pre_launch_commands``: the entry route puts one there, first, that replaces
      that bash with the entry, which runs the same script again as its child (a variable tells that run to
      go on past the line).
    """

    label: ClassVar[str] = "LeptonExecutor"
    env_in_shell: ClassVar[bool] = False
    task_env_reaches_job: ClassVar[bool] = False
    retries_note: ClassVar[str] = (
        "NeMo-Run's LeptonExecutor does not pass executor.retries to the Lepton job: create_lepton_job sends "
        "max_failure_retry=None and max_job_failure_retry=None, with no way to set them"
    )
    job_restarts: ClassVar[str] = (
        "nothing: NeMo-Run sends the Lepton job without failure retries; submit the experiment again to resume "
        "from the last checkpoint. In-job restarts (num_in_job_restarts) still apply"
    )
    pid1_launch_script: ClassVar[bool] = True
    entry_route: ClassVar[bool] = True
    preemption_note: ClassVar[str] = (
        "a preemptible Lepton job (can_be_preempted=True) is stopped with SIGTERM, then killed after the "
        "platform's grace period"
    )

    def check_fault_tolerance(self, plugin: str) -> None:
        if self.nodes() > 1:
            raise ResiliencyConfigError(
                plugin,
                "executor.nodes",
                self.nodes(),
                "1 on LeptonExecutor",
                detail=(
                    "NeMo-Run 0.11.1 renders ft_launcher's --node-rank and --rdzv-endpoint on Lepton as '$$${...}' "
                    "without Lepton's macro values, so bash substitutes its PID and the nodes never rendezvous. "
                    "Use one node, or torchrun without fault tolerance on several, until NeMo-Run fixes it"
                ),
            )

    def install_entry(self, *, plugin: str) -> str:
        line = f'[ -n "${{{ENTRY_ACTIVE_ENV}:-}}" ] || {ENTRY_ACTIVE_ENV}=1 ' + entry_shell('/bin/bash "$0"')
        commands = self.executor.pre_launch_commands
        if line not in commands:
            commands.insert(0, line)  # first: the user's own pre-launch commands run once, under the entry
        return "the launch script's first pre-launch command (executor.pre_launch_commands[0])"

    def configs_dir(self) -> str:
        return os.path.join(self.executor.lepton_job_dir, "configs")
