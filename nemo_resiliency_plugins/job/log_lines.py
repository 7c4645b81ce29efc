"""Every log line the package reads, each pattern once: the one owner of "what does that line look like".

Why one module: the same launcher and rank lines were parsed by the report, the rehearsal's watch, the tests and
the benchmarks, each with its own copy of the regex, so an upstream rewording meant edits in many places (issue 51).
Each pattern below names the upstream it was read from and has a fixture line in :data:`FIXTURES` that
``tests/unit/test_log_lines.py`` matches; a rewording upstream is one edit here plus its fixture.

Standard library only (``job/``): the batch host and a rank may import it without NeMo-Run, torch or NVRx.

Upstream versions read (in ``.venv``): NVRx (nvidia_resiliency_ext) 0.7.0 -- ``ft_launcher``'s launcher and rank
monitor; torch 2.x ``torch.distributed.elastic`` (torchrun's agent, glog-style lines); Slurm 22.05 ``srun``;
Megatron Bridge 0.6.2 ``training/`` (training_log, checkpointing, straggler, exit handler); the reference workload
in :mod:`nemo_resiliency_plugins.testing.workload`; and the requeue guard's own ``nemo-resiliency-plugins:`` lines
(``core/sbatch/*.sh``).

Verdicts come from launcher lines only (:func:`is_launcher_line`): NVRx's tagged lines (its log format,
``infra:<task>``), torch elastic's agent lines (its own modules' glog format), srun's own stderr and the guard's lines.
A rank may print any of them verbatim (``testing/faults.py``'s ``SPOOF_LINES``), under torch's ``[default<N>]:`` prefix.
So the report's "finished" is torch's agent's :data:`TORCH_GROUP_FINISHED` (every worker of the group exited 0; not a
straggler stop or a signal's exit, whose workers exit 0 too), and the workload's ``FINISHED step=`` line is only the
step figure; only an attempt where no launcher wrote a line at all (a plain interpreter under srun, nothing to ask)
takes the workload's line as the only evidence there is.

Structured sources we prefer, where there is one: the workers' and launchers' exit codes (Slurm's accounting, the batch
script's ``exitcode``, NeMo-Run's job state; the guard and tests read these first), the ``ft_state.json`` Megatron
Bridge keeps for NVRx (the section timeouts NVRx computed from observed times, which ``doctor`` reads), and Megatron
Bridge's tracker ``latest_checkpointed_iteration.txt`` (the last saved iteration, which the tests read). What remains a
log line, because NVRx 0.7.0 offers no structured source for it: the per-cycle profiling events (``Cycle: N Event:
...``: written only to the launcher's log, no file, no API outside the launcher process), the rank monitor's section,
out-of-section and heartbeat timeouts and which rank's monitor fired, the no-restart verdict and its reason, the
rendezvous's rank assignment (which node holds which ranks), torch's agent's restart count, exits and success (its
events go to a metrics handler the launcher does not configure), srun's node lines, and Megatron Bridge's training_log,
checkpoint and straggler lines (the tracker is overwritten by each save and says nothing of which cycle saved what, so
the per-cycle checkpoint list still comes from the lines). NVRx main adds per-cycle telemetry (OpenTelemetry spans,
``NVRX_CYCLE`` in the workers' environment); 0.7.0 has none of it, so nothing here can use it yet.

Tests and benchmarks take these patterns too (or :func:`exact`, a pattern with its groups fixed to one step or rank);
``tests/unit/test_log_lines.py`` fails on a regex literal of an owned line in ``tests/`` or ``benchmarks/``. Kept there,
on purpose: fixtures of raw log text (the lines as upstream writes them: a fixture is the text, not a reading of it);
plain substring asserts and ``grep("...")`` calls whose meaning is the text itself (e.g. ``"will restart worker group"
in logs``: the test asserts that exact upstream wording appeared, which a pattern would only restate); the requeue
guard's own messages asserted word for word (``sent SIGTERM to task pid``...: their wording is what those tests test);
the tests' own programs' lines (``task N of 2 on``, ``container entry: got SIGTERM``); the timestamp parsers of
``benchmarks/recovery_lib/logs.py`` (any glog line, not only torch's launcher modules, with the fields split for
arithmetic); and keyword excerpts in ``benchmarks/gpu`` (case-insensitive words such as ``Traceback``, chosen for a
human to read, not a line's shape).

The sbatch guard reads some of the same lines in awk / ``grep -E`` (``core/sbatch/*.sh``). Bash cannot import this
module, so the extended regular expressions it uses are kept here as strings (:data:`GUARD_ERE`), assigned the same
text in ``core/sbatch/log_lines.sh``, the only place the other blocks take them from (a test compares the two).
"""

