"""What plugins add to a Slurm job's sbatch script: bash blocks in ``executor.setup_lines`` (the only hook
NeMo-Run gives before its template's last lines) and the reading of Slurm's ``--time`` values.

Kept apart from :mod:`executor_config` because these blocks are shell programs with their own rules (quoting,
traps chained with the user's, functions standing in for ``srun``/``scontrol``), tested with real bash and a
real local Slurm.
"""

from __future__ import annotations

import re
from typing import Any

import nemo_run as run

from nemo_resiliency_plugins.errors import ResiliencyConfigError


def _is_slurm(executor: Any) -> bool:
    return isinstance(executor, run.SlurmExecutor)


# ------------------------------------------------------------------------------------- Slurm time limit

_SLURM_TIME = re.compile(r"(?:(?P<d>\d+)-)?(?P<a>\d+)(?::(?P<b>\d+))?(?::(?P<c>\d+))?")


def slurm_time_limit_seconds(value: Any) -> int | None:
    """Seconds in a Slurm ``--time`` value; None for no limit (``UNLIMITED``/``INFINITE``, empty, or ``0``:
    "a time limit of zero requests that no time limit be imposed", sbatch(1)).

    Slurm's forms: ``M``, ``M:S``, ``H:M:S``, ``D-H``, ``D-H:M``, ``D-H:M:S``. Raises ``ValueError`` for
    anything else, so a plugin can report the executor's value instead of guessing.
    """
    if value is None:
        return None
    text = str(value)
    if text == "" or text.upper() in ("UNLIMITED", "INFINITE"):
        return None
    m = _SLURM_TIME.fullmatch(text)
    if not m:
        raise ValueError(f"not a Slurm time limit: {value!r}")
    d, a, b, c = (int(m.group(k)) if m.group(k) is not None else None for k in ("d", "a", "b", "c"))
    if d is not None:  # D-H, D-H:M, D-H:M:S
        seconds = ((d * 24 + a) * 60 + (b or 0)) * 60 + (c or 0)
    elif c is not None:  # H:M:S
        seconds = (a * 60 + b) * 60 + c
    elif b is not None:  # M:S
        seconds = a * 60 + b
    else:  # M
        seconds = a * 60
    return seconds or None


# ------------------------------------------------------------- NeMo-Run's ft_launcher template and requeue

_REQUEUE_GUARD_MARK = "# nemo-resiliency-plugins: requeue guard"

# Shared by both blocks: they add to what the user's setup_lines already did instead of replacing it. A trap
# the user set for the same signal still runs, and a user's own shell function of the same name as one the
# block defines (srun, scontrol) is kept and called in place of the program.
_CHAIN_HELPERS_MARK = "# nemo-resiliency-plugins: chaining helpers"
_CHAIN_HELPERS = (
    _CHAIN_HELPERS_MARK
    + r"""
# nrp_trap_of SIG: the command of the trap already set for SIG (empty if none), from `trap -p` (shell-quoted).
nrp_trap_of() {
  local nrp_t
  nrp_t=$(trap -p "$1")
  [ -n "$nrp_t" ] || return 0
  nrp_t=${nrp_t#trap -- }
  nrp_t=${nrp_t% *}
  eval "printf '%s' $nrp_t"
}
# nrp_keep_function NAME VAR: if a shell function NAME is defined (the user's, or an earlier block's), keep it as
# nrp_kept_VAR and set VAR to that name; otherwise set VAR to "command NAME" (the program). Named after VAR, so
# two blocks that both wrap NAME keep different functions. (Not in $(...): a subshell would lose it.)
nrp_keep_function() {
  if declare -F "$1" >/dev/null; then
    eval "nrp_kept_$2() $(declare -f "$1" | tail -n +2)"
    printf -v "$2" 'nrp_kept_%s' "$2"
  else
    printf -v "$2" 'command %s' "$1"
  fi
}"""
)


def _add_chain_helpers(executor: Any) -> None:
    existing = executor.setup_lines or ""
    if _CHAIN_HELPERS_MARK not in existing:
        executor.setup_lines = (existing.rstrip("\n") + "\n" if existing else "") + _CHAIN_HELPERS


