"""LocalExecutor: the job runs on this machine, as child processes of the submitting one."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from nemo_run.config import get_nemorun_home

from nemo_resiliency_plugins.core.executors.base import ExecutorRules


def store_here(name: str, content: str) -> str:
    """Write ``content`` on this machine, content-addressed under ``$NEMORUN_HOME/resiliency/`` (immutable, so
    re-runs and dry runs, which delete the experiment directory, cannot invalidate it); return its path."""
    digest = hashlib.sha256(content.encode()).hexdigest()[:12]
    directory = Path(get_nemorun_home()) / "resiliency"
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{digest}-{name}"
    if not path.exists() or path.read_text() != content:
        tmp = path.with_suffix(path.suffix + f".tmp{os.getpid()}")
        tmp.write_text(content)
        os.replace(tmp, path)
    return str(path)


@dataclass(kw_only=True)
class LocalRules(ExecutorRules):
    """``run.LocalExecutor``: env goes to the processes directly (no shell), the job is one node, and
    ``executor.retries`` is stored but nothing resubmits a local job (the plugin keeps setting it, as before,
    so a saved experiment shows the user's intent). A file is written here, content-addressed under
    ``$NEMORUN_HOME/resiliency/`` (immutable, so re-runs and dry runs, which delete the experiment directory,
    cannot invalidate it)."""

    label: ClassVar[str] = "LocalExecutor"
    ships_files: ClassVar[bool] = True
    env_in_shell: ClassVar[bool] = False
    honours_retries: ClassVar[bool] = True
    runs_here: ClassVar[bool] = True
    preemption_note: ClassVar[str] = "a local job gets the signal only if you send it (kill -TERM)"
    job_restarts: ClassVar[str] = "nothing resubmits a local job; run it again to resume from the last checkpoint"

    def group_rank(self) -> str | None:
        return "0"  # one node, whatever executor.nodes says: NeMo-Run starts everything on this host

    def deliver_file(self, name: str, content: str, *, plugin: str) -> str:
        return store_here(name, content)

    def deliver_ft_config(self, content: str, *, plugin: str) -> str:
        return self.deliver_file("ft_launcher.yaml", content, plugin=plugin)

    def job_dir_in_job(self) -> str | None:
        return self.executor.job_dir or None  # assigned by the Experiment before any plugin's setup
