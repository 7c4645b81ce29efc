"""GPU mode of the reference workload (``NRP_DEVICE=cuda``): model and batches on the rank's GPU, NCCL.

On CPU (the default) the process group is gloo and the step's extra compute time is a sleep; in GPU mode it is
a real GPU kernel of that length, so that CUPTI (and with it NVRx's straggler scores) sees a slowed step.
"""

from __future__ import annotations

import os
import time

import torch

__all__ = [
    "DEVICES",
    "DEVICE_ENV",
    "backend_for",
    "cuda_device_index",
    "device_from_env",
    "spend_compute_time",
    "torch_device",
]

# ----------------------------------------------------------------------------------------------------------
DEVICE_ENV = "NRP_DEVICE"
DEVICES = ("cpu", "cuda")


def device_from_env(env: dict[str, str] | None = None) -> str:
    """``NRP_DEVICE``: ``cpu`` (default: gloo, CPU tensors) or ``cuda`` (NCCL, tensors on the rank's GPU)."""
    env = os.environ if env is None else env
    value = env.get(DEVICE_ENV, "").strip().lower() or "cpu"
    if value not in DEVICES:
        raise ValueError(f"{DEVICE_ENV}={value!r}: expected one of {', '.join(DEVICES)}")
    return value


def backend_for(device: str) -> str:
    """The process-group backend for a device: NCCL for ``cuda`` (one GPU per rank), gloo for ``cpu``."""
    if device not in DEVICES:
        raise ValueError(f"device {device!r}: expected one of {', '.join(DEVICES)}")
    return "nccl" if device == "cuda" else "gloo"


def cuda_device_index(env: dict[str, str] | None = None) -> int:
    """The GPU a rank uses in GPU mode: its ``LOCAL_RANK`` (0 when launched plainly)."""
    env = os.environ if env is None else env
    return int(env.get("LOCAL_RANK", "0"))


def torch_device() -> torch.device:
    if device_from_env() == "cuda":
        return torch.device("cuda", cuda_device_index())
    return torch.device("cpu")


_SPIN_CYCLES_PER_S: list[float] = []


def spend_compute_time(seconds: float) -> None:
    """The step's extra compute time: a sleep on CPU; in GPU mode a real GPU kernel that runs that long
    (``torch.cuda._sleep`` spins for a number of GPU clock cycles, calibrated once), so that CUPTI's kernel
    timings, and with them NVRx's GPU scores, see a slowed step as they would see a slow GEMM."""
    if seconds <= 0:
        return
    if device_from_env() != "cuda":
        time.sleep(seconds)
        return
    if not _SPIN_CYCLES_PER_S:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(1_000_000)  # warm-up
        start.record()
        torch.cuda._sleep(20_000_000)
        end.record()
        end.synchronize()
        _SPIN_CYCLES_PER_S.append(20_000_000 / (start.elapsed_time(end) / 1e3))
    torch.cuda._sleep(int(seconds * _SPIN_CYCLES_PER_S[0]))
