"""LocalCheckpointPlugin: frequent checkpoints to node-local storage, optionally replicated, in one line.

    LocalCheckpointPlugin(non_persistent_local_ckpt_dir="/local/scratch/ckpt", non_persistent_save_interval=20)

Sets Megatron Bridge's ``checkpoint.non_persistent_ckpt_type="local"`` and the fields that go with it. What
Megatron Bridge 0.6.2 then does (``training/checkpointing.py``, ``training/train.py``, ``training/setup.py``):

* ``init_checkpointing_context`` builds NVRx's ``LocalCheckpointManager(non_persistent_local_ckpt_dir)`` and,
  with ``replication=True``, NVRx's ``CliqueReplicationStrategy.from_replication_params(replication_jump,
  replication_factor)``. Each rank writes ``<dir>/<rank>/iter_<N>_<rank>_local.pt`` (write to ``.dirty``,
  then rename), plus, with replication, the shards of the other ranks of its clique.
* Every ``non_persistent_save_interval`` steps that are not a persistent ``save_interval`` step, each rank saves
  its part of the state (an ``MCoreTensorAwareStateDict``, ``non_persistent_local_ckpt_algo``) to that
  directory: no shared-filesystem traffic, no global metadata. Only when ``checkpoint.save`` is set
  (``train.py`` gates every save on it).
* At start, NVRx's ``find_latest`` all-gathers what each rank holds and picks the newest iteration that every
  rank can get (from its own file or, with replication, from a clique peer). It is loaded when it is at
  least as new as the newest persistent checkpoint in ``checkpoint.load``; otherwise the persistent one is.
  A rank whose directory is gone receives its shard from a peer (``retrieve_plan``/``retrieve_execute``).

What local checkpoints do *not* give, and how the plugin makes up for it (each a :class:`ResiliencyConfigError`
naming the settings involved):

* They live on the nodes. A job requeued onto other nodes (Slurm preemption requeue, FT job retries, a
  resubmission) sees none of them and resumes from the newest *persistent* checkpoint, or from scratch if
  there is none. So the plugin refuses a task without a persistent schedule: ``checkpoint.save`` and
  ``checkpoint.save_interval`` (larger than ``non_persistent_save_interval``); ``checkpoint.load`` (Megatron
  Bridge reads persistent checkpoints only from ``load``; local ones are found without it) is wired to
  ``checkpoint.save`` where unset and a different one refused (``autoresume.py``, shared with the other
  restarting plugins).
* Only the preemption-signal exit always writes a *persistent* checkpoint to ``checkpoint.save`` (provided the
  exit handler is on); a task whose signal path saves nothing (``PreemptionPlugin(enable_exit_handler=False)``)
  is refused with this plugin. The planned exits (``exit_duration_in_mins``, ``exit_interval``, the straggler
  stop) save only when no checkpoint was saved at that step, and Megatron Bridge 0.6.2 counts a local save as
  one (Megatron-Bridge#5922): an exit at a local-save step leaves the newest state on the nodes alone, and a
  requeue onto other nodes resumes from the previous persistent checkpoint. The plugin warns when the task
  combines them and the installed code has the bug (``core/known_bugs.py``).
* Replication protects against a lost node only if the replicas are on other nodes: ``replication_jump`` must be
  a multiple of the ranks per node, ``replication_factor`` at most the number of nodes, and the world size a
  multiple of ``replication_jump * replication_factor`` (NVRx asserts the last). Megatron Bridge passes
  ``replication_jump=None`` straight to NVRx when it is unset, which fails at start: the plugin requires it.
* A local checkpoint that cannot be read makes Megatron Bridge 0.6.2's load raise and the job fail at start, on
  every restart, until the file is removed: it does *not* fall back to the persistent checkpoint by itself
  (seen on Megatron Bridge's real loop on an H200: a truncated ``iter_0000034_0_local.pt`` gave
  ``PytorchStreamReader failed reading zip archive`` on every attempt, persistent step 30 never tried;
  ``benchmarks/results/gpu/2026-12-04-evening/summary.md``). A file whose tensor bytes were damaged is worse:
  ``torch.load`` reads it without complaint. NVRx renames a finished ``.dirty`` file without fsync, so a node
  that crashes can leave either behind. ``fallback_on_unreadable`` closes this: each rank first runs
  :mod:`nemo_resiliency_plugins.job.local_checkpoint_guard`, which CRC-checks the files of ``<dir>/<rank>`` and
  renames the ones that fail to ``<name>.unreadable``; NVRx then no longer offers that iteration from this
  rank, and the job resumes from a replica a peer holds or from the newest persistent checkpoint (never from
  scratch: ``checkpoint.load`` is required). The check reads every byte of the rank's local files once per
  start. It needs a Python ``run.Script`` task (a ``run.Partial`` starts through NeMo-Run's fdl_runner, which
  nothing can be put in front of) and an executor that can ship a file with the job (LocalExecutor,
  SlurmExecutor); elsewhere the default (None) says in the log that it is not applied, and True is refused.
* ``checkpoint.also_save_hf_checkpoint`` is refused (Megatron Bridge's ``finalize()`` does the same).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import nemo_run as run

from nemo_resiliency_plugins.core import autoresume, executor_config, front_program, task_config
from nemo_resiliency_plugins.core.known_bugs import guard_known_bugs
from nemo_resiliency_plugins.core.validation import Checker, KnownKeywords
from nemo_resiliency_plugins.errors import ResiliencyConfigError

logger = logging.getLogger(__name__)

#: Megatron Core's ``non_persistent_local_ckpt_algo`` choices.
LOCAL_ALGOS = ("fully_parallel", "atomic")
#: Megatron Core's default ``replication_factor`` (used only with ``replication=True``).
DEFAULT_REPLICATION_FACTOR = 2

#: The ``checkpoint`` fields the plugin writes, in Megatron Core's order.
CONFIG_FIELDS = (
    "non_persistent_save_interval",
    "non_persistent_ckpt_type",
    "non_persistent_local_ckpt_dir",
    "non_persistent_local_ckpt_algo",
    "replication",
    "replication_jump",
    "replication_factor",
)


#: The plugin's fields that are not Megatron Bridge ``CheckpointConfig`` fields (they never reach the config).
OWN_FIELDS = ("fallback_on_unreadable",)


@dataclass
class LocalCheckpointPluginScriptArgs:
    """What ``script_args_converter_fn`` receives: the ``checkpoint`` values the plugin would set."""

    non_persistent_save_interval: int
    non_persistent_ckpt_type: str
    non_persistent_local_ckpt_dir: str
    non_persistent_local_ckpt_algo: str
    replication: bool
    replication_jump: int | None
    replication_factor: int


@dataclass(kw_only=True)
class LocalCheckpointPlugin(KnownKeywords, run.Plugin):
    """Frequent node-local checkpoints through NVRx (Megatron Bridge ``non_persistent_ckpt_type="local"``).

    Fields are Megatron Bridge's ``CheckpointConfig`` fields of the same name, with its defaults (the first two
    default to None there, which switches the feature off; here they are required):

        non_persistent_local_ckpt_dir: absolute path of a directory on node-local storage (NVMe, ramdisk).
            Each rank writes under ``<dir>/<rank>``; it must hold about 1/ranks-per-node of a checkpoint per
            rank, times ``replication_factor`` with replication, times two while a save replaces the last.
        non_persistent_save_interval: steps between local saves (>= 1), below ``checkpoint.save_interval``.
        non_persistent_local_ckpt_algo: ``"fully_parallel"`` (spread the save over the data-parallel ranks)
            or ``"atomic"``.
        replication: also keep copies of other ranks' shards, so that a lost node can be recovered.
        replication_jump: ``J``: rank ``n``'s replicas live on ranks ``n+J``, ``n+2J``, ... Required with
            replication; use the number of ranks per node so that replicas land on other nodes.
        replication_factor: ``F``: how many ranks (nodes) hold each shard, >= 2; at most the node count.
        fallback_on_unreadable: not a Megatron Bridge field. Before training, each rank sets aside its local
            checkpoint files that fail a CRC check, so the job resumes from a replica or the newest persistent
            checkpoint instead of failing on every restart (or loading damaged weights). None (default): on
            where it can be wired, a log line where it cannot; True: refused where it cannot; False: off
            (Megatron Bridge's own behaviour).
        script_args_converter_fn: for ``run.Script`` tasks whose script does not take Hydra overrides;
            receives :class:`LocalCheckpointPluginScriptArgs`, returns the arguments to append.
    """

    non_persistent_local_ckpt_dir: str | None = None
    non_persistent_save_interval: int | None = None
    non_persistent_local_ckpt_algo: str = "fully_parallel"
    replication: bool = False
    replication_jump: int | None = None
    replication_factor: int = DEFAULT_REPLICATION_FACTOR
    fallback_on_unreadable: bool | None = None
    script_args_converter_fn: Callable[[LocalCheckpointPluginScriptArgs], list[str]] | None = None

    def __post_init__(self) -> None:
        check = Checker(type(self).__name__)
        if self.non_persistent_local_ckpt_dir is None:
            check.fail(
                "non_persistent_local_ckpt_dir",
                None,
                "an absolute path on node-local storage, e.g. '/local/scratch/ckpt'",
                detail="non_persistent_ckpt_type='local' needs a directory to write to (Megatron Bridge would "
                "build NVRx's LocalCheckpointManager on None and fail at the first save)",
            )
        check.path("non_persistent_local_ckpt_dir", self.non_persistent_local_ckpt_dir)
        if not self.non_persistent_local_ckpt_dir.startswith("/"):
            check.fail(
                "non_persistent_local_ckpt_dir",
                self.non_persistent_local_ckpt_dir,
                "an absolute path",
                detail="a relative path is resolved against each rank's working directory, which differs by "
                "launcher and restart",
            )
        if self.non_persistent_save_interval is None:
            check.fail(
                "non_persistent_save_interval",
                None,
                "an integer >= 1",
                detail="without it Megatron Bridge never writes a local checkpoint",
            )
        check.integer("non_persistent_save_interval", self.non_persistent_save_interval, min=1)
        check.choice("non_persistent_local_ckpt_algo", self.non_persistent_local_ckpt_algo, LOCAL_ALGOS)
        check.boolean("replication", self.replication)
        if self.fallback_on_unreadable is not None:
            check.boolean("fallback_on_unreadable", self.fallback_on_unreadable)
        check.callable_or_none("script_args_converter_fn", self.script_args_converter_fn)
        if not self.replication:
            if self.replication_jump is not None or self.replication_factor != DEFAULT_REPLICATION_FACTOR:
                field = "replication_jump" if self.replication_jump is not None else "replication_factor"
                check.fail(
                    field,
                    getattr(self, field),
                    f"its default unless replication=True (replication=False, so {field} has no effect)",
                )
            return
        if self.replication_jump is None:
            check.fail(
                "replication_jump",
                None,
                "an integer >= 1 with replication=True (the number of ranks per node puts replicas on other nodes)",
                detail="Megatron Bridge passes None to NVRx's CliqueReplicationStrategy, which fails at start",
            )
        check.integer("replication_jump", self.replication_jump, min=1)
        check.integer("replication_factor", self.replication_factor, min=2)

    # ------------------------------------------------------------------------------------------- setup

    def setup(self, task: run.Partial | run.Script, executor: run.Executor) -> None:
        name = type(self).__name__
        executor_config.claim_plugin(executor, self)  # two of this plugin on one job must agree
        front_program.check_script_entrypoint(task, plugin=name)
        if self.replication:
            self._check_replication(executor, name)
        task_config.set_config_fields(
            task,
            "checkpoint",
            self.config_values(),
            plugin=name,
            script_args=self.script_args(),
            script_args_converter_fn=self.script_args_converter_fn,
        )
        dirs = autoresume.ensure_autoresume(
            task,
            plugin=name,
            why="a restart (local checkpoints on the same nodes, persistent ones after a requeue)",
            converter=self.script_args_converter_fn,
        )
        # The persistent schedule beside the local one is checked where the task shows checkpoint.save; where it
        # does not (the job's YAML or recipe), the shared rule above warned (docs/dropin.md: one rule).
        if self.script_args_converter_fn is None and dirs.visible:
            check_durable_schedule(task, self.non_persistent_save_interval, plugin=name)
            check_exit_saves_persistent(task, executor, plugin=name)
        if self.fallback_on_unreadable is not False:
            self._install_guard(task, executor, name)
        guard_known_bugs(task, plugin=name)  # Megatron-Bridge#5922, nvidia-resiliency-ext#349 (known_bugs.py)

    def _install_guard(self, task: Any, executor: Any, name: str) -> None:
        """Each rank runs the local-checkpoint guard first (shipped with the job), then the task's program."""
        problem = front_program.local_guard_problem(task, executor, plugin=name)
        if problem is not None:
            if self.fallback_on_unreadable:
                why = "fallback_on_unreadable checks each rank's local checkpoints before the training script starts"
                raise ResiliencyConfigError(
                    name, "fallback_on_unreadable", True, "None or False here", detail=f"{why}; {problem}"
                )
            logger.warning(
                "%s.fallback_on_unreadable not applied (%s): an unreadable local checkpoint fails every restart "
                "until <dir>/<rank> is removed by hand",
                name,
                problem,
            )
            return
        front_program.install_local_checkpoint_guard(
            task,
            executor,
            self.non_persistent_local_ckpt_dir,
            plugin=name,
            field="fallback_on_unreadable",
            dir_field="non_persistent_local_ckpt_dir",
        )

    def _check_replication(self, executor: Any, name: str) -> None:
        nodes, per_node = executor_config.training_node_count(executor), _ranks_per_node(executor)
        jump, factor = self.replication_jump, self.replication_factor
        if nodes is not None and factor > nodes:
            raise ResiliencyConfigError(
                name,
                "replication_factor",
                factor,
                f"at most the job's training node count ({nodes}: executor.nodes, hot spares not counted)",
                detail="replicas of a shard must sit on different nodes to survive the loss of one; with more "
                "replicas than nodes, some are on the node that is lost",
            )
        if per_node is not None and jump % per_node != 0:
            raise ResiliencyConfigError(
                name,
                "replication_jump",
                jump,
                f"a multiple of the ranks per node ({per_node}, executor.ntasks_per_node / nproc_per_node)",
                detail="rank n's replicas are on ranks n+J, n+2J, ...; with J below the ranks per node they sit "
                "on the same node as rank n and are lost with it",
            )
        if nodes is not None and per_node is not None and (nodes * per_node) % (jump * factor) != 0:
            raise ResiliencyConfigError(
                name,
                "replication_factor",
                factor,
                f"a value with world size ({nodes} x {per_node}) divisible by replication_jump x replication_factor "
                f"({jump} x {factor})",
                detail="NVRx's CliqueReplicationStrategy asserts it at start",
            )

    def config_values(self) -> dict[str, Any]:
        """``checkpoint.<field>`` -> value, with Megatron Bridge's field types."""
        return {
            "non_persistent_save_interval": self.non_persistent_save_interval,
            "non_persistent_ckpt_type": "local",
            "non_persistent_local_ckpt_dir": self.non_persistent_local_ckpt_dir,
            "non_persistent_local_ckpt_algo": self.non_persistent_local_ckpt_algo,
            "replication": self.replication,
            "replication_jump": self.replication_jump,
            "replication_factor": self.replication_factor,
        }

    def script_args(self) -> LocalCheckpointPluginScriptArgs:
        return LocalCheckpointPluginScriptArgs(**self.config_values())


# ------------------------------------------------------------------------------------- cross-plugin rules


def _ranks_per_node(executor: Any) -> int | None:
    try:
        value = executor.nproc_per_node()
    except (AttributeError, NotImplementedError, TypeError, ValueError):
        return None
    return value if isinstance(value, int) and value > 0 else None


def _truthy(value: Any) -> bool:
    return value is True or (isinstance(value, str) and value.lower() == "true")


def check_durable_schedule(task: Any, local_interval: int, *, plugin: str) -> None:
    """Local checkpoints need a persistent schedule beside them, or a requeue onto other nodes starts over."""
    read = lambda field: task_config.read_config_field(task, "checkpoint", field, plugin=plugin)  # noqa: E731
    preemption = _truthy(task_config.read_config_field(task, "train", "exit_signal_handler", plugin=plugin))
    why = (
        "local checkpoints stay on the nodes that wrote them; a job requeued onto other nodes ("
        + ("PreemptionPlugin's requeue, " if preemption else "")
        + "FT job retries, a resubmission) resumes only from a persistent checkpoint"
    )
    if read("save") is None:
        raise ResiliencyConfigError(
            plugin,
            "checkpoint.save",
            None,
            "a persistent checkpoint directory on the task (e.g. checkpoint.save=/lustre/ckpt)",
            detail="Megatron Bridge writes no checkpoint at all, local ones included, without checkpoint.save; " + why,
        )
    interval_seen, interval = task_config.config_field_seen(task, "checkpoint", "save_interval", plugin=plugin)
    if not interval_seen:  # the job's YAML or recipe may set it: the one rule warns where it cannot see
        logger.warning(
            "%s: the task does not show checkpoint.save_interval: cannot check that persistent saves (every "
            "save_interval steps) come beside the local ones (every %d); %s",
            plugin,
            local_interval,
            why,
        )
    elif interval is None:
        raise ResiliencyConfigError(
            plugin,
            "checkpoint.save_interval",
            None,
            f"a persistent save interval on the task, larger than non_persistent_save_interval={local_interval}",
            detail="with only local saves on schedule " + why + ", so it would restart from scratch",
        )
    try:
        persistent = int(interval)
    except (TypeError, ValueError):
        persistent = None
    if persistent is not None and persistent <= local_interval:
        raise ResiliencyConfigError(
            plugin,
            "non_persistent_save_interval",
            local_interval,
            f"fewer steps than checkpoint.save_interval={persistent}",
            detail="Megatron Bridge skips the local save on persistent-save steps, so local checkpoints would "
            "never be written more often than persistent ones",
        )
    if read("load") is None:
        raise ResiliencyConfigError(
            plugin,
            "checkpoint.load",
            None,
            "the persistent checkpoint directory (usually the same as checkpoint.save)",
            detail="Megatron Bridge finds local checkpoints without it but reads persistent ones only from "
            "checkpoint.load; without it a node loss or a requeue restarts from scratch",
        )
    if _truthy(read("also_save_hf_checkpoint")):
        raise ResiliencyConfigError(
            plugin,
            "checkpoint.also_save_hf_checkpoint",
            True,
            "False with local checkpoints",
            detail="Megatron Bridge's CheckpointConfig.finalize() refuses the combination",
        )


def check_exit_saves_persistent(task: Any, executor: Any, *, plugin: str) -> None:
    """A Slurm preemption signal with no exit handler leaves only local checkpoints when the job ends."""
    signal = getattr(executor, "signal", None) if executor_config.is_slurm(executor) else None
    if signal and not _truthy(task_config.read_config_field(task, "train", "exit_signal_handler", plugin=plugin)):
        raise ResiliencyConfigError(
            plugin,
            "train.exit_signal_handler",
            None,
            "True (PreemptionPlugin(enable_exit_handler=True)) when the executor asks for a preemption signal "
            f"(executor.signal={signal!r})",
            detail="without the exit handler the signal saves nothing and the job ends with only local "
            "checkpoints, which a requeue onto other nodes cannot read",
        )


def local_checkpoints_on(task: Any, *, plugin: str) -> bool:
    """Whether the task already writes local checkpoints (for other plugins' rules)."""
    return task_config.read_config_field(task, "checkpoint", "non_persistent_ckpt_type", plugin=plugin) == "local"


__all__ = [
    "LocalCheckpointPlugin",
    "LocalCheckpointPluginScriptArgs",
    "check_durable_schedule",
    "check_exit_saves_persistent",
    "local_checkpoints_on",
]
