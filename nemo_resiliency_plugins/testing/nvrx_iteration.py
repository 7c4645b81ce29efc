"""NVRx's in-process restart iteration, read from the ``CallWrapper`` that is running the training function.

TEST ACCOMMODATION (Megatron-Bridge#5187): Megatron Bridge 0.6.2's adapter around the training function has no
parameter annotated ``CallWrapper``, so NVRx injects none and the training function gets
``inprocess_call_wrapper=None``. The workload needs the iteration number for its per-iteration store prefix,
the same on every active rank. Counting its own entries is right only while every rank enters every iteration;
a warm reserve rank enters the training function for the first time in a *later* iteration (it waits inside
NVRx's ``reserve_fn`` until then), so it would count 0 where the others count 1 and the ranks would rendezvous
under different prefixes. The iteration is therefore read from NVRx's own ``CallWrapper``, which is on the call
stack (its ``__call__`` runs the function), and only when that cannot be found does the count stand in.
"""

from __future__ import annotations

import sys

__all__ = ["restart_iteration"]


def restart_iteration(fallback: int) -> int:
    """The iteration of the NVRx ``CallWrapper`` on the call stack, or ``fallback`` when there is none."""
    from nvidia_resiliency_ext.inprocess.wrap import CallWrapper

    frame = sys._getframe(1)
    while frame is not None:
        candidate = frame.f_locals.get("self")
        if isinstance(candidate, CallWrapper) and candidate.state is not None:
            return int(candidate.state.iteration)
        frame = frame.f_back
    return fallback
