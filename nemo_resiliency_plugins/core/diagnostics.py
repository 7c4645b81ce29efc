"""What ``FaultTolerancePlugin(diagnostics=True)`` puts into a job so that a hang can be attributed after the fact.

Two records, both written only when something went wrong, both read by ``nemo-resiliency report``:

* **Python's stack dump.** ``PYTHONFAULTHANDLER=1``: when NVRx's rank monitor stops a hung rank with SIGABRT,
  Python's faulthandler prints every thread's stack to the rank's stderr (its log) before the process dies
  (``tools/report/stacks.py`` reads it).
* **PyTorch's collective flight recorder.** Each rank keeps a ring buffer of its last collectives (sequence number,
  operation, sizes, state, the Python frames that issued it). With NCCL, when a collective outlives the process
  group's timeout, the watchdog writes every rank's buffer to ``<prefix><global rank>`` (the other ranks are told
  through the store to dump theirs too), so the report can say which rank never entered the collective the others
  waited in (``tools/report/flight.py``). Gloo records the same buffer but has no watchdog that writes it.

The flight recorder's dump only happens when the *process group's* timeout fires (Megatron Bridge's
``dist.distributed_timeout_minutes``, 10 minutes by default). A hang NVRx's section timeout stops first leaves the
stacks, not the dump; :func:`flight_recorder_note` says so in the plugin's set-up log.

Torch renamed the variables (``TORCH_NCCL_TRACE_BUFFER_SIZE`` -> ``TORCH_FR_BUFFER_SIZE``,
``TORCH_NCCL_DEBUG_INFO_TEMP_FILE`` -> ``TORCH_FR_DUMP_TEMP_FILE``). Both dump-path names are set (a torch of
either age finds one it reads). The buffer size goes under the new name only: a newer torch prints a deprecation
warning on every rank for the old one, and NCCL's recorder in the torch releases before the rename already keeps a
buffer by default (pytorch/pytorch#142260).
"""

from __future__ import annotations

#: The dump file name before the rank number: ``<job dir>/flight_recorder_rank_<global rank>``.
FLIGHT_RECORDER_PREFIX = "flight_recorder_rank_"
#: Entries each rank keeps (torch's default is 0: off). A few thousand cover many steps of a model's collectives at
#: a few hundred bytes each plus the frames; torch's own examples use 2000.
FLIGHT_RECORDER_ENTRIES = 2000

#: The variables; their values come from :func:`diagnostics_env`.
BUFFER_VARS = ("TORCH_FR_BUFFER_SIZE",)
DUMP_FILE_VARS = ("TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE")
DUMP_ON_TIMEOUT_VAR = "TORCH_NCCL_DUMP_ON_TIMEOUT"
FAULT_HANDLER_VAR = "PYTHONFAULTHANDLER"


def dump_prefix(job_dir: str) -> str:
    """Where the flight recorder writes, as the job's processes see the job directory."""
    return f"{job_dir.rstrip('/')}/{FLIGHT_RECORDER_PREFIX}"


def diagnostics_env(job_dir: str | None) -> dict[str, str]:
    """The environment ``diagnostics=True`` gives every rank. Without a job directory the job can see (an executor
    with no shared folder) the flight recorder still records but its dump stays at torch's default ``/tmp`` path of
    each node, and :func:`flight_recorder_note` says so."""
    env = {FAULT_HANDLER_VAR: "1", DUMP_ON_TIMEOUT_VAR: "1"}
    env.update({name: str(FLIGHT_RECORDER_ENTRIES) for name in BUFFER_VARS})
    if job_dir:
        env.update({name: dump_prefix(job_dir) for name in DUMP_FILE_VARS})
    return env


def flight_recorder_note(job_dir: str | None) -> str:
    """One sentence for the plugin's set-up log: when the dump is written, and where."""
    where = f"{dump_prefix(job_dir)}<rank>" if job_dir else "torch's default /tmp/nccl_trace_rank_<rank> on each node"
    return (
        f"collective flight recorder: the last {FLIGHT_RECORDER_ENTRIES} collectives of each rank, written to {where} "
        "when an NCCL collective outlives the process group's timeout (dist.distributed_timeout_minutes); a hang "
        "NVRx's section timeout stops first leaves the stack dumps instead; gloo records but never writes it"
    )
