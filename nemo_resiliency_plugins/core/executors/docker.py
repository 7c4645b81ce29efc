"""DockerExecutor: one container per job on this machine's Docker daemon (NeMo-Run's docker-py scheduler)."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from nemo_resiliency_plugins.core.entry_command import INTERPRETER, entry_source
from nemo_resiliency_plugins.core.executors.base import ExecutorRules
from nemo_resiliency_plugins.core.executors.local import store_here
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
      20.10): the job never starts. ``additional_kwargs`` cannot lift it (docker-py sets ``auto_remove`` after
      them), and Docker's ``on-failure`` policy would restart NVRx's no-restart exit (93) too. In-job restarts
      (``--max-restarts``) work; after a stop or a failure, running the experiment again resumes from the last
      checkpoint.
    * Job state: NeMo-Run's wait can report a finished job as never finished (:attr:`state_note`,
      ``tools/job_outcome.py``). The container cannot be kept for it: NeMo-Run passes ``remove=True`` itself,
      and docker-py turns it into ``auto_remove`` over anything ``additional_kwargs`` says.
    * Files of this package: written on this machine (content-addressed, like LocalExecutor's) and
      bind-mounted read-only at ``/nemo_resiliency/<file>`` (``executor.volumes``): the daemon runs here,
      as NeMo-Run's own ``/nemo_run`` bind mount of the job directory already assumes.
    * First process: ``additional_kwargs["entrypoint"]`` (docker-py), with NeMo-Run's ``bash -c ...`` as its
      arguments. It replaces the image's ENTRYPOINT; an entrypoint the user set there runs first and must
      ``exec "$@"`` (as NGC images' ``nvidia_entrypoint.sh`` does).
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
    # deliver_file has a route (below), used for the container entry; ships_files stays False so that
    # LocalCheckpointPlugin's per-rank guard is not put on Docker before a Docker test proves it there.
    ships_files: ClassVar[bool] = False
    entry_route: ClassVar[bool] = True
    job_restarts: ClassVar[str] = (
        "nothing restarts the container (NeMo-Run auto-removes it, and Docker refuses a restart policy on such "
        "a container); run the experiment again (exp.reset() + exp.run(), or the same script) to resume from the "
        "last checkpoint. A crash loop ends the container with NVRx's no-restart exit (93)"
    )
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

    def deliver_file(self, name: str, content: str, *, plugin: str) -> str:
        host = store_here(name, content)
        if _VOLUME_PATH.fullmatch(host) is None:
            raise ResiliencyConfigError(
                plugin,
                "NEMORUN_HOME",
                str(Path(host).parent.parent),
                "a path without ':' or ','",
                detail=f"{name} is bind-mounted into the container from there ('<host>:<container>:ro')",
            )
        inside = f"{CONTAINER_DIR}/{Path(host).name}"
        volume = f"{host}:{inside}:ro"
        if volume not in self.executor.volumes:
            self.executor.volumes.append(volume)
        return inside

    def install_entry(self, *, plugin: str) -> str:
        """docker-py's ``entrypoint``: ``python3 /nemo_resiliency/container_entry.py``, the file bind-mounted
        read-only from this machine (:meth:`deliver_file`); NeMo-Run's ``bash -c ...`` becomes its arguments."""
        path = self.deliver_file(ENTRY_FILE, entry_source(), plugin=plugin)
        self._set_entrypoint([INTERPRETER, path], plugin=plugin)
        return path

    def _set_entrypoint(self, command: list[str], *, plugin: str) -> None:
        kwargs = self.executor.additional_kwargs
        current = kwargs.get("entrypoint")
        if current is None:
            kwargs["entrypoint"] = list(command)
            return
        if isinstance(current, str):
            try:
                current = shlex.split(current)  # docker-py splits a string entrypoint the same way
            except ValueError as err:  # a stray quote: shlex's "No closing quotation"
                raise ResiliencyConfigError(
                    plugin,
                    "executor.additional_kwargs['entrypoint']",
                    current,
                    "a list of strings, or a string the shell can split into words",
                    detail=f"DockerExecutor: shlex cannot split it ({err})",
                ) from None
        if not isinstance(current, (list, tuple)) or not all(isinstance(part, str) for part in current):
            raise ResiliencyConfigError(
                plugin, "executor.additional_kwargs['entrypoint']", current, "a list of strings or a string"
            )
        current = list(current)
        if current[-len(command) :] != list(command):
            current += command  # the user's entrypoint runs first and execs ours (it must exec "$@")
        kwargs["entrypoint"] = current

    def configs_dir(self) -> str:
        return "/nemo_run/configs"


#: Where files of this package appear in the container.
CONTAINER_DIR = "/nemo_resiliency"
#: The name the container entry is shipped under.
ENTRY_FILE = "container_entry.py"
#: A host path usable in a ``<host>:<container>:ro`` volume spec (full match).
_VOLUME_PATH = re.compile(r"/[^:,\n]*")