_REQUEUE_GUARD = (
    _REQUEUE_GUARD_MARK
    + r"""
# NeMo-Run's ft_launcher sbatch template ends with `scontrol requeue` unless a "finished flag" file exists
# or the failure limit is reached. Megatron Bridge never writes that flag, so a job that SUCCEEDED would be
# requeued again and again. This function stands in for scontrol in that one call: when the training step
# exited 0 and this batch shell did not get a preemption signal (NRP_PREEMPTION_SIGNAL, set by the
# signal forwarding of PreemptionPlugin), training is finished: it writes the flag and does not requeue.
# A failed step, a step that exited 0 after the preemption signal, and any other call go to scontrol.
# The template also counts the run that just failed against TORCHX_MAX_RETRIES (retries=N allowed N-1
# requeues after failures, and retries=0 none at all, not even to continue after a preemption): one more
# makes N mean N requeues after failed runs, as num_job_retries_on_failure says.
TORCHX_MAX_RETRIES=$(( TORCHX_MAX_RETRIES + 1 ))
# When no retry is left the template falls off its end and the job ends COMPLETED with exit code 0:
# end it with the training step's exit code instead, so Slurm reports the failure. An EXIT trap of the
# user's setup_lines runs first (in a subshell, so that an `exit` in it cannot skip this one).
NRP_USER_EXIT_TRAP=$(nrp_trap_of EXIT)
trap '[ -z "$NRP_USER_EXIT_TRAP" ] || (eval "$NRP_USER_EXIT_TRAP"); [ "${exitcode:-0}" = 0 ] || exit "$exitcode"' EXIT
# NVRx's ft_launcher exits with its no-restart code (NRP_NO_RESTART_EXIT_CODE, set by FaultTolerancePlugin) when
# NVRx decided the job must not run again: no progress across restarts (max_no_progress_cycles) or an
# attribution stop. Requeueing it would burn the job's retries on the same failure: it ends FAILED instead.
# After any other failure, with NRP_EXCLUDE_FAILED_NODES=1 the failed node is added to the requeued job's excluded
# nodes, as long as the partition still has enough nodes for the job. Which node: with NRP_SILENT_NODE_TIMEOUT set,
# first the launchers' own log (below); otherwise the node whose task failed first (srun's own
# "srun: error: <node>: task <n>: ..." line, captured by the srun function below).
NRP_SRUN_ERR=$(mktemp "${TMPDIR:-/tmp}/nrp-srun-stderr.XXXXXX")
NRP_WATCH_DIR=$(mktemp -d "${TMPDIR:-/tmp}/nrp-watch.XXXXXX")
# A node that hangs as a whole (kernel, driver or file-system hang; every process on it stopped) logs nothing
# more, while every other node's NVRx rank monitor logs its own section timeout (their ranks wait for the hung
# one). srun cannot tell: the healthy launcher exits first and srun names it. Worse, when the hung node hosts
# the rendezvous store the healthy launcher blocks for good in a TCPStore call (NVRx 0.7, torch's client has no
# read timeout) and the job never ends. So: after the first section (or heartbeat) timeout in the launchers'
# log (NVRx tags each line infra:<task>), a launcher that logs nothing for NRP_SILENT_NODE_TIMEOUT seconds is
# taken as hung: the step is stopped (scancel --signal=KILL) and that node is the one excluded. A rank that
# *failed* first (a crash, not a timeout) is left to srun's line; so is a timeout every node reports (a rank hung
# inside a collective: all of them time out, and which node holds it cannot be told from the log).
nrp_silent_tasks() {  # LOG FROM_BYTE TASKS: prints the silent tasks after the episode's first section timeout;
  # exit 1: no timeout since FROM_BYTE; exit 2: a rank failed before any timeout (srun's line decides).
  # Heard counts only up to the first launcher exit: ending the step resumes a stopped node (Slurm sends
  # SIGCONT before SIGTERM), which then logs its own late timeout. NVRx's time stamps compare as text.
  tail -c +"$(( $2 + 1 ))" "$1" 2>/dev/null | awk -v n="$3" '
    /^[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9] / && match($0, /infra:[0-9]+\(/) {
      task = substr($0, RSTART + 6, RLENGTH - 7); ts = $1 " " $2
      if (!t && !f && /Worker group (FAILED|UNHEALTHY)|exited with non-zero/) f = 1
      if (!t && !f && /has been open for [0-9.]+ seconds|Was out of section for|Did not get [a-z]+ heartbeat/) t = 1
      if (t && cut == "" && /exit code =|Launcher exiting/) cut = ts
      if (t && (cut == "" || ts <= cut)) heard[task] = 1
    }
    END { if (f) exit 2; if (!t) exit 1; for (i = 0; i < n; i++) if (!(i in heard)) printf "%d ", i }'
}
nrp_watch_silent_nodes() {  # LOG TASKS SECONDS, in the background while the launchers' step runs
  # floor: where the current episode's search starts (past every episode NVRx handled, also in the file "from"
  # for nrp_exclude_failed_node); from: where this poll reads, 4 KiB back from the last size (a line being
  # written then is read whole next time) while nothing was detected, so a long log is not re-read every poll.
  local nrp_floor=0 nrp_from=0 nrp_since= nrp_silent nrp_rc nrp_size nrp_step
  set +x  # the template traces the batch script: not this loop, every 2 s
  while sleep 2; do
    nrp_size=$(stat -c %s "$1" 2>/dev/null || echo 0)
    nrp_silent=$(nrp_silent_tasks "$1" "$nrp_from" "$2"); nrp_rc=$?
    if [ "$nrp_rc" = 1 ]; then
      [ "$nrp_size" -le $(( nrp_floor + 4096 )) ] || nrp_from=$(( nrp_size - 4096 ))
      continue
    fi
    if [ "$nrp_rc" = 2 ] || [ -z "$nrp_silent" ]; then  # left to NVRx and srun, or every node answered
      nrp_floor=$nrp_size; nrp_from=$nrp_size; nrp_since=
      echo "$nrp_floor" > "$NRP_WATCH_DIR/from"
      continue
    fi
    [ -n "$nrp_since" ] || nrp_since=$SECONDS
    [ $(( SECONDS - nrp_since )) -ge "$3" ] || continue
    echo "$nrp_silent" > "$NRP_WATCH_DIR/silent"
    nrp_step=$(squeue -h -s -j "$SLURM_JOB_ID" -o '%i %j' 2>/dev/null |
      awk '$2 == "ft_launcher" {s = $1} END {print s}')
    echo "nemo-resiliency-plugins: no launcher line from task(s) ${nrp_silent}for ${3} s after a section timeout" \
      "on another node: stopping step ${nrp_step:-?}"
    [ -z "$nrp_step" ] || scancel --signal=KILL "$nrp_step"
    return 0
  done
}
nrp_watch_start() {  # the srun arguments; starts the watchdog when the step is the launchers' and logs to a file
  local nrp_log= nrp_prev=
  for nrp_arg in "$@"; do
    case "$nrp_prev" in --output|-o) nrp_log=$nrp_arg ;; esac
    case "$nrp_arg" in --output=*) nrp_log=${nrp_arg#--output=} ;; esac
    nrp_prev=$nrp_arg
  done
  nrp_log=${nrp_log//%j/$SLURM_JOB_ID}
  case "$nrp_log" in ""|*%*) return 0 ;; esac  # one file for every task, or no evidence
  echo "$nrp_log" > "$NRP_WATCH_DIR/log"
  rm -f "$NRP_WATCH_DIR/silent" "$NRP_WATCH_DIR/from"
  nrp_watch_silent_nodes "$nrp_log" "${SLURM_JOB_NUM_NODES:-1}" "$NRP_SILENT_NODE_TIMEOUT" &
  NRP_WATCH_PID=$!
}
nrp_keep_function srun NRP_SRUN_CAPTURED
srun() {
  local nrp_rc
  NRP_WATCH_PID=
  if [ -n "${NRP_SILENT_NODE_TIMEOUT:-}" ] && [ "${SLURM_JOB_NUM_NODES:-1}" -gt 1 ]; then
    case " $* " in *" ft_launcher "*) nrp_watch_start "$@" ;; esac
  fi
  $NRP_SRUN_CAPTURED "$@" 2> >(tee -a "$NRP_SRUN_ERR" >&2)
  nrp_rc=$?
  if [ -n "$NRP_WATCH_PID" ]; then kill "$NRP_WATCH_PID" 2>/dev/null; wait "$NRP_WATCH_PID" 2>/dev/null; fi
  wait $! 2>/dev/null  # the tee of the process substitution has written everything
  return "$nrp_rc"
}
nrp_silent_node_names() {  # the hung nodes the launchers' log shows (see above), or nothing
  local nrp_log nrp_tasks nrp_n=${SLURM_JOB_NUM_NODES:-1}
  nrp_log=$(cat "$NRP_WATCH_DIR/log" 2>/dev/null) || return 0
  nrp_tasks=$(cat "$NRP_WATCH_DIR/silent" 2>/dev/null) ||
    nrp_tasks=$(nrp_silent_tasks "$nrp_log" "$(cat "$NRP_WATCH_DIR/from" 2>/dev/null || echo 0)" "$nrp_n") ||
    return 0
  set -- $nrp_tasks
  # Most nodes silent is not one hung node (a log level that hides NVRx's lines, a cut log): no evidence.
  [ "$#" -gt 0 ] && [ $(( 2 * $# )) -le "$nrp_n" ] || return 0
  $NRP_SCONTROL show hostnames "$SLURM_JOB_NODELIST" | awk -v want=" $* " 'index(want, " " (NR - 1) " ")'
}
nrp_exclude_failed_node() {
  local nrp_line nrp_node nrp_excl nrp_all nrp_total nrp_count nrp_list nrp_why
  nrp_line=$(grep -m1 -E '^srun: error: [A-Za-z0-9._-]+: tasks? [0-9,-]+: ' "$NRP_SRUN_ERR" 2>/dev/null)
  nrp_node=$(nrp_silent_node_names)
  if [ -n "$nrp_node" ]; then
    nrp_node=$(printf '%s\n' "$nrp_node" | paste -sd, -)
    nrp_why="went silent: no launcher line after a section timeout on another node"
  else
    nrp_node=$(printf '%s' "$nrp_line" | awk '{print $3}' | tr -d :)
    nrp_why="failed first ($nrp_line)"
  fi
  if [ -z "$nrp_node" ]; then
    echo "nemo-resiliency-plugins: no 'srun: error: <node>: task' line: cannot tell which node failed;" \
      "requeue without excluding one"
    return 0
  fi
  nrp_excl=$($NRP_SCONTROL show job "$SLURM_JOB_ID" -o | grep -oE 'ExcNodeList=[^ ]+' | cut -d= -f2)
  [ "$nrp_excl" != "(null)" ] || nrp_excl=
  nrp_all=$({ [ -z "$nrp_excl" ] || $NRP_SCONTROL show hostnames "$nrp_excl"; echo "$nrp_node" | tr , '\n'; } |
    sort -u)
  nrp_count=$(printf '%s\n' "$nrp_all" | grep -c .)
  nrp_total=$($NRP_SCONTROL show partition "${SLURM_JOB_PARTITION:-}" -o 2>/dev/null |
    grep -oE 'TotalNodes=[0-9]+' | cut -d= -f2)
  if [ -z "$nrp_total" ] || [ $(( nrp_total - nrp_count )) -lt "${SLURM_JOB_NUM_NODES:-1}" ]; then
    echo "nemo-resiliency-plugins: node $nrp_node $nrp_why but is not excluded: the partition would" \
      "have $(( ${nrp_total:-0} - nrp_count )) nodes left for a ${SLURM_JOB_NUM_NODES:-1}-node job"
    return 0
  fi
  nrp_list=$($NRP_SCONTROL show hostlist "$(printf '%s\n' "$nrp_all" | paste -sd, -)")
  echo "nemo-resiliency-plugins: node $nrp_node $nrp_why: the requeued job excludes $nrp_list"
  # A running job's ExcNodeList cannot be changed, and requeueing ends this script at once: a background
  # subshell that ignores the job's SIGTERM sets it as soon as the job is pending (well within KillWait).
  ( trap '' TERM INT HUP
    for nrp_i in $(seq 80); do
      $NRP_SCONTROL update JobId="$SLURM_JOB_ID" ExcNodeList="$nrp_list" 2>/dev/null && exit 0
      sleep 0.25
    done
    echo "nemo-resiliency-plugins: could not set ExcNodeList=$nrp_list on job $SLURM_JOB_ID" ) &
}
nrp_keep_function scontrol NRP_SCONTROL
scontrol() {
  if [ "${1:-}" = requeue ] && [ -n "${NRP_NO_RESTART_EXIT_CODE:-}" ] &&
      [ "${exitcode:-}" = "$NRP_NO_RESTART_EXIT_CODE" ]; then
    echo "nemo-resiliency-plugins: ft_launcher exited with NVRx's no-restart code $exitcode (NVRx decided the job" \
      "must not be restarted: no progress across restarts, or an attribution stop; the launcher log says which):" \
      "not requeued, the job ends FAILED"
    return 0
  fi
  if [ "${1:-}" = requeue ] && [ "${exitcode:-0}" != 0 ] && [ "${NRP_EXCLUDE_FAILED_NODES:-0}" = 1 ]; then
    nrp_exclude_failed_node
  fi
  if [ "${1:-}" = requeue ] && [ "${exitcode:-1}" = 0 ] && [ "${ANY_JOB_STEP_FAILED:-1}" = 0 ]; then
    if [ -z "${NRP_PREEMPTION_SIGNAL:-}" ]; then
      touch "$(dirname "$JOB_RESULTS_FILE")/$(basename "$FAULT_TOL_FINISHED_FLAG_FILE")"
      echo "nemo-resiliency-plugins: step exited 0 without a preemption signal: finished, not requeued"
      return 0
    fi
    echo "nemo-resiliency-plugins: step exited 0 after SIG${NRP_PREEMPTION_SIGNAL}: preempted, requeue"
  fi
  $NRP_SCONTROL "$@"
}"""
)