from __future__ import annotations

import re

# ---- NVRx 0.7.0 (ft_launcher: launcher, rank monitor) ---------------------------------------------------------
#: NVRx's logging prefix: local time, milliseconds (``match`` at the line's start).
NVRX_STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) ")
#: NVRx's profiling event (launcher): cycle, event, launcher ``<host>_<pid>_<n>``, its group rank, UTC time.
NVRX_EVENT = re.compile(
    r"Cycle: (\d+) Event: (\w+) Node: (\S+) Rank: (\S+) Time: (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+)"
)
#: NVRx's launcher when it gives up: every failure of the last poll, then one ProcessFailure per worker.
NVRX_ALL_FAILURES = re.compile(r"Some rank\(s\) exited with non-zero exit code: ")
NVRX_FAILURE = re.compile(r"\d+: ProcessFailure\(local_rank=(\d+), pid=\d+, exitcode=(-?\d+)")
#: The rank monitor's timeouts: a section open too long, out of any section too long, a missing heartbeat.
NVRX_SECTION = re.compile(r"Section '(\w+)' has been open for ([0-9.]+) seconds(?:\. Timeout is ([0-9.]+) seconds)?")
NVRX_OUT_OF_SECTION = re.compile(r"Was out of section for ([0-9.]+) seconds")
NVRX_HEARTBEAT = re.compile(r"Did not get (initial|subsequent) heartbeat")
#: The monitored rank in the monitor's logger name (``[workload:<pid>(<rank>)...``).
NVRX_MONITOR_RANK = re.compile(r"\[workload:\S*?\((\d+)\)")
#: The launcher's rendezvous (tagged ``infra:<task>(<pid>)]``): which launcher task holds which group of ranks.
NVRX_ASSIGNED = re.compile(r"infra:(\d+)\(\d+\)\].*\bAssigned active rank (\d+) \(round=(\d+)\)")
#: torch's agent state as NVRx's launcher logs it, and its decision to restart.
#: launcher.py main(): the no-restart verdict (its reason) and the agent's exit code (launcher lines only: a rank may
#: print either; the guard's NRP_RE_NO_RESTART / NRP_RE_EXIT_* read the same lines).
NVRX_NO_RESTART = re.compile(r"NVRx decided the job must not be restarted \(([A-Za-z_]+)\)")
NVRX_AGENT_EXIT = re.compile(r"exit code = (\d+)")
NVRX_WORKER_GROUP = re.compile(r"Worker group (FAILED|UNHEALTHY)")
NVRX_WILL_RESTART = re.compile(r"will restart worker group")
#: progress_tracker.py: a cycle that saved a new checkpoint (the no-progress count starts again).
#: The store host's launcher lingers a few seconds so the others can read the final store state (one per job run).
NVRX_STORE_HOST_WAITING = re.compile(r"Store host waiting ([0-9.]+) seconds before exit")
#: NVRx's barrier rendezvous (ft_rendezvous_barrier.py) gave up waiting for enough nodes (no spare left).
NVRX_RDZV_TIMEOUT = re.compile(r"rendezvous has timed out after ([0-9.]+) seconds \(timeout: ([0-9.]+)s?\)")
NVRX_PROGRESS = re.compile(r"Training cycle #(\d+) made progress")
#: NVRx's straggler report, one line per rank (straggler_det_callback.py's and Megatron Bridge's report format).
NVRX_STRAGGLER_SCORE = re.compile(r"Rank=(\d+)\s+Node=\S*\s+Score=([0-9.]+|nan)")

