"""Worker of run.sh: job A ends after 6 s; in job B rank 1 fails once after 12 s (cycle 0), then both finish."""

import os
import sys
import time

pair = os.environ["PAIR"]
restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
rank = int(os.environ["RANK"])
if pair == "A":
    time.sleep(6)
    sys.exit(0)
if restart == 0 and rank == 1:
    time.sleep(12)
    sys.exit(1)
time.sleep(14 if restart == 0 else 1)
print(f"B rank {rank} cycle {restart} done", flush=True)
