"""The recovery benchmark's fixed settings: the workload's shape, the faults, Megatron Bridge's defaults it is
compared with, the speed targets, the table's rows and the names of the cases and variants.
"""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
STEPS = 20  # the reference config's train.train_iters
SAVE_INTERVAL = 5  # the reference config's checkpoint.save_interval
FAULT_STEP = 13  # every recovery resumes from the step-10 checkpoint
FAULT_RANK = 1
RESTARTS = 3
MB_DEFAULT_STEP_TIMEOUT_S = 180.0  # Megatron Bridge's FaultTolerancePlugin / documented section timeouts
MB_DEFAULT_CHECK_INTERVAL_S = 5.0
MB_DEFAULT_PG_TIMEOUT_S = 600.0  # Megatron Bridge's dist.distributed_timeout_minutes = 10
HANG_SECTION_TIMEOUTS = {"setup": 120.0, "step": 5.0, "checkpointing": 60.0}
HANG_CHECK_INTERVAL_S = 1.0
TARGETS = {
    "ft_step_overhead": 1.02,
    "kill_time_lost": 1.2,
    "reserve_time_lost": 0.3,
    "hang_computed_s": 10.0,
    "import": 1.10,
}

ROWS = tuple("1a 1b 1c 1f 1d 1e 2a 2b 2c 2d 2e 2f 2g 2h 3a 3b 3c 3d 4a 4b 5a 5b 5c".split())  # every row of the table


TORCHRUN = "torchrun"
FT = "ft_launcher + plugin"
HANG_EXPLICIT = "explicit timeouts"
HANG_COMPUTED = "computed timeouts"
LAUNCHER_RESTART = "ft_launcher restart"
INPROCESS = "in-process restart"
RESERVE = "in-process + warm reserve"


CASES = ("fault-free", "kill", "hang", "raise")