# ---- torch 2.x elastic (torchrun's agent; NVRx's launcher reuses it) ------------------------------------------
#: glog-style stamp of torch's launcher modules: month, day, time, pid, no year (``match``). Only its own modules:
#: a rank run by a plain interpreter logs torch's import warnings in the same format, which no launcher timed.
#: The file is named as torch's logging finds it: ``torch/distributed/...`` on the path, or a longer path to the same
#: module (``.venv/lib/python3.12/site-packages/torch/...`` inside NeMo-Run's Docker container): any prefix.
TORCH_GLOG = re.compile(
    r"^[IWEF](\d\d)(\d\d) (\d\d:\d\d:\d\d\.\d+) +(\d+) (?:\S*/)?torch/distributed/(?:run|launcher/|elastic/)"
)
TORCH_RESTART = re.compile(r"\brestart_count=(\d+)\b")
#: The agent's success (api.py ``_invoke_run``, also in NVRx's launcher.py): every worker of its group exited 0. The
#: report's "finished" verdict comes from this launcher line, never from the workload's ``FINISHED step=`` line.
TORCH_GROUP_FINISHED = re.compile(r"\[\w+\] worker group successfully finished\.")
TORCH_EXITCODE = re.compile(r"failed \(exitcode: (-?\d+)\) local_rank: (\d+)")
#: The same exit in the error summary torch prints when the agent gives up (errors/__init__.py's table).
TORCH_SUMMARY_EXITCODE = re.compile(r"^\s*exitcode\s*: (-?\d+) \(pid: \d+\)")
#: The launch config torch's agent prints: the rendezvous endpoint's port.
TORCH_RDZV_PORT = re.compile(r"rdzv_endpoint\s*: \S+:(\d+)")
#: The launch config torch's agent prints (``fullmatch``).
TORCH_NPROC = re.compile(r"\s*nproc_per_node\s*:\s*(\d+)\s*")
#: A rank's line as torch elastic prefixes it (``fullmatch``), srun's task label before it on Slurm.
TORCH_RANK_LINE = re.compile(r"(?P<who>(?:\d+: )?\[default(?P<local>\d+)\]:(?:\[rank(?P<rank>\d+)\]:)?)(?P<rest>.*)")
#: A rank's own output saying a peer's connection went away (gloo's TCP pair; NCCL's remote error), ``match``.
#: The agent's config dump: the node range the launcher was given (``--nnodes min:max``; the tests read both).
TORCH_NODES_RANGE = re.compile(r"\s*(min_nodes|max_nodes)\s*: (\d+)\s*")
TORCH_PEER_LOST = re.compile(
    r"(?:(\d+): )?\[default(\d+)\]:.*"
    r"(?:Connection (?:closed|reset) by peer|remote process exited or there was a network)"
)

# ---- Python's faulthandler, in a rank's stream (FaultTolerancePlugin(diagnostics=True)) ------------------------
#: A line that can belong to a faulthandler dump (``search``).
FAULTHANDLER_LINE = re.compile(
    r'\[default\d+\]:(?:\[rank\d+\]:)? ?(Fatal Python error: |(Current thread|Thread) 0x|\s+File "|Extension modules: )'
)
FAULTHANDLER_THREAD = re.compile(r"^(Current thread|Thread) 0x[0-9a-f]+ \(most recent call first\):")
FAULTHANDLER_FRAME = re.compile(r'^\s+File "(?P<path>[^"]+)", line (?P<line>\d+) in (?P<func>\S+)')

# ---- Slurm 22.05 (srun's own stderr; NeMo-Run's batch script under ``set -x``) ----------------------------------
#: srun's task label (``match``) where the step's output carries one.
SRUN_TASK = re.compile(r"(\d+): ")
#: srun's error line for a task (``fullmatch``).
SRUN_ERROR = re.compile(r"srun: error: ([A-Za-z0-9._-]+): tasks? ([0-9,-]+): (.+)")
#: srun could not start a step at all (e.g. a node list that names a drained node): no task ran, no node to blame.
SRUN_STEP_REFUSED = re.compile(r"srun: error: Unable to create step for job (\d+)")
#: Each attempt's start in the batch log (bash's trace; bash quotes the list where needed), ``fullmatch``.
SBATCH_HOSTNAMES = re.compile(r"\+\+ scontrol show hostnames ('?)([^' ]+)\1")

