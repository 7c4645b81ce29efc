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

__all__ = ["local_checkpoint_manager"]


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
