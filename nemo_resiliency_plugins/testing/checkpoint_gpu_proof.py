"""The CUDA-only pieces of async and local checkpoints, proved on GPUs with the same upstream calls (for the lead).

NOT RUN IN CI, NOT RUN ON THE DEVELOPMENT MACHINE (no CUDA there). Run on the lent H200 (1 GPU: every case but
REPLICA, which needs 2 ranks on 2 GPUs) through ``benchmarks/gpu/checkpoint_entry.py``; results in
``benchmarks/results/gpu/2026-12-04-evening/``, ``.../2026-12-05/``. With this package's environment on a 2-GPU machine:

    torchrun --standalone --nproc-per-node=2 -m nemo_resiliency_plugins.testing.checkpoint_gpu_proof /tmp/proof 512

Prints lines per case (rank 0), and exits non-zero when a case fails:

``COPY size=<MB>MB GB/s: pageable=.. pinned=.. to_cpu_non_blocking=..``
    the machine's device-to-host copy ceilings for that tensor (what any staging copy can reach).
``SYNC size=.. setting=default|constant first_s=.. median_s=..``
    a ``torch_dist`` save of ``<MB>`` per rank through Megatron Core's ``dist_checkpointing.save`` with the
    strategy Megatron Bridge builds (``mcore_checkpoint.mb_save_strategy``), synchronous: the stall a save costs.
``ASYNC size=.. setting=<s> ... schedule_s=<s> ... extra_s=<s> pct_of_sync=<%> ... ok=<bool>``
    the same save asynchronous through Megatron Bridge's own ``GlobalState.initialize_async_checkpoint_worker``
    (NVRx's persistent worker) while the GPU trains (matmuls), for each setting of ``NRP_CKPT_SETTINGS``
    (``SETTINGS``); medians of 5 saves after an untimed first one, which pays one-time set-up. ``extra_s`` is
    what the save cost training: the scheduling (training waits for it) plus the extra time of the steps run
    while the worker wrote; ok when it is at most 10 % of the synchronous stall (the issue's target).

``REPLICA rank=1 recovered=<bool>``
    NVRx local checkpoints with ``replication=True, replication_jump=1, replication_factor=2``; rank 1's directory
    is deleted, and a fresh manager gets rank 1's shard from rank 0's replica.
``FULLY_PARALLEL recovered=<bool>``
    the default ``non_persistent_local_ckpt_algo='fully_parallel'`` saved and loaded.

Usage: ``checkpoint_entry.py BASE MB[,MB...]`` (e.g. ``512,4096``: cpu_shm at the first size only).
"""

from __future__ import annotations

import shutil
import sys
import time


def _step(x):
    import torch

    for _ in range(20):
        x = torch.tanh(x @ x)
    torch.cuda.synchronize()
    return x


def _median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


