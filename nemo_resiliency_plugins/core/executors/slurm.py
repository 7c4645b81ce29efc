"""SlurmExecutor: an sbatch script, written by NeMo-Run, run on the cluster."""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from nemo_resiliency_plugins.core.executors.base import ExecutorRules
from nemo_resiliency_plugins.core.slurm_script import check_setup_lines
from nemo_resiliency_plugins.core.validation import SHELL_WORD_TEXT, is_shell_word
from nemo_resiliency_plugins.errors import ResiliencyConfigError

HEREDOC_MARKER = "NRP_FILE_EOF"
#: The rendezvous ports a multi-node job gets (:meth:`SlurmRules.own_rendezvous_port`): 20000-28999.
RDZV_PORT_BASE, RDZV_PORT_SPAN = 20000, 9000
#: How many of the job's nodes are hot spares (read by ``sbatch/spare_nodes.sh``).
SPARE_NODES_ENV = "NRP_SPARE_NODES"
#: Seconds a spare job's step may outlive its launchers' exit lines before the block stops it (a frozen node's task).
SPARE_GRACE_ENV = "NRP_SPARE_FINISH_GRACE"
#: Seconds a launcher waits for a rendezvous round to fill (NVRx's ``join_timeout``, 600 s when unset): when spares
#: ran out, the time the job waits before it ends and the requeue path takes over. It also bounds how far apart the
#: launchers may start for the first round.
SPARE_JOIN_TIMEOUT_ENV = "NRP_SPARE_JOIN_TIMEOUT"
#: The spare block's settings in ``executor.env_vars``: name -> (largest value, what it is).
SPARE_SECONDS_ENV: dict[str, tuple[int, str]] = {
    SPARE_GRACE_ENV: (
        999999,
        "how long the step may outlive its launchers' exit lines before a frozen node's task is stopped",
    ),
    SPARE_JOIN_TIMEOUT_ENV: (
        86400,
        "how long the launchers wait for a rendezvous round to fill (NVRx's join_timeout) before the job ends",
    ),
}

logger = logging.getLogger(__name__)

#: srun's short options that take a value (required or optional: the rest of the word is that value), from srun's
#: getopt string; ``K`` (--kill-on-bad-exit) and ``W`` (--wait) are the two the spare block sets.
_SRUN_SHORT_VALUE = frozenset("AbBcCdDeEgGiIJkKLmMnNopqStTwWx")
_SRUN_SHORT_REQUIRED = frozenset("AbBcCdDeEgGiJLmMnNopqStTwWx")
_STEP_LONG = ("kill-on-bad-exit", "wait")


def srun_step_flags(srun_args: Any, *, plugin: str) -> list[str]:
    """The words of ``srun_args`` that set srun's ``--kill-on-bad-exit`` or ``--wait``, parsed as srun does.

    NeMo-Run writes each element verbatim onto the srun line, so an element with spaces is several words: it is
    split as the shell would (a quote the shell cannot close is refused). Long options in every form srun's
    getopt_long takes (``--wait=5``, ``--wait 5``, an unambiguous prefix such as ``--kill``), short ones alone, with
    their value joined (``-K1``, ``-W30``) or inside a cluster of flags (``-lK``)."""
    import shlex

    words: list[str] = []
    for element in srun_args:
        try:
            words += shlex.split(str(element))
        except ValueError as err:
            raise ResiliencyConfigError(
                plugin,
                "executor.srun_args",
                element,
                "srun options the shell can split into words",
                detail=f"NeMo-Run writes each element onto the srun line as it is; shlex cannot split it ({err})",
            ) from None
    found: list[str] = []
    takes_value = False
    for word in words:
        if takes_value:  # the value of the previous short option (``-W 30``, ``-p K80``)
            takes_value = False
            continue
        if word.startswith("--") and len(word) > 2:
            name = word[2:].split("=", 1)[0]
            if len(name) >= 3 and any(long.startswith(name) for long in _STEP_LONG):
                found.append(word)
        elif word.startswith("-") and len(word) > 1:
            for i, char in enumerate(word[1:]):
                if char in "KW":
                    found.append(word)
                    break
                if char in _SRUN_SHORT_VALUE:  # the rest of the word is this option's value
                    takes_value = char in _SRUN_SHORT_REQUIRED and i == len(word) - 2
                    break
    return found