# ---- Megatron Bridge 0.6.2 (training/) -------------------------------------------------------------------------
#: training_log (every logger.log_interval iterations, last rank): time, iteration, ms per iteration.
MB_ITERATION = re.compile(
    r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\] iteration\s+(\d+)/\s*\d+ \|.*?"
    r"elapsed time per iteration \(ms\): ([0-9.]+) \|"
)
#: Megatron Bridge's setup (training/setup.py): the seconds since GlobalState was made (after the imports), then
#: barrier_and_log's stamped lines (whole seconds), in this order; the checkpoint is loaded between the model's and
#: the data loaders' lines (the reference workload prints the same lines at the same points): restart phases.
MB_INIT_SECONDS = re.compile(r"time to initialize megatron \(seconds\): ([0-9.]+)")
MB_SETUP_STAMP = re.compile(
    r"\[(after megatron is initialized|after model, optimizer, and learning rate scheduler are built|"
    r"after dataloaders are built)\] datetime: (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)"
)
MB_LOADED = re.compile(r"successfully loaded checkpoint from .* at iteration (\d+)")
MB_SAVED = re.compile(r"successfully saved checkpoint from iteration\s+(\d+)")
#: training/nvrx_straggler.py (rank 0): the warning, NVRx's StragglerId set in it, the stop line.
MB_STRAGGLERS = re.compile(r"STRAGGLER DETECTION WARNING: Some GPUs (have worse relative|performance dropped)")
MB_STRAGGLER_ID = re.compile(r"StragglerId\(rank=(\d+), node='([^']*)'\)")
MB_STRAGGLER_STOP = re.compile(r"Detected stragglers\. Training should be stopped\.")
#: training/train.py's exit handler after the save at a signal (barrier_and_log, rank 0).
MB_SIGNAL_EXIT = re.compile(r"\[exiting program after receiving SIGTERM\.\] datetime: (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)")

# ---- the reference workload (nemo_resiliency_plugins/testing/workload.py) --------------------------------------
WORKLOAD_INJECTED = re.compile(r"FAULT_INJECTED kind=(\w+) step=(\d+) rank=(\d+)")
WORKLOAD_RESUMED = re.compile(r"RESUMED from step (\d+)")
WORKLOAD_SAVED = re.compile(r"CHECKPOINT saved step=(\d+)")
WORKLOAD_FINISHED = re.compile(r"FINISHED step=(\d+)")
#: The final line with the parameters' hash (rank 0): what a test compares with the fault-free run.
WORKLOAD_FINISHED_HASH = re.compile(r"FINISHED step=(\d+) params_sha256=([0-9a-f]+)")
WORKLOAD_STARTING = re.compile(r"STARTING from scratch")
#: Each process's first line: its rank, the world size, torch elastic's restart count.
WORKLOAD_START = re.compile(r"\] START rank=(\d+) world=(\d+) restart=(\d+)")
WORKLOAD_EXIT_ON_STRAGGLER = re.compile(r"EXIT on straggler step=(\d+)")
#: testing/mcore_checkpoint.py: a local (node-local, every step) checkpoint and how long it took.
WORKLOAD_LOCAL_SAVED = re.compile(r"CHECKPOINT local step=(\d+) seconds=([0-9.]+)")
WORKLOAD_EXIT_ON_SIGNAL = re.compile(r"EXIT on signal step=(\d+)")
WORKLOAD_INPROCESS = re.compile(r"INPROCESS iteration=([1-9]\d*)")
#: The same line with the process and its Unix time (an in-process restart keeps the pid).
WORKLOAD_INPROCESS_TIMED = re.compile(r"INPROCESS iteration=(\d+) pid=(\d+) time=([0-9.]+)")
#: A Python exception a rank printed (torch elastic's ``[rank<N>]:`` prefix).
RANK_ERROR = re.compile(r"\[rank\d+\]: (\w+(?:Error|Exception|Interrupt)\b.*)")

# ---- both readers' unions (the workload's line or Megatron Bridge's) -------------------------------------------
RESUMED = re.compile(f"{WORKLOAD_RESUMED.pattern}|{MB_LOADED.pattern}")
SAVED = re.compile(f"{WORKLOAD_SAVED.pattern}|{MB_SAVED.pattern}")

# ---- the requeue guard's own lines (core/sbatch/*.sh) ----------------------------------------------------------
#: One guard line (``fullmatch``; bash's trace of the echo starts with ``+ `` and does not match).
GUARD = re.compile(r"nemo-resiliency-plugins: (.+)")
#: The silent-node verdict (``fullmatch`` on the guard line's text).
GUARD_SILENT = re.compile(r"node ([A-Za-z0-9._-]+) went silent(?:: (.*?))?(?:: the requeued job .*)?")
#: The guard stopped the step itself; the spare block's stop of a step with a task on a frozen node (``fullmatch``).
GUARD_STOPPING = re.compile(r".*stopping step \S+.*")
GUARD_FROZEN_STOP = re.compile(r".*\(a task on a frozen node\): stopping step .*")

