"""The reference workload's process group: from the launcher's environment, per in-process restart iteration,
or a private one-rank group when launched plainly; and torchrun's per-attempt store (a launcher accommodation).
"""

from __future__ import annotations

import datetime
import os
from typing import Any

import torch
import torch.distributed as dist

from nemo_resiliency_plugins.testing.devices import backend_for, cuda_device_index, device_from_env

__all__ = ["IPR_PG_TIMEOUT_ENV", "init_process_group"]

IPR_PG_TIMEOUT_ENV = "NRP_IPR_PG_TIMEOUT"
_IPR_PG_TIMEOUT_DEFAULT_S = 10.0


def init_process_group(cfg: Any, restart_store: Any = None) -> bool:
    """gloo process group from torchrun / ft_launcher env; a private 1-rank group when launched plainly."""
    if dist.is_initialized():
        return False
    backend = backend_for(device_from_env())
    if backend == "nccl":
        torch.cuda.set_device(cuda_device_index())
    if restart_store is not None:  # in-process restart: this iteration's store (see testing/inprocess_loop.py)
        # CPU accommodation: gloo has no working abort (NVRx's AbortTorchDistributed aborts NCCL backends only),
        # so a rank blocked in a collective when its peer fails is released only by this timeout; it bounds
        # the in-process recovery time. dist.distributed_timeout_minutes is the NCCL watchdog on GPUs.
        seconds = float(os.environ.get(IPR_PG_TIMEOUT_ENV, _IPR_PG_TIMEOUT_DEFAULT_S))
        if backend == "nccl":  # GPU mode: NCCL is aborted by NVRx, no gloo accommodation
            seconds = cfg.dist.distributed_timeout_minutes * 60.0
        dist.init_process_group(
            backend,
            store=restart_store,
            rank=int(os.environ["RANK"]),
            world_size=int(os.environ["WORLD_SIZE"]),
            timeout=datetime.timedelta(seconds=seconds),
        )
        return True
    timeout = datetime.timedelta(minutes=cfg.dist.distributed_timeout_minutes)
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ and "MASTER_ADDR" in os.environ:
        attempt_store = _restarted_attempt_store(timeout)
        if attempt_store is not None:
            dist.init_process_group(
                backend,
                store=attempt_store,
                rank=int(os.environ["RANK"]),
                world_size=int(os.environ["WORLD_SIZE"]),
                timeout=timeout,
            )
        else:
            dist.init_process_group(backend, timeout=timeout)
    else:
        # One rank, no launcher: an in-memory store, so no port is bound at all (a port found free and released,
        # then bound again, can be taken in between by another process on a busy host).
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1, timeout=timeout)
    return True


def _restarted_attempt_store(timeout: datetime.timedelta) -> Any:
    """After a torchrun restart: the agent's store, with this attempt's own key prefix; otherwise None.

    LAUNCHER ACCOMMODATION (torchrun >= 2.x with its c10d rendezvous, pytorch/pytorch#167288): a restarted
    worker group is told to use the agent's store (``TORCHELASTIC_USE_AGENT_STORE=True``) at the same
    ``MASTER_ADDR:MASTER_PORT`` as the attempt before, and that store still holds the previous attempt's
    process-group keys. A new rank 0 reads its peer's stale address from them and gloo fails with
    "connectFullMesh ... Connection refused" (NCCL hangs on a stale unique id) whenever it gets there before
    the new peer wrote its own - 2 of 3 torchrun restarts in the recovery benchmark. Keys prefixed with the
    restart count are this attempt's only. ft_launcher's restarts do not need it (measured: none failed); the
    prefix is harmless there.
    """
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0)
    if restart == 0 or os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        return None
    store = dist.TCPStore(
        os.environ["MASTER_ADDR"],
        int(os.environ["MASTER_PORT"]),
        int(os.environ["WORLD_SIZE"]),
        is_master=False,
        timeout=timeout,
    )
    return dist.PrefixStore(f"nrp/attempt_{restart}", store)
