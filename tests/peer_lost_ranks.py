"""Two gloo ranks under a launcher: rank 1 is SIGKILLed after one all_reduce, rank 0 fails in the next one with
gloo's lost-connection error (test fixture program; ``tests/unit/test_report_exit_cause.py``).

torch's elastic agent names one failure per poll. With a poll interval longer than rank 0 takes to fail after rank 1
died, one poll sees both, and torch logs rank 0's exit 1, not rank 1's SIGKILL: the case ``report`` has to read right.
"""

import os
import signal

import torch
import torch.distributed as dist


def main() -> None:
    dist.init_process_group("gloo")
    tensor = torch.ones(4)
    dist.all_reduce(tensor)
    if dist.get_rank() == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    dist.all_reduce(tensor)  # rank 0: "Connection closed/reset by peer"


if __name__ == "__main__":
    main()