# ---- the guard's extended regular expressions (core/sbatch/log_lines.sh: the same text there) ----------------
#: Each ERE the requeue guard reads (grep -E, awk), by its shell variable's name. Bash cannot import this module,
#: so core/sbatch/log_lines.sh assigns the same names the same text, character for character
#: (tests/unit/test_log_lines.py reads the file's assignments and compares both ways); the comments there name
#: each upstream line. Python reads the launcher-line shape from here too (:func:`is_launcher_line`).
GUARD_ERE: dict[str, str] = {
    "NRP_RE_LAUNCHER": r"^( *[0-9]+: )?[0-9]{4}-[0-9]{2}-[0-9]{2}"
    r" [0-9]{2}:[0-9]{2}:[0-9]{2}(,[0-9]{3})? \[[A-Z]+\] \[[^]]*\] ",
    "NRP_RE_RANK": r"^( *[0-9]+: )?\[[A-Za-z_]*[0-9]+\]:",
    "NRP_RE_RANK_DUMP": r"^\[[A-Za-z_]*[0-9]+\]:\[rank[0-9]+\]:",
    "NRP_RE_SRUN": r"^srun: ",
    "NRP_RE_SRUN_TASK_ERROR": r"^srun: error: [A-Za-z0-9._-]+: tasks? [0-9,-]+: ",
    "NRP_RE_INFRA_TAG": r"infra:[0-9]+\(",
    "NRP_RE_NO_RESTART": r"NVRx decided the job must not be restarted \([A-Za-z_]+\)",
    "NRP_RE_EXIT_ZERO": r"Agent exits with exit code = 0\.",
    "NRP_RE_EXIT_NONZERO": r"exit code = [1-9]",
    "NRP_RE_ASSIGNED": r"Assigned active rank [0-9]+ \(round=[0-9]+\)",
    "NRP_RE_NPROC": r"Using nproc_per_node=[0-9]+\.",
    "NRP_RE_TIMEOUT": r"has been open for [0-9.]+ seconds|Was out of section for|Did not get [a-z]+ heartbeat",
    "NRP_RE_WORKERS_FAILED": r"Worker group (FAILED|UNHEALTHY)|exited with non-zero",
    "NRP_RE_LAUNCHER_EXIT": r"exit code =|Launcher exiting",
    "NRP_RE_STRAGGLER_REPORT": r"STRAGGLER DETECTION WARNING: .*Affected ranks: \{[^}]*\}$",
    "NRP_RE_STRAGGLER_STOP": r"Exiting program due to straggler detection\.$",
}
#: A launcher's own line (NVRx 0.7's log_manager.py format, srun --label's "<task>: " in front where present): the
#: guard's NRP_RE_LAUNCHER, compiled (the ERE is valid Python syntax with the same meaning).
LAUNCHER_LINE = re.compile(GUARD_ERE["NRP_RE_LAUNCHER"])


def is_launcher_line(line: str) -> bool:
    """Whether a launcher wrote ``line``: NVRx's launcher or rank monitor (its log format), torch's elastic agent in
    the launcher process (its own modules' glog format), srun itself, or the requeue guard. Only these decide a
    verdict (a restart, a failure's exit code, a detection, a rank's node); a rank's output never does, since a rank
    may print NVRx's lines verbatim (issue 51). The guard's reading on the batch host is the same (log_lines.sh)."""
    return bool(
        LAUNCHER_LINE.match(line) or TORCH_GLOG.match(line) or line.startswith(("srun: ", "nemo-resiliency-plugins: "))
    )


def exact(pattern: re.Pattern[str], *values: object) -> re.Pattern[str]:
    """``pattern`` with its capture groups, in order, fixed to ``values`` (``None`` keeps that group as it is): the
    line of one known step or rank, e.g. ``exact(WORKLOAD_SAVED, 5)`` for "CHECKPOINT saved step=5", not 50. Tests
    and benchmarks wait for or count such lines; writing them from here keeps each line's shape in this module."""
    text, out, group, i, depth, start = pattern.pattern, [], 0, 0, 0, -1
    while i < len(text):
        char = text[i]
        if char == "\\":
            i += 2
            continue
        if char == "[":  # a character class: skip to its end ("]" first inside it is literal)
            i = text.index("]", i + 2 if text[i + 1 : i + 2] in ("]", "^") else i + 1) + 1
            continue
        if char == "(":
            depth += 1
            if depth == 1 and not text.startswith("(?", i):
                start = i
        elif char == ")":
            depth -= 1
            if depth == 0 and start >= 0:
                value = values[group] if group < len(values) else None
                if value is not None:
                    fixed = re.escape(str(value)) + (r"(?!\d)" if isinstance(value, int) else "")
                    out.append((start, i + 1, fixed))
                group, start = group + 1, -1
        i += 1
    if group < len(values):
        raise ValueError(f"{len(values)} values for {group} groups of {text!r}")
    for begin, end, fixed in reversed(out):
        text = text[:begin] + fixed + text[end:]
    return re.compile(text, pattern.flags)