@dataclass(kw_only=True)
class SlurmRules(ExecutorRules):
    """``run.SlurmExecutor``: every env var becomes ``export NAME=value`` in the sbatch script, unquoted;
    ``retries`` is honoured (NeMo-Run's templates requeue; the plugins' guard in :mod:`slurm_script` fixes
    their count); NVRx takes the node's rank from ``SLURM_PROCID``; a file reaches the job through a quoted
    heredoc the sbatch script writes into the job directory before ``srun``."""

    label: ClassVar[str] = "SlurmExecutor"
    ships_files: ClassVar[bool] = True
    honours_retries: ClassVar[bool] = True
    infra_rank_env: ClassVar[str | None] = "SLURM_PROCID"
    # read by the requeue guard's srun function (sbatch/requeue_guard.sh), which sets torch elastic's template
    rank_log_prefix_env: ClassVar[str | None] = "NRP_RANK_LOG_PREFIX"
    preemption_note: ClassVar[str] = "PreemptionPlugin asks Slurm for the signal before the time limit"
    job_restarts: ClassVar[str] = (
        "NeMo-Run's requeue (executor.retries = num_job_retries_on_failure), guarded by this package: a run "
        "that ends with NVRx's no-restart exit (93) is not requeued, and the failed node can be excluded"
    )

    def deliver_file(self, name: str, content: str, *, plugin: str) -> str:
        executor = self.executor
        filename = f"{hashlib.sha256(content.encode()).hexdigest()[:12]}-{name}"
        host_dir = os.path.join(executor.tunnel.job_dir, Path(executor.job_dir).name)
        host_path = os.path.join(host_dir, filename)
        self._check_job_path(host_path, plugin=plugin)
        if any(line.strip() == HEREDOC_MARKER for line in content.splitlines()):
            raise ResiliencyConfigError(plugin, None, detail="internal: file content contains the heredoc marker")
        block = (
            f"# {plugin}: write {name} for the job (quoted heredoc: nothing below is expanded)\n"
            f"mkdir -p '{host_dir}'\n"
            f"cat > '{host_path}' <<'{HEREDOC_MARKER}'\n{content.rstrip(chr(10))}\n{HEREDOC_MARKER}"
        )
        check_setup_lines(executor, plugin=plugin)
        existing = executor.setup_lines or ""
        if block not in existing:
            executor.setup_lines = (existing.rstrip("\n") + "\n" if existing else "") + block
        if executor.container_image:
            return f"/nemo_run/{filename}"
        return host_path

    def deliver_ft_config(self, content: str, *, plugin: str) -> str:
        return self.deliver_file("ft_launcher.yaml", content, plugin=plugin)

    def own_rendezvous_port(self, launcher: Any, *, plugin: str) -> None:
        """On several nodes NeMo-Run's Slurm launch is ``ft_launcher --rdzv-endpoint $head_node_ip:<rdzv_port>``
        with one port for every job (29500). Two jobs whose first node is the same host (nodes shared between
        jobs; every job of a one-host test cluster) then share one rendezvous store: torch's c10d backend falls
        back to a client of whichever launcher bound the port first, and when that job's launchers exit, the other
        job's launchers fail with DistNetworkError (``benchmarks/rendezvous_port``). A port left at NeMo-Run's
        default is replaced by one derived from the job's directory (experiment id and task): stable for the saved
        experiment, different between jobs, in 20000-28999 (below Linux's ephemeral range, so no outgoing
        connection holds it). A port the user chose is kept."""
        if self.nodes() <= 1:
            return  # NeMo-Run's one-node launch uses localhost:0 (a free port of its own)
        default = {f.name: f.default for f in dataclasses.fields(type(launcher))}.get("rdzv_port")
        if launcher.rdzv_port != default:
            return
        digest = hashlib.sha256(str(self.executor.job_dir).encode()).hexdigest()
        launcher.rdzv_port = RDZV_PORT_BASE + int(digest, 16) % RDZV_PORT_SPAN
        logger.info(
            "%s: ft_launcher's rendezvous port is %d, the job's own (NeMo-Run's default %s would be shared by every "
            "multi-node job whose first node is this job's; set executor.launcher.rdzv_port to choose one)",
            plugin,
            launcher.rdzv_port,
            default,
        )

    def add_spare_nodes(self, spares: int, *, plugin: str, field: str, task_env: dict | None = None) -> None:
        """The allocation grows by ``spares`` nodes; srun keeps the step when one node's task dies
        (``--kill-on-bad-exit=0 --wait=0`` after NeMo-Run's ``--kill-on-bad-exit=1 --wait=60``: the last flag wins);
        ``NRP_SPARE_NODES`` tells the sbatch block (``sbatch/spare_nodes.sh``) how many of the nodes are spares, so
        that ft_launcher gets ``--nnodes <active>:<all>``. A saved experiment's executor, already grown, is left
        as it is (the env var says so). The ``NRP_SPARE_*`` settings are checked wherever the user set them,
        ``executor.env_vars`` or the task's ``run.Script(env=...)`` (``task_env``), by the same rule."""
        executor = self.executor
        env = executor.env_vars
        sources = [("executor.env_vars", env), ("task.env", task_env or {})]
        for where, values in sources:
            for name, (upper, what) in SPARE_SECONDS_ENV.items():
                value = values.get(name)
                # The block compares them in bash arithmetic or hands them to NVRx: anything but whole seconds would
                # keep a frozen node's step for good, or fail every launcher's first rendezvous.
                if value is not None and not (re.fullmatch(r"[1-9][0-9]{0,5}", str(value)) and int(value) <= upper):
                    raise ResiliencyConfigError(
                        plugin, f"{where}[{name!r}]", value, f"a whole number of seconds from 1 to {upper}",
                        detail=what,
                    )  # fmt: skip
        for name in (SPARE_NODES_ENV, *SPARE_SECONDS_ENV):
            if task_env and name in task_env and str(env.get(name)) != str(task_env[name]):
                raise ResiliencyConfigError(
                    plugin,
                    f"task.env[{name!r}]",
                    task_env[name],
                    f"unset: {plugin}.{field} sets it"
                    if name == SPARE_NODES_ENV
                    else f"unset, or the value {name} has in executor.env_vars (set it there)",
                    detail=(
                        "the spare-nodes block runs in the sbatch script, before srun, and reads executor.env_vars; "
                        "a run.Script(env=...) value reaches only the ranks"
                        + (f", and disagrees with executor.env_vars ({env[name]!r})" if name in env else "")
                    ),
                )
        if env.get(SPARE_NODES_ENV) == str(spares):
            return
        if SPARE_NODES_ENV in env:
            raise ResiliencyConfigError(
                plugin,
                field,
                spares,
                f"the executor's own count, {env[SPARE_NODES_ENV]}",
                detail=f"the executor already holds {env[SPARE_NODES_ENV]} spare node(s) ({SPARE_NODES_ENV}); set one",
            )
        user = srun_step_flags(executor.srun_args or [], plugin=plugin)
        if user:
            raise ResiliencyConfigError(
                plugin,
                field,
                spares,
                "0 while executor.srun_args sets --kill-on-bad-exit or --wait",
                detail=(
                    f"executor.srun_args has {' '.join(map(str, user))}; a spare node needs the step to outlive a lost "
                    "node's task (the plugin adds --kill-on-bad-exit=0 --wait=0): remove them"
                ),
            )
        executor.srun_args = [*(executor.srun_args or []), "--kill-on-bad-exit=0", "--wait=0"]
        active = self.nodes()
        executor.nodes = active + spares
        env[SPARE_NODES_ENV] = str(spares)
        logger.info(
            "%s: %d node(s) train, %d spare(s) wait: the allocation has %d nodes, ft_launcher gets --nnodes %d:%d, "
            "srun keeps the step when one node dies; when no spare is left, a rendezvous round waits %s for a node "
            "before the job ends and the requeue path takes over",
            plugin,
            active,
            spares,
            active + spares,
            active,
            active + spares,
            f"{env[SPARE_JOIN_TIMEOUT_ENV]} s ({SPARE_JOIN_TIMEOUT_ENV})"
            if SPARE_JOIN_TIMEOUT_ENV in env
            else f"NVRx's default 600 s (set {SPARE_JOIN_TIMEOUT_ENV} to change it)",
        )

    def job_dir_in_job(self) -> str | None:
        """The job's folder under the tunnel's job_dir (where NeMo-Run writes the sbatch script and the logs), or
        its mount point ``/nemo_run`` in a container."""
        executor = self.executor
        if executor.container_image:
            return "/nemo_run"
        return os.path.join(executor.tunnel.job_dir, Path(executor.job_dir).name)

    def _check_job_path(self, host_path: str, *, plugin: str) -> None:
        """The job directory goes into ``export PET_FT_CFG_PATH=<path>`` (NeMo-Run does not quote it): it must
        be a plain shell word. When it is not, name the part to rename: the tunnel's ``job_dir``, the
        experiment title, or the task's name in ``exp.add(..., name=...)``."""
        if is_shell_word(host_path):
            return
        executor = self.executor
        task_name = Path(executor.job_dir).name
        exp_id = os.path.basename(executor.tunnel.job_dir.rstrip("/"))
        title = os.path.basename(os.path.dirname(executor.tunnel.job_dir.rstrip("/")))
        base = os.path.dirname(os.path.dirname(executor.tunnel.job_dir.rstrip("/")))
        parts = (
            ("task name", task_name, "the task's name (exp.add(..., name=...))"),
            ("experiment title", title, "the experiment's title (run.Experiment(title))"),
            ("experiment id", exp_id, "the experiment's id"),
            ("executor.tunnel.job_dir", base, "the tunnel's job_dir"),
        )
        field, part, what = next(
            (p for p in parts if not is_shell_word(p[1])), ("executor.tunnel.job_dir", host_path, "the job directory")
        )
        raise ResiliencyConfigError(
            plugin,
            field,
            part,
            f"a name made of {SHELL_WORD_TEXT}",
            detail=(
                f"rename {what}: it is part of the job directory {host_path!r}, which NeMo-Run writes unquoted into "
                "the sbatch script (export PET_FT_CFG_PATH=...)"
            ),
        )
