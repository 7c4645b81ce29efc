"""AsyncCheckpointPlugin: save checkpoints in the background while training goes on, in one line.

    AsyncCheckpointPlugin()                       # NVRx's async writer, torch_dist, persistent worker

Sets Megatron Bridge's ``checkpoint.async_save=True`` and the fields that go with it (``CheckpointConfig``,
Megatron Core's training ``CheckpointConfig`` underneath). What Megatron Bridge 0.6.2 then does
(``training/checkpointing.py``, ``training/train.py``):

* ``save_checkpoint`` builds the sharded state dict, copies it to host memory and hands the write to a
  background worker: NVRx's ``AsyncCallsQueue`` (``async_strategy="nvrx"``, the default; Megatron Core's own
  ``async_utils`` when NVRx is missing or ``"mcore"`` is asked for), through
  ``megatron.core.dist_checkpointing.save(..., async_sharded_save=True)``. It logs ``scheduled an async
  checkpoint save at iteration N``. Training goes on while the worker writes.
* Before every step, ``finalize_async_saves(blocking=False)`` checks (one all-reduce) whether every rank's
  write is done and then runs the finalisation: metadata, ``latest_train_state.pt``, clean-up of old
  checkpoints. A checkpoint is *durable* only after its finalisation; before that, ``checkpoint.load`` still
  points at the previous one.
* At the end of training and on every exit path (preemption signal, ``exit_interval``, straggler stop) it
  finalises with ``blocking=True``: the exit waits for the write, so ``preempt_time`` must still cover a whole
  save (the write is hidden from the step time, not from the deadline).

Rules (at construction and ``setup()``), each a :class:`ResiliencyConfigError` naming the settings involved:

* ``ckpt_format`` must be ``"torch_dist"`` or ``"fsdp_dtensor"`` (``ConfigContainer.validate()`` asserts it;
  ``save_checkpoint`` raises "Async checkpoint save not implemented" for the others). A task that sets another
  ``checkpoint.ckpt_format`` is refused naming both.
* ``checkpoint.save`` must be set on the task (``CheckpointConfig.finalize()`` asserts it: there is nothing to
  write to otherwise), and ``use_persistent_ckpt_worker`` must stay True (``finalize()`` asserts it).
* ``async_ckpt_use_cpu_shm=True`` is refused: Megatron Bridge 0.6.2 never hands it to NVRx's worker (grep
  ``cpu_shm`` in ``megatron/bridge``: nothing; Megatron-LM's ``training/async_utils.py`` does), so it would do
  nothing.
* Priorities are checked against the ranges Megatron Core documents (``nice`` 0-19, I/O class 0-3) instead of
  being clamped silently.

With :class:`~nemo_resiliency_plugins.FaultTolerancePlugin`: the FT ``checkpointing`` section covers the
scheduling of a save *and* every finalisation, including the blocking one at exit that waits for a whole
write. Megatron Bridge does not recompute the ``checkpointing`` timeout when async save is on ("can't update
the checkpointing section timeout with async checkpointing"), so the value you give must cover a whole
synchronous-size write; ``nemo-resiliency doctor`` checks it (``timeout_chain.py``).

``fsdp_dtensor`` also needs Megatron FSDP (``ddp.use_megatron_fsdp``); with ``async_strategy="nvrx"`` it
needs an NVRx with async support for that format (Megatron Core asserts both when the job starts).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import nemo_run as run

from nemo_resiliency_plugins.core import autoresume, config_fields, executor_config, front_program, task_config
from nemo_resiliency_plugins.core.known_bugs import guard_known_bugs
from nemo_resiliency_plugins.core.validation import Checker, KnownKeywords
from nemo_resiliency_plugins.errors import ResiliencyConfigError

#: Megatron Core's ``CheckpointConfig.async_strategy`` choices.
ASYNC_STRATEGIES = ("nvrx", "mcore")
#: The checkpoint formats Megatron Bridge can save asynchronously (``ConfigContainer.validate``).
ASYNC_FORMATS = ("torch_dist", "fsdp_dtensor")
#: Megatron Bridge's ``async_write_results_mp_mode`` choices (multiprocessing start methods).
MP_MODES = ("fork", "spawn", "forkserver")

#: The ``checkpoint`` fields the plugin writes, in Megatron Core's / Megatron Bridge's order.
CONFIG_FIELDS = (
    "ckpt_format",
    "async_save",
    "async_strategy",
    "use_persistent_ckpt_worker",
    "async_ckpt_cpu_priority",
    "async_ckpt_io_priority",
    "async_ckpt_use_cpu_shm",
    "async_write_results_mp_mode",
    "dist_ckpt_workers",
    "ckpt_assume_constant_structure",
)


#: Why async_save needs checkpoint.save: said by the plugin and by ``doctor`` (which asks the same rule).
SAVE_DIR_WHY = (
    "async_save writes into checkpoint.save (Megatron Bridge's CheckpointConfig.finalize() refuses async_save "
    "without it)"
)


@dataclass
class AsyncCheckpointPluginScriptArgs:
    """What ``script_args_converter_fn`` receives: the ``checkpoint`` values the plugin would set."""

    ckpt_format: str
    async_save: bool
    async_strategy: str
    use_persistent_ckpt_worker: bool
    async_ckpt_cpu_priority: int
    async_ckpt_io_priority: int | None
    async_ckpt_use_cpu_shm: bool
    async_write_results_mp_mode: str
    dist_ckpt_workers: int
    ckpt_assume_constant_structure: bool


@dataclass(kw_only=True)
class AsyncCheckpointPlugin(KnownKeywords, run.Plugin):
    """Save checkpoints asynchronously (Megatron Bridge ``checkpoint.async_save=True``).

    Fields are Megatron Bridge's ``CheckpointConfig`` fields of the same name, with its defaults:

        async_strategy: ``"nvrx"`` (NVRx's async writer; Megatron Bridge falls back to ``"mcore"`` when
            NVRx is not installed where the job runs) or ``"mcore"`` (Megatron Core's).
        use_persistent_ckpt_worker: keep one background writer for the whole job. Must be True:
            Megatron Bridge's ``finalize()`` refuses async save without it.
        ckpt_format: ``"torch_dist"`` or ``"fsdp_dtensor"``; the only formats saved asynchronously.
        async_ckpt_cpu_priority: ``nice`` value of the writer process, 0-19 (higher = lower priority).
        async_ckpt_io_priority: I/O scheduling class of the writer, 0-3 (3 = idle), or None to leave it.
        async_ckpt_use_cpu_shm: must stay False (no effect in Megatron Bridge 0.6.2; see the module doc).
        async_write_results_mp_mode: start method of the results queue: ``"fork"``, ``"spawn"``,
            ``"forkserver"``.
        dist_ckpt_workers: distributed checkpoint writer threads per rank (>= 1). Megatron Bridge 0.6.2 reads it
            for ``fsdp_dtensor`` only; ``torch_dist`` takes ``storage_writers_per_rank`` from the task.
        ckpt_assume_constant_structure: Megatron Core's option (default False, as in Megatron Bridge): the save
            strategy Megatron Bridge keeps for the job reuses the first save's plans and metadata, skips the
            sharding validation after it, and NVRx's writer gets ``use_cached_data_structure=True`` (its
            persistent worker keeps the CUDA IPC handles of the state dict's tensors instead of opening them at
            every save). Only for a state dict whose structure never changes during the run. Memory: no extra
            GPU memory (the worker maps the same allocations); host memory is the same either way: every async
            save stages one copy of this rank's checkpoint shard in pinned host memory (NVRx's worker,
            ``tensor.to("cpu", non_blocking=True)``), which PyTorch's pinned-memory cache keeps for the next
            save, so budget host RAM >= the shard size per rank on top of training's own.
        script_args_converter_fn: for ``run.Script`` tasks whose script does not take Hydra overrides;
            receives :class:`AsyncCheckpointPluginScriptArgs`, returns the arguments to append.

    Where the staging copy goes, and what it costs (measured on one H200, 2026-12-05,
    ``benchmarks/results/gpu/2026-12-05``): training waits only while NVRx's worker copies the GPU tensors
    into pinned host memory (55 GB/s there, against 15 GB/s into pageable memory); the write to storage
    overlaps training. With the strategy Megatron Bridge keeps across saves, a 512 MB-per-rank save cost
    training 0.038 s = 6.1 % of the 0.631 s synchronous stall (defaults) and 0.059 s = 9.4 % with
    ``ckpt_assume_constant_structure=True``; 2 GB: 0.183 s = 6.9 % and 0.170 s = 6.4 % of 2.658 s.

    ``checkpoint.save`` (where checkpoints go) and ``checkpoint.save_interval`` stay the task's: the plugin
    changes *how* a save is written, not where or how often, and refuses a task without ``checkpoint.save``.
    """

    async_strategy: str = "nvrx"
    use_persistent_ckpt_worker: bool = True
    ckpt_format: str = "torch_dist"
    async_ckpt_cpu_priority: int = 10
    async_ckpt_io_priority: int | None = 3
    async_ckpt_use_cpu_shm: bool = False
    async_write_results_mp_mode: str = "fork"
    dist_ckpt_workers: int = 1
    ckpt_assume_constant_structure: bool = False
    script_args_converter_fn: Callable[[AsyncCheckpointPluginScriptArgs], list[str]] | None = None

    def __post_init__(self) -> None:
        check = Checker(type(self).__name__)
        check.choice("async_strategy", self.async_strategy, ASYNC_STRATEGIES)
        if not has_async_strategy() and self.async_strategy != "nvrx":
            check.fail(
                "async_strategy",
                self.async_strategy,
                "'nvrx' (the only writer) with the installed Megatron Bridge",
                detail="its CheckpointConfig has no async_strategy field (Megatron Core's own async saver was removed; "
                "NVRx's writer is the only one), so the plugin does not emit it",
            )
        check.boolean("use_persistent_ckpt_worker", self.use_persistent_ckpt_worker)
        if not self.use_persistent_ckpt_worker:
            check.fail(
                "use_persistent_ckpt_worker",
                False,
                "True",
                detail="Megatron Bridge's CheckpointConfig.finalize() refuses async_save without the persistent worker",
            )
        if not isinstance(self.ckpt_format, str) or self.ckpt_format not in ASYNC_FORMATS:
            check.fail(
                "ckpt_format",
                self.ckpt_format,
                "one of " + ", ".join(repr(f) for f in ASYNC_FORMATS),
                detail="async_save works only with these formats (Megatron Bridge's ConfigContainer.validate())",
            )
        check.integer("async_ckpt_cpu_priority", self.async_ckpt_cpu_priority, min=0, max=19)
        if self.async_ckpt_io_priority is not None:
            check.integer("async_ckpt_io_priority", self.async_ckpt_io_priority, min=0, max=3)
        check.boolean("async_ckpt_use_cpu_shm", self.async_ckpt_use_cpu_shm)
        check.choice("async_write_results_mp_mode", self.async_write_results_mp_mode, MP_MODES)
        check.integer("dist_ckpt_workers", self.dist_ckpt_workers, min=1)
        check.boolean("ckpt_assume_constant_structure", self.ckpt_assume_constant_structure)
        check.callable_or_none("script_args_converter_fn", self.script_args_converter_fn)
        if self.async_ckpt_use_cpu_shm:
            check.fail(
                "async_ckpt_use_cpu_shm",
                True,
                "False",
                detail="Megatron Bridge 0.6.2 never passes it to NVRx's async worker (only Megatron-LM's own training "
                "loop does, megatron/training/async_utils.py), so it would have no effect",
            )

    # ------------------------------------------------------------------------------------------- setup

    def setup(self, task: run.Partial | run.Script, executor: run.Executor) -> None:
        name = type(self).__name__
        executor_config.claim_plugin(executor, self)  # two of this plugin on one job must agree
        front_program.check_script_entrypoint(task, plugin=name)
        if self.script_args_converter_fn is None:
            self._check_format(task, name)
        task_config.set_config_fields(
            task,
            "checkpoint",
            self.config_values(),
            plugin=name,
            script_args=self.script_args(),
            script_args_converter_fn=self.script_args_converter_fn,
        )
        if self.script_args_converter_fn is None:  # a custom script's own arguments cannot be read back
            self._check_save_dir(task, name)
        guard_known_bugs(task, plugin=name)  # Megatron-Bridge#5842 (known_bugs.py)

    def _check_format(self, task: Any, name: str) -> None:
        """The task's own checkpoint format, named with the plugin's (before the generic conflict message)."""
        fmt = task_config.read_config_field(task, "checkpoint", "ckpt_format", plugin=name)
        if fmt is not None and fmt not in ASYNC_FORMATS:
            raise ResiliencyConfigError(
                name,
                "ckpt_format",
                self.ckpt_format,
                detail=(
                    f"the task sets checkpoint.ckpt_format={fmt!r}, which Megatron Bridge cannot save asynchronously "
                    f"(async_save needs one of {', '.join(ASYNC_FORMATS)}). Remove checkpoint.ckpt_format from the "
                    "task or drop AsyncCheckpointPlugin"
                ),
            )

    def _check_save_dir(self, task: Any, name: str) -> None:
        """async_save writes into checkpoint.save: refused where the task shows none, a warning where the task
        does not show it (the job may set it in its YAML or recipe); the one rule, in core/autoresume.py."""
        autoresume.shown_checkpoint_save(task, plugin=name, why=SAVE_DIR_WHY)

    def config_values(self) -> dict[str, Any]:
        """``checkpoint.<field>`` -> value, with Megatron Bridge's field types; ``async_strategy`` only where the
        installed ``CheckpointConfig`` has that field (``has_async_strategy()``)."""
        values = self._all_values()
        if not has_async_strategy():
            del values["async_strategy"]
        return values

    def _all_values(self) -> dict[str, Any]:
        return {
            "ckpt_format": self.ckpt_format,
            "async_save": True,
            "async_strategy": self.async_strategy,
            "use_persistent_ckpt_worker": self.use_persistent_ckpt_worker,
            "async_ckpt_cpu_priority": self.async_ckpt_cpu_priority,
            "async_ckpt_io_priority": self.async_ckpt_io_priority,
            "async_ckpt_use_cpu_shm": self.async_ckpt_use_cpu_shm,
            "async_write_results_mp_mode": self.async_write_results_mp_mode,
            "dist_ckpt_workers": self.dist_ckpt_workers,
            "ckpt_assume_constant_structure": self.ckpt_assume_constant_structure,
        }

    def script_args(self) -> AsyncCheckpointPluginScriptArgs:
        return AsyncCheckpointPluginScriptArgs(**self._all_values())


def has_async_strategy() -> bool:
    """The installed Megatron Bridge's ``CheckpointConfig`` has ``async_strategy`` (read from its source,
    ``core/config_fields.py``); True where that source is not on this host (Megatron Bridge
    0.6.2, the tested version, has it)."""
    fields = config_fields.megatron_bridge_fields("CheckpointConfig")
    return fields is None or "async_strategy" in fields


__all__ = ["AsyncCheckpointPlugin", "AsyncCheckpointPluginScriptArgs"]