def guard_ft_requeue(executor: Any, *, plugin: str) -> None:
    """Stop NeMo-Run's ft_launcher sbatch template from requeueing a Slurm job that finished.

    The template (``ft_launcher_slurm.j2``) requeues after every run unless the finished-flag file exists or
    ``retries`` failures are in the job's results file. Megatron Bridge never writes the flag, so a
    successful run is requeued forever (each run resumes at the last iteration and succeeds again). The guard
    is a bash function in ``setup_lines`` (the only hook NeMo-Run gives before the template's last lines):
    it intercepts the template's ``scontrol requeue`` and, when the step exited 0 and the batch shell did not
    receive the preemption signal (:func:`forward_batch_signal_to_tasks` records it), writes the flag and
    skips the requeue. A failed step is requeued as before (up to ``retries`` failures); a step that exited 0
    after the preemption signal (saved and exited) is requeued to continue training. If such a job had in
    fact just finished, the next run resumes at the last iteration, exits 0 at once and ends there.
    Two more template traps are fixed in the same block (both seen on the local Slurm): the template counts
    the failed run itself against ``TORCHX_MAX_RETRIES`` (``retries=1`` never requeued; ``retries=0`` not
    even after a preemption), so the block adds one; and a job out of retries fell off the script's end
    and was reported COMPLETED with exit code 0, so an EXIT trap ends it with the step's exit code.
    Trade-off: a Megatron Bridge run that exits 0 on its own before the end (``train.exit_duration_in_mins``,
    ``train.exit_interval``) is treated as finished.
    """
    if not _is_slurm(executor):
        return
    if _REQUEUE_GUARD_MARK in (executor.setup_lines or ""):
        return
    _add_chain_helpers(executor)
    existing = executor.setup_lines
    executor.setup_lines = existing.rstrip("\n") + "\n" + _REQUEUE_GUARD


