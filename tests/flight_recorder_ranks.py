"""Two gloo ranks that leave flight-recorder dumps of a collective only one of them entered (test fixture program).

Run as ``python flight_recorder_ranks.py RANK WORLD STORE_FILE`` with the environment
``FaultTolerancePlugin(diagnostics=True)`` gives a job. Every rank runs three all_reduces; rank 0 then starts a
fourth that rank 1 has not reached, and each rank writes its flight recorder (torch's own ``_dump_fr_trace``) to
``$TORCH_FR_DUMP_TEMP_FILE<rank>``, the file an NCCL watchdog would write on a timeout (gloo records the same
buffer but has no watchdog to write it). Then rank 1 joins the fourth collective so both end cleanly.
"""

import os
import sys

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import _dump_fr_trace


def main() -> None:
    rank, world, store = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    tensor = torch.ones(8)
    for _ in range(3):
        dist.all_reduce(tensor)
    pending = dist.all_reduce(tensor, async_op=True) if rank == 0 else None
    dist.barrier(group=dist.new_group(backend="gloo"))  # both ranks are here: rank 0 inside #4, rank 1 not
    with open(os.environ["TORCH_FR_DUMP_TEMP_FILE"] + str(rank), "wb") as out:
        out.write(_dump_fr_trace())
    if pending is None:
        dist.all_reduce(tensor)
    else:
        pending.wait()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