#: Patterns whose readers use ``fullmatch`` (the fixture test does too).
FULLMATCH = frozenset(
    {"TORCH_NPROC", "TORCH_NODES_RANGE", "TORCH_RANK_LINE", "SRUN_ERROR",
     "SBATCH_HOSTNAMES", "GUARD", "GUARD_SILENT", "GUARD_STOPPING",
     "GUARD_FROZEN_STOP"}
)  # fmt: skip

#: One line each pattern matches, as the upstream writes it (tests/unit/test_log_lines.py matches every one).
FIXTURES: dict[str, str] = {
    "NVRX_STAMP": "2026-12-05 10:01:02,345 [INFO] [infra:0(4242)] ft_launcher: started",
    "NVRX_EVENT": "Cycle: 1 Event: worker_start_completed Node: nrp-node1_4242_0 Rank: 0 "
    "Time: 2026-12-05 10:01:02.345678",
    "NVRX_ALL_FAILURES": "Some rank(s) exited with non-zero exit code: {1: ProcessFailure(local_rank=1, ...",
    "NVRX_FAILURE": "1: ProcessFailure(local_rank=1, pid=4711, exitcode=-9",
    "NVRX_SECTION": "[Cycle 0] Section 'step' has been open for 6.22 seconds. Timeout is 6.00 seconds.",
    "NVRX_OUT_OF_SECTION": "Was out of section for 12.50 seconds. Timeout is 10.00 seconds.",
    "NVRX_HEARTBEAT": "Did not get subsequent heartbeat. Waited 30.00 seconds.",
    "NVRX_MONITOR_RANK": "[workload:4711(1)] rank monitor: Section 'step' has been open for 6.22 seconds.",
    "NVRX_ASSIGNED": "[infra:1(4243)] rendezvous: Assigned active rank 0 (round=2)",
    "NVRX_NO_RESTART": "NVRx decided the job must not be restarted (no_progress): Agent's exit code = 93",
    "NVRX_AGENT_EXIT": "[infra:0(4242)] Agent exits with exit code = 0.",
    "NVRX_WORKER_GROUP": "launcher.py:636 [default] Worker group UNHEALTHY. 3/3 attempts left",
    "NVRX_WILL_RESTART": "[default] Worker group FAILED. 2/3 attempts left; will restart worker group",
    "TORCH_GLOG": "I1231 23:59:58.123000 4242 torch/distributed/elastic/agent/server/api.py:680] restart_count=0",
    "TORCH_RESTART": "  restart_count=1",
    "TORCH_GROUP_FINISHED": "launcher.py:672 [default] worker group successfully finished. Waiting 300 seconds for "
    "other agents to finish.",
    "TORCH_EXITCODE": "failed (exitcode: -9) local_rank: 1 (pid: 4711) of binary: python",
    "TORCH_SUMMARY_EXITCODE": "  exitcode  : 17 (pid: 4711)",
    "TORCH_NPROC": "  nproc_per_node   : 2",
    "TORCH_RDZV_PORT": "  rdzv_endpoint    : nrp-node1:29500",
    "NVRX_PROGRESS": "Training cycle #1 made progress: iteration 10 -> 15",
    "NVRX_STRAGGLER_SCORE": "  Rank=1 Node=nrp-node2 Score=0.33",
    "WORKLOAD_START": "[rank0] START rank=0 world=2 restart=0",
    "WORKLOAD_EXIT_ON_STRAGGLER": "[rank0] EXIT on straggler step=12",
    "WORKLOAD_LOCAL_SAVED": "[rank0] CHECKPOINT local step=7 seconds=0.0123",
    "WORKLOAD_INPROCESS_TIMED": "[rank1] INPROCESS iteration=1 pid=4711 time=1733400000.25",
    "TORCH_RANK_LINE": "1: [default0]:[rank1]:[rank1] FINISHED step=40 params_sha256=ab",
    "NVRX_STORE_HOST_WAITING": "[infra:0(4242)] launcher.py:1776 Store host waiting 3.0 seconds before exit to allow "
    "other nodes to read final TCPStore state...",
    "TORCH_NODES_RANGE": "  min_nodes        : 2",
    "NVRX_RDZV_TIMEOUT": "RendezvousTimeoutError: The node 'nrp-node3_4242_0' rendezvous has timed out after 30.12 "
    "seconds (timeout: 30.0s).",
    "SRUN_STEP_REFUSED": "srun: error: Unable to create step for job 7: Invalid node list",
    "TORCH_PEER_LOST": "[default0]:RuntimeError: [../gloo/transport/tcp/pair.cc:534] Connection closed by peer",
    "FAULTHANDLER_LINE": "[default1]:Fatal Python error: Aborted",
    "FAULTHANDLER_THREAD": "Current thread 0x00007f0a (most recent call first):",
    "FAULTHANDLER_FRAME": '  File "/srv/train.py", line 12 in step',
    "SRUN_TASK": "1: [default0]:[rank1] CHECKPOINT saved step=20",
    "SRUN_ERROR": "srun: error: nrp-node2: task 1: Killed",
    "SBATCH_HOSTNAMES": "++ scontrol show hostnames 'nrp-node[1-3]'",
    "MB_ITERATION": "[2026-12-05 10:01:07] iteration       10/      40 | consumed samples: 80 | "
    "elapsed time per iteration (ms): 101.5 | learning rate: 1.0E-04 |",
    "MB_INIT_SECONDS": "time to initialize megatron (seconds): 12.345",
    "MB_SETUP_STAMP": "[after model, optimizer, and learning rate scheduler are built] datetime: 2026-12-05 10:01:02",
    "MB_LOADED": "successfully loaded checkpoint from /ckpt at iteration 20",
    "MB_SAVED": "successfully saved checkpoint from iteration      20 to /ckpt",
    "MB_STRAGGLERS": "STRAGGLER DETECTION WARNING: Some GPUs have worse relative performance. Affected ranks: "
    "{StragglerId(rank=1, node='nrp-node2')}",
    "MB_STRAGGLER_ID": "{StragglerId(rank=1, node='nrp-node2')}",
    "MB_STRAGGLER_STOP": "Detected stragglers. Training should be stopped.",
    "MB_SIGNAL_EXIT": "[exiting program after receiving SIGTERM.] datetime: 2026-12-05 10:01:09",
    "WORKLOAD_INJECTED": "[rank1] FAULT_INJECTED kind=kill step=25 rank=1",
    "WORKLOAD_RESUMED": "[rank0] RESUMED from step 20 (iter_0000020.pt)",
    "WORKLOAD_SAVED": "[rank0] CHECKPOINT saved step=20",
    "WORKLOAD_FINISHED": "[rank0] FINISHED step=40 params_sha256=ab",
    "WORKLOAD_FINISHED_HASH": "[rank0] FINISHED step=40 params_sha256=0123abcd",
    "WORKLOAD_STARTING": "[rank0] STARTING from scratch",
    "WORKLOAD_EXIT_ON_SIGNAL": "[rank0] EXIT on signal step=13",
    "WORKLOAD_INPROCESS": "[rank0] INPROCESS iteration=1",
    "RANK_ERROR": "[default0]:[rank0]: RuntimeError: boom",
    "RESUMED": "successfully loaded checkpoint from /ckpt at iteration 20",
    "SAVED": "[rank0] CHECKPOINT saved step=20",
    "GUARD": "nemo-resiliency-plugins: node nrp-node2 went silent: no line for 60 s",
    "GUARD_SILENT": "node nrp-node2 went silent: no line for 60 s",
    "GUARD_STOPPING": "section timeout on nrp-node1: stopping step 12345.0",
    "LAUNCHER_LINE": "2026-12-05 10:01:02,345 [INFO] [nrp-node1] [workload:0(0) infra:0(4242)] launcher.py:1 x",
    "GUARD_FROZEN_STOP": "training ended, step 12345.0 did not (a task on a frozen node): stopping step 12345.0",
}