# ------------------------------------------------------------------- Slurm signal to the step's tasks only

_FORWARD_MARK = "# nemo-resiliency-plugins: signal forwarding"

_FORWARD = (
    _FORWARD_MARK
    + r"""
# Slurm's plain --signal=SIG@N signals EVERY process of the job step. Under ft_launcher that includes NVRx's
# rank monitors, which close on SIGTERM; Megatron Bridge's checkpoint-save hooks then fail ("RankMonitorClient
# could not send section update: Broken pipe") and the save-and-exit is lost. With --signal=B:SIG@N only this
# batch shell gets the signal, and it sends it to the steps' *task* processes only (the launcher on each
# node, or the ranks when there is no launcher), which pass it on to their ranks themselves.
nrp_signal_tasks() {
  local nrp_pid
  for nrp_pid in $(scontrol listpids "$SLURM_JOB_ID" 2>/dev/null |
      awk -v own="$SLURM_STEP_ID" 'NR > 1 && $3 ~ /^[0-9]+$/ && $3 != own && $4 ~ /^[0-9]+$/ {print $1}'); do
    kill -s "$1" "$nrp_pid" && echo "nemo-resiliency-plugins: sent SIG$1 to task pid $nrp_pid on $(hostname -s)"
  done
}
export -f nrp_signal_tasks
NRP_SIGNALLED=0
NRP_PREEMPTION_SIGNAL=
nrp_forward_signal() {
  NRP_SIGNALLED=1
  NRP_PREEMPTION_SIGNAL=$1
  echo "nemo-resiliency-plugins: batch shell got SIG$1 at $(date '+%F %T'), forwarding it to the step tasks"
  command srun --overlap --jobid="$SLURM_JOB_ID" --nodes="${SLURM_JOB_NUM_NODES:-1}" --ntasks-per-node=1 \
    bash -c "nrp_signal_tasks $1"
  # A trap the user's setup_lines had set for this signal runs after the forwarding.
  [ -z "${NRP_USER_SIGNAL_TRAP:-}" ] || eval "$NRP_USER_SIGNAL_TRAP"
}
# bash runs a trap only between commands, never while a foreground command runs: the template's srun runs
# in the background here and is waited for (again after each trap), returning its own exit status.
nrp_keep_function srun NRP_SRUN
srun() {
  $NRP_SRUN "$@" &
  local nrp_srun=$! nrp_rc
  while :; do
    NRP_SIGNALLED=0
    wait "$nrp_srun"
    nrp_rc=$?
    [ "$NRP_SIGNALLED" = 1 ] || return "$nrp_rc"
  done
}"""
)