def _median_step_ms(x, n: int = 10) -> float:
    times = []
    for _ in range(n):
        started = time.perf_counter()
        _step(x)
        times.append((time.perf_counter() - started) * 1000)
    return sorted(times)[n // 2]


#: The async settings measured (``NRP_CKPT_SETTINGS``, comma-separated), each against the synchronous stall:
#: ``default``   Megatron Bridge's defaults (``fully_parallel_save=True``, ``ckpt_assume_constant_structure=False``)
#: ``constant``  ``ckpt_assume_constant_structure=True``: cached save plans and metadata, and NVRx's worker keeps the
#:               CUDA IPC handles of the state dict's tensors (``use_cached_data_structure``) across saves
#: ``cpu_shm``   ``constant`` + Megatron Core's ``cpu_shm_mode`` (NVRx's queue too): the training process copies
#:               into shared CPU memory itself; Megatron Bridge 0.6.2 cannot set it (shown for comparison)
SETTINGS = ("default", "constant", "cpu_shm")


def _copy_rates(ballast) -> str:
    """The device-to-host copy ceilings of this machine for ``ballast``: into pageable memory, into pinned memory,
    and ``.to("cpu", non_blocking=True)`` (what NVRx's worker does), in GB/s (median of 3)."""
    import torch

    out = []
    gb = ballast.numel() * ballast.element_size() / 1e9
    pageable = torch.empty(ballast.shape, dtype=ballast.dtype)
    pinned = torch.empty(ballast.shape, dtype=ballast.dtype, pin_memory=True)
    for name, fn in (
        ("pageable", lambda: pageable.copy_(ballast)),
        ("pinned", lambda: pinned.copy_(ballast, non_blocking=True)),
        ("to_cpu_non_blocking", lambda: ballast.to("cpu", non_blocking=True)),
    ):
        times = []
        for _ in range(3):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
        out.append(f"{name}={gb / _median(times):.1f}")
    return " ".join(out)


def _rm(path: str) -> None:
    shutil.rmtree(path, ignore_errors=True)


def measure(base: str, megabytes: float, settings: tuple[str, ...], timed: int = 5) -> bool:
    """One size: the synchronous stall (Megatron Bridge's default strategy, and with a constant structure), then
    each async setting; prints ``ASYNC`` / ``ASYNC_SAVES`` / ``COPY`` lines (rank 0). Each way saves once untimed,
    then ``timed`` times; iteration directories are removed once durable (a 4 GB size would fill the disk)."""
    import torch
    import torch.distributed as dist
    from megatron.bridge.training.config import CheckpointConfig
    from megatron.bridge.training.state import GlobalState

    from nemo_resiliency_plugins.testing.mcore_checkpoint import Checkpointer, mb_save_strategy, sharded_state_dict
    from nemo_resiliency_plugins.testing.reference_config import reference_config

    rank = dist.get_rank()
    ok = True
    ballast = torch.randn(int(megabytes * 1024 * 1024 / 4), device="cuda")
    weight = torch.randn(256, 256, device="cuda")
    size = f"{megabytes:g}MB"
    if rank == 0:
        print(f"COPY size={size} GB/s: {_copy_rates(ballast)}", flush=True)

    def sharded():
        return sharded_state_dict({"w": weight}, {"ballast": ballast}, {"step": 1})

    def config(where: str, asynchronous: bool, constant: bool) -> CheckpointConfig:
        return CheckpointConfig(
            save=where, load=where, save_interval=1, async_save=asynchronous, ckpt_assume_constant_structure=constant
        )

    # -- the synchronous stall: what a save costs training without async -----------------------------------
    sync_s: dict[str, float] = {}
    for constant in (False, True):
        where = f"{base}/{size}-sync-{'constant' if constant else 'default'}"
        cfg = config(where, False, constant)
        saver = Checkpointer(None, cfg, mb_save_strategy(cfg))
        times = []
        for step in range(1, timed + 2):
            dist.barrier()
            started = time.perf_counter()
            saver.save_persistent(step, sharded())
            times.append(time.perf_counter() - started)
            dist.barrier()
            if rank == 0:
                _rm(f"{where}/iter_{step:07d}")
        key = "constant" if constant else "default"
        sync_s[key] = _median(times[1:])
        if rank == 0:
            print(
                f"SYNC size={size} setting={key} first_s={times[0]:.3f} median_s={sync_s[key]:.3f} "
                "saves_s=" + ",".join(f"{t:.3f}" for t in times[1:]),
                flush=True,
            )

    x = torch.randn(2048, 2048, device="cuda") / 50
    for setting in settings:
        constant = setting in ("constant", "cpu_shm")
        shm = setting == "cpu_shm"
        where = f"{base}/{size}-async-{setting}"
        cfg = reference_config(where)
        cfg.checkpoint = config(where, True, constant)
        state = GlobalState()
        state.cfg = cfg
        if shm:  # what Megatron-LM's own loop builds; Megatron Bridge 0.6.2's GlobalState passes no cpu_shm_mode
            from nvidia_resiliency_ext.checkpointing.async_ckpt.core import AsyncCallsQueue

            state._async_calls_queue = AsyncCallsQueue(persistent=True, cpu_shm_mode=True)
            AsyncCallsQueue.warmup_persistent_caller(rank, cpu_shm_mode=True)
        saver = Checkpointer(state, cfg.checkpoint, mb_save_strategy(cfg.checkpoint, cpu_shm_mode=shm))
        idle_ms = _median_step_ms(x)
        started = time.perf_counter()
        saver.save_persistent(1, sharded())
        saver.finalize(blocking=True)
        first_async_s = time.perf_counter() - started
        schedules, extras, during_all, writes = [], [], [], []
        for step in range(2, timed + 2):
            dist.barrier()
            started = time.perf_counter()
            saver.save_persistent(step, sharded())
            schedule_s = time.perf_counter() - started
            during = []
            busy = torch.ones(1, device="cuda")
            # every rank runs the same steps (finalize is collective); 600 s caps a write that never ends
            while busy.item() and time.perf_counter() - started < 600:
                t0 = time.perf_counter()
                _step(x)
                saver.finalize(blocking=False)
                during.append((time.perf_counter() - t0) * 1000)
                busy = torch.tensor([float(saver.pending())], device="cuda")
                dist.all_reduce(busy, op=dist.ReduceOp.MAX)
            writes.append(time.perf_counter() - started)
            schedules.append(schedule_s)
            # what the save cost training: scheduling it, plus whatever the steps during it took beyond an idle step
            extras.append(schedule_s + max(0.0, sum(during) / 1000.0 - len(during) * idle_ms / 1000.0))
            during_all += during
            if rank == 0:
                _rm(f"{where}/iter_{step - 1:07d}")
        started = time.perf_counter()
        saver.finalize(blocking=True, terminate=True)
        finalize_s = time.perf_counter() - started
        extra_s = _median(extras)
        stall = sync_s["default"]
        good = extra_s <= 0.1 * stall and saver.newest_persistent() == timed + 1
        ok &= good
        if rank == 0:
            print(
                f"ASYNC size={size} setting={setting} first_async_save_s={first_async_s:.3f} "
                f"sync_save_s={stall:.3f} sync_constant_s={sync_s['constant']:.3f} "
                f"schedule_s={_median(schedules):.3f} step_ms_idle={idle_ms:.2f} "
                f"step_ms_during_save={_median(during_all):.2f} steps_during_save={len(during_all) // timed} "
                f"write_s={_median(writes):.3f} extra_s={extra_s:.3f} pct_of_sync={100 * extra_s / stall:.1f} "
                f"finalize_s={finalize_s:.3f} ok={good}",
                flush=True,
            )
            print(
                f"ASYNC_SAVES size={size} setting={setting} async_extra_s="
                + ",".join(f"{t:.3f}" for t in extras)
                + " schedule_s="
                + ",".join(f"{t:.3f}" for t in schedules),
                flush=True,
            )
            _rm(where)
    ballast = None  # noqa: F841 (freed before the next size's)
    torch.cuda.empty_cache()
    return ok


def main() -> int:
    from nemo_resiliency_plugins.testing.te_compat import ensure_megatron_bridge_importable

    ensure_megatron_bridge_importable()
    import os

    import torch
    import torch.distributed as dist
    from megatron.bridge.training.config import CheckpointConfig

    from nemo_resiliency_plugins.testing.mcore_checkpoint import Checkpointer, plain, sharded_state_dict

    base = sys.argv[1]
    sizes = [float(v) for v in (sys.argv[2] if len(sys.argv) > 2 else "512").split(",")]
    settings = tuple(os.environ.get("NRP_CKPT_SETTINGS", "default,constant").split(","))
    unknown = [s for s in settings if s not in SETTINGS]
    if unknown:
        raise SystemExit(f"NRP_CKPT_SETTINGS: unknown {unknown}; known: {', '.join(SETTINGS)}")
    # cpu_shm (not reachable through Megatron Bridge) is measured at the first size only
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    ok = True
    for i, megabytes in enumerate(sizes):
        chosen = settings if i == 0 else tuple(s for s in settings if s != "cpu_shm")
        ok &= measure(base, megabytes, chosen)
    ballast = torch.randn(int(sizes[0] * 1024 * 1024 / 4), device="cuda")
    weight = torch.randn(256, 256, device="cuda")

    def sharded():
        return sharded_state_dict({"w": weight}, {"ballast": ballast}, {"step": 1})

    # -- REPLICA and FULLY_PARALLEL ------------------------------------------------------------------------
    for case, extra in (
        (
            "REPLICA",
            dict(replication=True, replication_jump=1, replication_factor=2, non_persistent_local_ckpt_algo="atomic"),
        ),
        ("FULLY_PARALLEL", dict(non_persistent_local_ckpt_algo="fully_parallel")),
    ):
        if case == "REPLICA" and dist.get_world_size() < 2:
            if rank == 0:
                print("REPLICA skipped: needs 2 ranks on 2 GPUs (NCCL cannot pair two ranks on one GPU)", flush=True)
            continue
        local_dir = f"{base}/local-{case.lower()}"
        ckpt = CheckpointConfig(
            save=f"{base}/p",
            load=f"{base}/p",
            save_interval=10,
            non_persistent_ckpt_type="local",
            non_persistent_local_ckpt_dir=local_dir,
            non_persistent_save_interval=1,
            **extra,
        )
        Checkpointer(None, ckpt).save_local(1, sharded())
        dist.barrier()
        if case == "REPLICA" and rank == 1:
            shutil.rmtree(f"{local_dir}/1")
        dist.barrier()
        fresh = Checkpointer(None, ckpt)
        template = sharded_state_dict(
            {"w": torch.empty_like(weight)}, {"ballast": torch.empty_like(ballast)}, {"step": None}
        )
        chosen = fresh.choose(persistent_step=-1)
        loaded = plain(fresh.load_local(template), ("ballast",))
        good = chosen == ("local", 1) and all(
            torch.equal(loaded[k].cpu(), v.cpu()) for k, v in (("w", weight), ("ballast", ballast))
        )
        flags = torch.tensor([int(good)], device="cuda")
        dist.all_reduce(flags, op=dist.ReduceOp.MIN)
        ok &= bool(flags.item())
        if rank == 0:
            label = "REPLICA rank=1 recovered" if case == "REPLICA" else "FULLY_PARALLEL recovered"
            print(f"{label}={bool(flags.item())}", flush=True)
    dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
