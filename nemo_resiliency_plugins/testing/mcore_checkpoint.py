"""The checkpoint machinery Megatron Bridge uses for async and local checkpoints, driven for the reference workload.

TEST/CPU ACCOMMODATION for the parts named below; the calls themselves are the real upstream ones.

Megatron Bridge 0.6.2's own ``training/checkpointing.py`` cannot be imported in this CPU environment: it imports
``nvidia-modelopt`` unconditionally (``from modelopt.torch.opt.plugins import ...``), which is not installed here.
So this module makes the same calls that file makes, on the same libraries:

* **local** checkpoints: NVRx's ``LocalCheckpointManager(non_persistent_local_ckpt_dir, repl_strategy=...)`` with
  ``CliqueReplicationStrategy.from_replication_params(replication_jump, replication_factor)`` when
  ``replication`` is on (Megatron Bridge's ``init_checkpointing_context``), fed a Megatron Core
  ``MCoreTensorAwareStateDict.from_state_dict(sharded_state_dict, algo=non_persistent_local_ckpt_algo)`` and
  read back with ``find_latest()``/``load()``/``to_state_dict`` (Megatron Bridge's ``save_checkpoint`` /
  ``_load_non_persistent_base_checkpoint``);
* **global** (persistent) checkpoints: Megatron Core's ``dist_checkpointing.save``/``load`` in ``torch_dist``
  format, with ``async_sharded_save=True`` and the async calls queue Megatron Bridge's ``GlobalState`` builds
  (``initialize_async_checkpoint_worker``) when ``checkpoint.async_save`` is on.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Checkpointer", "local_checkpoint_manager", "mb_save_strategy", "plain", "sharded_state_dict"]


def local_checkpoint_manager(ckpt_cfg: Any) -> Any:
    """NVRx's local checkpoint manager for ``ckpt_cfg`` (a ``CheckpointConfig``), as Megatron Bridge builds it.

    Replication needs ``torch.distributed`` to be initialised (NVRx creates the clique process groups here).
    """
    from nvidia_resiliency_ext.checkpointing.local.ckpt_managers.local_manager import LocalCheckpointManager
    from nvidia_resiliency_ext.checkpointing.local.replication.strategies import CliqueReplicationStrategy

    strategy = None
    if ckpt_cfg.replication:
        strategy = CliqueReplicationStrategy.from_replication_params(
            ckpt_cfg.replication_jump, ckpt_cfg.replication_factor
        )
    return LocalCheckpointManager(ckpt_cfg.non_persistent_local_ckpt_dir, repl_strategy=strategy)


def mb_save_strategy(ckpt_cfg: Any, group: Any = None, cpu_shm_mode: bool = False) -> Any:
    """The ``torch_dist`` save strategy Megatron Bridge 0.6.2's ``save_checkpoint`` builds from ``ckpt_cfg``.

    Built once and kept for every later save (Megatron Bridge keeps it in ``checkpointing_context``):
    ``TorchDistSaveShardedStrategy("torch_dist", 1, thread_count=storage_writers_per_rank)``; with
    ``ckpt_assume_constant_structure`` its ``use_cached_ckpt_structure`` is on (Megatron Core then reuses the save
    plans and global metadata of the first save, and NVRx's writer gets ``use_cached_data_structure=True``: its
    persistent worker keeps the CUDA IPC handles of the state dict's tensors instead of opening them again at
    every save); with ``fully_parallel_save`` it is wrapped in ``FullyParallelSaveStrategyWrapper`` over
    ``group`` (the data-parallel group; the world when None), which caches the distribution of the saves when
    the structure is constant. ``cpu_shm_mode`` (Megatron Core's option, which Megatron Bridge 0.6.2 never sets)
    copies the GPU tensors into shared CPU memory in the training process instead.
    """
    from megatron.core.dist_checkpointing.strategies.fully_parallel import FullyParallelSaveStrategyWrapper
    from megatron.core.dist_checkpointing.strategies.torch import TorchDistSaveShardedStrategy

    strategy = TorchDistSaveShardedStrategy(
        "torch_dist", 1, thread_count=ckpt_cfg.storage_writers_per_rank, cpu_shm_mode=cpu_shm_mode
    )
    if ckpt_cfg.ckpt_assume_constant_structure:
        strategy.use_cached_ckpt_structure = True
    if ckpt_cfg.fully_parallel_save:
        strategy = FullyParallelSaveStrategyWrapper(strategy, group, ckpt_cfg.ckpt_assume_constant_structure)
    return strategy


# ----------------------------------------------------------------------------------------------- state dicts


def sharded_state_dict(tensors: dict[str, Any], per_rank: dict[str, Any], common: dict[str, Any]) -> dict[str, Any]:
    """A Megatron Core sharded state dict for a data-parallel job.

    ``tensors`` are the same on every rank (model and optimizer state: one replica per rank, written once);
    ``per_rank`` are 1-D tensors that differ by rank (RNG and data-stream state: one row per rank of a
    ``(world, n)`` tensor); ``common`` is plain Python state (train state, optimizer hyper-parameters), which
    Megatron Core stores once, from rank 0.
    """
    import torch.distributed as dist
    from megatron.core.dist_checkpointing.mapping import ShardedTensor

    rank, world = dist.get_rank(), dist.get_world_size()
    out: dict[str, Any] = dict(common)
    for key, tensor in tensors.items():
        out[key] = ShardedTensor.from_rank_offsets(key, tensor, replica_id=rank)
    for key, tensor in per_rank.items():
        out[key] = ShardedTensor.from_rank_offsets(key, tensor.reshape(1, -1), (0, rank, world), replica_id=0)
    return out


def plain(state_dict: dict[str, Any], per_rank: tuple[str, ...] = ()) -> dict[str, Any]:
    """A loaded state dict with this rank's rows of the per-rank tensors as 1-D tensors again."""
    return {k: (v.reshape(-1) if k in per_rank else v) for k, v in state_dict.items()}


# ----------------------------------------------------------------------------------------------- the saver


class Checkpointer:
    """Persistent (``torch_dist``, optionally async) and local (NVRx) checkpoints, as Megatron Bridge saves them.

    ``state`` is Megatron Bridge's ``GlobalState`` (its async worker and queue are Megatron Bridge's own,
    ``initialize_async_checkpoint_worker``); ``ckpt_cfg`` its ``CheckpointConfig``.
    """

    TRACKER = "latest_checkpointed_iteration.txt"

    def __init__(self, state: Any, ckpt_cfg: Any, strategy: Any = None) -> None:
        """``strategy``: a save strategy kept for every persistent save (:func:`mb_save_strategy`), as Megatron
        Bridge keeps one; None: Megatron Core's default strategy, built anew at each save."""
        self.state = state
        self.cfg = ckpt_cfg
        self.strategy = strategy
        self.saves = 0
        self.local = local_checkpoint_manager(ckpt_cfg) if ckpt_cfg.non_persistent_ckpt_type == "local" else None
        if ckpt_cfg.async_save:
            state.initialize_async_checkpoint_worker()

    # -- persistent -------------------------------------------------------------------------------------------
    def save_persistent(self, step: int, sharded: dict[str, Any], on_durable: Any = None) -> None:
        """``iter_<step>`` in ``checkpoint.save``; the tracker file is written when the save is durable.

        Sync: before returning. Async: the write runs in Megatron Bridge's async worker and the tracker is written
        by a finalize function, after every rank's write is done (``finalize(blocking=...)``), as Megatron Bridge
        writes ``latest_train_state.pt``.
        """
        import os

        import torch.distributed as dist
        from megatron.core import dist_checkpointing

        directory = os.path.join(self.cfg.save, f"iter_{step:07d}")
        if dist.get_rank() == 0:
            os.makedirs(directory, exist_ok=True)
        dist.barrier()

        def durable() -> None:
            if dist.get_rank() == 0:
                _atomic_text(os.path.join(self.cfg.save, self.TRACKER), f"{step}\n")
            if on_durable is not None:
                on_durable(step)

        extra: dict[str, Any] = {}
        if self.strategy is not None:
            # Megatron Bridge skips the sharding validation after the first save when the structure is constant.
            extra = {
                "sharded_strategy": self.strategy,
                "validate_access_integrity": not (self.saves and self.cfg.ckpt_assume_constant_structure),
            }
        self.saves += 1
        request = dist_checkpointing.save(
            sharded,
            directory,
            async_sharded_save=bool(self.cfg.async_save),
            async_strategy=self.cfg.async_strategy,
            **extra,
        )
        if request is None:
            durable()
            return
        request.add_finalize_fn(durable)
        self.state.async_calls_queue.schedule_async_request(request)

    def finalize(self, blocking: bool = False, terminate: bool = False) -> None:
        """Megatron Bridge's ``maybe_finalize_async_save``: a no-op without async save."""
        queue = self.state.async_calls_queue if self.cfg.async_save else None
        if queue is None:
            return
        queue.maybe_finalize_async_calls(blocking)
        if terminate:
            queue.close()

    def pending(self) -> int:
        queue = self.state.async_calls_queue if self.cfg.async_save else None
        return 0 if queue is None else queue.get_num_unfinalized_calls()

    def newest_persistent(self) -> int:
        import os

        load = self.cfg.load
        path = os.path.join(load, self.TRACKER) if load else None
        if not path or not os.path.isfile(path):
            return -1
        with open(path) as handle:
            return int(handle.read().strip())

    def load_persistent(self, step: int, template: dict[str, Any]) -> dict[str, Any]:
        import os

        from megatron.core import dist_checkpointing

        return dist_checkpointing.load(template, os.path.join(self.cfg.load, f"iter_{step:07d}"))

    # -- local ------------------------------------------------------------------------------------------------
    def save_local(self, step: int, sharded: dict[str, Any]) -> None:
        """NVRx's ``LocalCheckpointManager.save`` of an ``MCoreTensorAwareStateDict`` (synchronous on CPU)."""
        import torch.distributed as dist
        from megatron.core.dist_checkpointing.tensor_aware_state_dict import MCoreTensorAwareStateDict

        tasd, _ = MCoreTensorAwareStateDict.from_state_dict(
            sharded, algo=self.cfg.non_persistent_local_ckpt_algo, parallelization_group=dist.group.WORLD
        )
        self.local.save(tasd, step, is_async=False)

    def newest_local(self) -> int:
        return -1 if self.local is None else self.local.find_latest()

    def load_local(self, template: dict[str, Any]) -> dict[str, Any]:
        import torch.distributed as dist

        tasd, _ = self.local.load()
        return tasd.to_state_dict(
            template, algo=self.cfg.non_persistent_local_ckpt_algo, parallelization_group=dist.group.WORLD
        )

    # -- resume -----------------------------------------------------------------------------------------------
    def choose(self, persistent_step: int | None = None) -> tuple[str, int] | None:
        """Megatron Bridge's choice at start (``_load_checkpoint_from_path``): the local checkpoint when it is at
        least as new as the newest persistent one, else the persistent one, else None (scratch)."""
        local_step = self.newest_local()
        persistent = self.newest_persistent() if persistent_step is None else persistent_step
        if local_step != -1 and local_step >= persistent:
            return "local", local_step
        if persistent != -1:
            return "persistent", persistent
        return None


def _atomic_text(path: str, text: str) -> None:
    import os

    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


# ----------------------------------------------------------------------------------- the reference workload

#: Extra per-rank bytes in every checkpoint (``NRP_CKPT_BALLAST_MB``), standing in for a model's shards, so that
#: a save takes long enough to see whether it stalls training (the reference model itself is a few hundred bytes).
BALLAST_ENV = "NRP_CKPT_BALLAST_MB"


def needs_cuda(ckpt_cfg: Any) -> str | None:
    """Why these settings cannot run on a CPU-only machine, or None. Each reason is where the upstream code calls
    CUDA unconditionally (NVRx 0.7.0 / Megatron Core as installed)."""
    if ckpt_cfg.non_persistent_ckpt_type != "local":
        return None
    if ckpt_cfg.non_persistent_local_ckpt_algo == "fully_parallel":
        return (
            "non_persistent_local_ckpt_algo='fully_parallel': Megatron Core's MCoreTensorAwareStateDict.to_state_dict "
            "exchanges shards with exchange_loaded_tensors_broadcast (tensor.cuda()) and torch.cuda.synchronize()"
        )
    if ckpt_cfg.replication:
        return (
            "replication=True: NVRx's GroupWrapper.send_state_dict / irecv_state_dict move every tensor through "
            "a CUDA buffer (ten.cuda(), torch.empty_like(..., device='cuda'))"
        )
    if ckpt_cfg.async_save:
        return (
            "async_save with local checkpoints: NVRx's LocalCheckpointManager.save(is_async=True) calls "
            "torch.cuda.synchronize()"
        )
    return None


def for_workload(cfg: Any, state: Any) -> Checkpointer | None:
    """The workload's NVRx local checkpointer when the job asks for local checkpoints, else None.

    Persistent checkpoints stay the workload's own files on every machine: Megatron Core's ``torch_dist`` save
    calls ``torch.cuda.synchronize()`` unconditionally (``FileSystemWriterAsync.preload_tensors``, also on the
    synchronous path) and NVRx's persistent async worker computes ``rank % torch.cuda.device_count()``, so neither
    runs without a GPU. A setting whose upstream code needs CUDA, on a machine without it, is a RuntimeError
    saying where (never a silent fallback)."""
    import torch

    ckpt = cfg.checkpoint
    if ckpt.async_save:
        if not torch.cuda.is_available():
            raise RuntimeError(
                "needs CUDA, not available here: checkpoint.async_save (NVRx's persistent async worker sets its "
                "device with rank % torch.cuda.device_count(); Megatron Core's writer calls torch.cuda.synchronize())"
            )
        raise RuntimeError(
            "checkpoint.async_save: the reference workload writes its persistent checkpoints itself, not through "
            "Megatron Core's torch_dist writer, so it cannot save them asynchronously (not implemented)"
        )
    if not torch.cuda.is_available():
        reason = needs_cuda(ckpt)
        if reason:
            raise RuntimeError(f"needs CUDA, not available here: {reason}")
    if ckpt.non_persistent_ckpt_type != "local" or not ckpt.save:
        return None
    return Checkpointer(state, ckpt)


def local_due(cfg: Any, step: int) -> bool:
    """Megatron Bridge's schedule: every ``non_persistent_save_interval`` steps that are not persistent-save steps."""
    ckpt = cfg.checkpoint
    if not ckpt.non_persistent_save_interval or step % ckpt.non_persistent_save_interval:
        return False
    return not (ckpt.save_interval and step % ckpt.save_interval == 0)


def save_local_for(trainer: Any) -> None:
    """One local save of the workload's state, inside Megatron Bridge's FT ``checkpointing`` section."""
    import time

    from megatron.bridge.training import fault_tolerance

    from nemo_resiliency_plugins.testing.rank_log import log

    step = trainer.state.train_state.step
    fault_tolerance.on_checkpointing_start(trainer.state)
    started = time.perf_counter()
    trainer.local_ckpt.save_local(step, workload_state(trainer))
    seconds = time.perf_counter() - started
    fault_tolerance.on_checkpointing_end(is_async_finalization=False, global_state=trainer.state)
    if trainer.rank == 0:
        log(f"CHECKPOINT local step={step} seconds={seconds:.4f}")


def resume_for(trainer: Any, persistent_step: int) -> bool:
    """Megatron Bridge's choice at start: the local checkpoint when it is at least as new as the newest persistent
    one (``persistent_step``, -1 for none). Loads it and returns True; False leaves the persistent one to the
    caller. A local checkpoint that cannot be read raises, as in Megatron Bridge 0.6.2 (no silent fallback)."""
    import torch.distributed as dist
    from megatron.bridge.training import fault_tolerance

    from nemo_resiliency_plugins.testing.rank_log import log

    shared = [persistent_step]
    dist.broadcast_object_list(shared, src=0)
    local_step = trainer.local_ckpt.newest_local()
    if local_step == -1 or local_step < shared[0]:
        return False
    restore(trainer, trainer.local_ckpt.load_local(workload_state(trainer, empty=True)))
    if trainer.state.train_state.step != local_step:
        raise RuntimeError(f"local checkpoint {local_step} holds step {trainer.state.train_state.step}")
    trainer.last_saved_step = local_step
    fault_tolerance.on_checkpoint_loaded(is_local_chkpt=True, global_state=trainer.state)
    log(f"RESUMED from step {local_step} (local, NVRx LocalCheckpointManager; persistent newest {shared[0]})")
    return True


def _ballast(rank: int) -> Any:
    import os

    import torch

    megabytes = float(os.environ.get(BALLAST_ENV, "0") or 0)
    count = int(megabytes * 1024 * 1024 / 4)
    return torch.full((max(count, 1),), float(rank), dtype=torch.float32)


def workload_state(trainer: Any, *, empty: bool = False) -> dict[str, Any]:
    """The reference workload's trainer as a sharded state dict: parameters (replicated), each rank's RNG and
    data-stream state and ballast (one row per rank), optimizer and train state (common)."""
    import torch

    params = {
        f"model.{k}": (torch.empty_like(v) if empty else v.detach().clone())
        for k, v in trainer.model.state_dict().items()
    }
    data = trainer.data_gen.get_state()
    cpu = torch.get_rng_state()
    ballast = _ballast(trainer.rank)
    per_rank = {
        "rng.data": torch.empty_like(data) if empty else data,
        "rng.torch": torch.empty_like(cpu) if empty else cpu,
        "ballast": torch.empty_like(ballast) if empty else ballast,
    }
    common = {
        "optimizer": None if empty else trainer.optimizer.state_dict(),
        "train_state": None
        if empty
        else {
            k: int(v)
            for k, v in trainer.state.train_state.state_dict().items()
            if torch.is_tensor(v) and v.numel() == 1
        },
        "world_size": trainer.world,
    }
    return sharded_state_dict(params, per_rank, common)


def restore(trainer: Any, loaded: dict[str, Any]) -> None:
    import torch

    loaded = plain(loaded, ("rng.data", "rng.torch", "ballast"))
    if loaded["world_size"] != trainer.world:
        raise RuntimeError(f"checkpoint written by {loaded['world_size']} ranks; this run has {trainer.world}")
    trainer.model.load_state_dict({k[len("model.") :]: v for k, v in loaded.items() if k.startswith("model.")})
    trainer.optimizer.load_state_dict(loaded["optimizer"])
    train_state = trainer.state.train_state
    for key, value in loaded["train_state"].items():
        setattr(train_state, key, value)
    trainer.data_gen.set_state(loaded["rng.data"].to(torch.uint8))
    torch.set_rng_state(loaded["rng.torch"].to(torch.uint8))