def forward_batch_signal_to_tasks(executor: Any, signal_name: str, *, plugin: str) -> None:
    """Make a ``--signal=B:<signal_name>@N`` batch-shell signal reach the job steps' task processes only.

    Why not plain ``--signal=<sig>@N``: Slurm then signals every process of the step, including NVRx's rank
    monitors (children of ``ft_launcher``), which close on SIGTERM/SIGINT/SIGUSR1/SIGUSR2; the ranks' next
    section message (Megatron Bridge's ``on_checkpointing_start/end`` around the save) raises
    ``RankMonitorClientError`` and the preemption checkpoint is lost (measured on the local Slurm). Signalling
    only the task processes lets the launcher forward the signal to its ranks and keep the monitors until
    they have saved. ``signal_name`` is a name without ``SIG`` (``TERM``); it goes into shell code, so only
    plain names are accepted.
    """
    if not _is_slurm(executor):
        return
    if not re.fullmatch(r"[A-Z][A-Z0-9]*", signal_name or ""):
        raise ResiliencyConfigError(plugin, None, detail=f"internal: bad signal name {signal_name!r}")
    existing = executor.setup_lines or ""
    # The signal is forwarded first; a trap the user's setup_lines set for it runs after.
    # (nrp_forward_signal runs NRP_USER_SIGNAL_TRAP, captured just before).
    trap = f"trap 'nrp_forward_signal {signal_name}' {signal_name}"
    if _FORWARD_MARK in existing:
        if trap not in existing:
            raise ResiliencyConfigError(
                plugin,
                None,
                signal_name,
                detail="the job already forwards another batch signal to its tasks; use one exit signal per job",
            )
        return
    _add_chain_helpers(executor)
    executor.setup_lines = (
        executor.setup_lines.rstrip("\n") + f"\n{_FORWARD}\nNRP_USER_SIGNAL_TRAP=$(nrp_trap_of {signal_name})\n{trap}"
    )
