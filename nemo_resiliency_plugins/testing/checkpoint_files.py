"""The reference workload's checkpoint files: written atomically (a reader never sees half a file), the newest
found by name, the tracker file named and filled as Megatron Bridge fills its own.
"""

from __future__ import annotations

import io
import os
import re
from typing import Any

import torch

__all__ = [
    "CKPT_FORMAT",
    "FINAL_PARAMS",
    "TRACKER_FILE",
    "atomic_torch_save",
    "atomic_write_bytes",
    "checkpoint_step",
    "newest_checkpoint",
]

TRACKER_FILE = "latest_checkpointed_iteration.txt"
FINAL_PARAMS = "final_params.pt"
CKPT_FORMAT = "nrp-reference-workload/1"
_CKPT_RE = re.compile(r"iter_(\d{7,})\.pt")


def atomic_write_bytes(path: str, data: bytes) -> None:
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def atomic_torch_save(obj: Any, path: str) -> None:
    buf = io.BytesIO()
    torch.save(obj, buf)
    atomic_write_bytes(path, buf.getvalue())


def newest_checkpoint(directory: str | None) -> str | None:
    if not directory or not os.path.isdir(directory):
        return None
    best: tuple[int, str] | None = None
    for name in os.listdir(directory):
        m = _CKPT_RE.fullmatch(name)
        if m and (best is None or int(m.group(1)) > best[0]):
            best = (int(m.group(1)), os.path.join(directory, name))
    return best[1] if best else None


def checkpoint_step(path: str | None) -> int:
    """The step of a checkpoint file ``newest_checkpoint`` returned, -1 for None."""
    if path is None:
        return -1
    m = _CKPT_RE.fullmatch(os.path.basename(path))
    return int(m.group(1)) if m else -1
