# nemo-resiliency-plugins: requeue guard
# shellcheck shell=bash
# NeMo-Run's ft_launcher sbatch template ends with `scontrol requeue` unless a "finished flag" file exists
# or the failure limit is reached. Megatron Bridge never writes that flag, so a job that SUCCEEDED would be
# requeued again and again. This function stands in for scontrol in that one call: when the training step
# exited 0 and this batch shell did not get a preemption signal (NRP_PREEMPTION_SIGNAL, set by the
# signal forwarding of PreemptionPlugin), training is finished: it writes the flag and does not requeue.
# A failed step, a step that exited 0 after the preemption signal, and any other call go to scontrol.
# The ft_launcher template also counts the run that just failed against TORCHX_MAX_RETRIES (retries=N allowed
# N-1 requeues after failures, and retries=0 none at all, not even to continue after a preemption): one more
# makes N mean N requeues after failed runs, as num_job_retries_on_failure says. NeMo-Run's plain template
# (no ft_launcher) already requeues a failed run while TORCHX_MAX_RETRIES > SLURM_RESTART_COUNT, so there it
# is left alone (retries=0: a failed run is not requeued). Which template: the one that defines
# is_job_failures_limit_reached, read from this batch script itself ($0 is Slurm's copy of it); the function
# is defined only after these lines, so its definition cannot be looked up yet.
nrp_ft_template() { grep -qs '^is_job_failures_limit_reached()' "$0"; }
if nrp_ft_template; then TORCHX_MAX_RETRIES=$(( TORCHX_MAX_RETRIES + 1 )); fi
# When no retry is left the template falls off its end and the job ends COMPLETED with exit code 0:
# end it with the training step's exit code instead, so Slurm reports the failure. An EXIT trap of the
# user's setup_lines runs first (in a subshell, so that an `exit` in it cannot skip this one).
# The plain template requeues failed runs only: a run that saved and exited 0 on the preemption signal
# (NRP_PREEMPTION_SIGNAL, set by PreemptionPlugin's signal forwarding) is requeued here to continue training,
# as the ft_launcher template's guard below does.
nrp_requeue_preempted() {
  [ "${exitcode:-1}" = 0 ] && [ -n "${NRP_PREEMPTION_SIGNAL:-}" ] && ! nrp_ft_template || return 0
  echo "nemo-resiliency-plugins: step exited 0 after SIG${NRP_PREEMPTION_SIGNAL}: preempted, requeue"
  $NRP_SCONTROL requeue "$SLURM_JOB_ID"
}
# The guard's scratch files (NRP_SCRATCH, below) go at exit, and before any requeue: Slurm kills a requeued batch
# script, which then runs no EXIT trap.
nrp_scratch_gone() { rm -rf ${NRP_SCRATCH[@]+"${NRP_SCRATCH[@]}"}; NRP_SCRATCH=(); }
NRP_USER_EXIT_TRAP=$(nrp_trap_of EXIT)
# shellcheck disable=SC2154  # exitcode is set by NeMo-Run's sbatch template before this trap runs
trap '[ -z "$NRP_USER_EXIT_TRAP" ] || (eval "$NRP_USER_EXIT_TRAP"); nrp_scratch_gone; nrp_requeue_preempted
[ "${exitcode:-0}" = 0 ] || exit "$exitcode"' EXIT
# NVRx's ft_launcher exits with its no-restart code (NRP_NO_RESTART_EXIT_CODE, set by FaultTolerancePlugin) when
# NVRx decided the job must not run again: no progress across restarts (max_no_progress_cycles) or an
# attribution stop. Requeueing it would burn the job's retries on the same failure: it ends FAILED instead.
# After any other failure, with NRP_EXCLUDE_FAILED_NODES=1 the failed node is added to the requeued job's excluded
# nodes, as long as the partition still has enough nodes for the job. Which node: with NRP_SILENT_NODE_TIMEOUT set,
# first the launchers' own log (below); then, with diagnostics on, the ranks' stack dumps (nrp_hung_rank_node);
# otherwise the node whose task failed first (srun's own "srun: error: <node>: task <n>: ..." line, captured by
# the srun function below).
NRP_SRUN_ERR=$(mktemp "${TMPDIR:-/tmp}/nrp-srun-stderr.XXXXXX")
NRP_WATCH_DIR=$(mktemp -d "${TMPDIR:-/tmp}/nrp-watch.XXXXXX")
NRP_SCRATCH=("$NRP_SRUN_ERR" "$NRP_WATCH_DIR")  # what nrp_scratch_gone removes: only what mktemp made here
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
  tail -c +"$(( $2 + 1 ))" "$1" 2>/dev/null | nrp_awk -v n="$3" '
    $0 ~ ENVIRON["NRP_RE_LAUNCHER"] && match($0, ENVIRON["NRP_RE_INFRA_TAG"]) {
      task = substr($0, RSTART + 6, RLENGTH - 7); line = $0; sub(/^ *[0-9]+: /, "", line)
      split(line, stamp, " "); ts = stamp[1] " " stamp[2]
      if (!t && !f && $0 ~ ENVIRON["NRP_RE_WORKERS_FAILED"]) f = 1
      if (!t && !f && $0 ~ ENVIRON["NRP_RE_TIMEOUT"]) t = 1
      if (t && cut == "" && $0 ~ ENVIRON["NRP_RE_LAUNCHER_EXIT"]) cut = ts
      if (t && (cut == "" || ts <= cut)) heard[task] = 1
    }
    END { if (f) exit 2; if (!t) exit 1; for (i = 0; i < n; i++) if (!(i in heard)) printf "%d ", i }'
}
nrp_watch_silent_nodes() {  # LOG TASKS SECONDS, in the background while the launchers' step runs
  # floor: where the current episode's search starts (past every episode NVRx handled, also in the file "from"
  # for nrp_exclude_failed_node); from: where this poll reads, 4 KiB back from the last size (a line being
  # written then is read whole next time) while nothing was detected, so a long log is not re-read every poll.
  local nrp_floor=0 nrp_from=0 nrp_since='' nrp_silent nrp_rc nrp_size nrp_step
  set +x  # the template traces the batch script: not this loop, every 2 s
  while sleep 2 >/dev/null 2>&1; do  # (as in spare_nodes.sh)
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
  local nrp_log='' nrp_prev=''
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
  case " $* " in *" ft_launcher "*) nrp_step_logs_mark "$@" ; : > "$NRP_SRUN_ERR" ;; esac
  # diagnostics=True: each rank's lines say its global rank, so that a stack dump names its node (step_verdict.sh).
  # Set here, not in env_vars: NeMo-Run writes those unquoted, and bash would expand the template's ${...}.
  if [ "${NRP_RANK_LOG_PREFIX:-}" = 1 ] && [ -z "${TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE:-}" ]; then
    # shellcheck disable=SC2016  # torch elastic fills in the template
    export TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE='[${role_name}${local_rank}]:[rank${rank}]:'
  fi
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
  # shellcheck disable=SC2086  # the task list is split into words on purpose
  set -- $nrp_tasks
  # Most nodes silent is not one hung node (a log level that hides NVRx's lines, a cut log): no evidence.
  [ "$#" -gt 0 ] && [ $(( 2 * $# )) -le "$nrp_n" ] || return 0
  $NRP_SCONTROL show hostnames "$SLURM_JOB_NODELIST" | awk -v want=" $* " 'index(want, " " (NR - 1) " ")'
}
nrp_exclude_failed_node() {
  local nrp_line nrp_node nrp_why nrp_hung
  # (|| true: the template's `set -e` is on by now, and no such line is a case to handle, not an error)
  nrp_line=$(grep -m1 -E "$NRP_RE_SRUN_TASK_ERROR" "$NRP_SRUN_ERR" 2>/dev/null) || true
  nrp_node=$(nrp_silent_node_names)
  if [ -n "$nrp_node" ]; then
    nrp_node=$(printf '%s\n' "$nrp_node" | paste -sd, -)
    nrp_why="went silent: no launcher line after a section timeout on another node"
  elif nrp_hung=$(nrp_hung_rank_node) && [ -n "$nrp_hung" ]; then
    nrp_node=${nrp_hung%% *}
    nrp_why="held rank ${nrp_hung#* }, not in the collective the other ranks waited in (their stack dumps)"
  else
    nrp_node=$(printf '%s' "$nrp_line" | awk '{print $3}' | tr -d :)
    nrp_why="failed first ($nrp_line)"
  fi
  if [ -z "$nrp_node" ]; then
    echo "nemo-resiliency-plugins: no 'srun: error: <node>: task' line: cannot tell which node failed;" \
      "requeue without excluding one"
    return 0
  fi
  nrp_exclude_nodes "$nrp_node" "$nrp_why" || true
}
nrp_exclude_nodes() {  # NODES (comma-separated) WHY: exclude them from the requeued job; exit 1 when it cannot
  local nrp_node=$1 nrp_why=$2 nrp_excl nrp_all nrp_total nrp_count nrp_list
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
    return 1
  fi
  nrp_list=$($NRP_SCONTROL show hostlist "$(printf '%s\n' "$nrp_all" | paste -sd, -)")
  echo "nemo-resiliency-plugins: node $nrp_node $nrp_why: the requeued job excludes $nrp_list"
  # A running job's ExcNodeList cannot be changed, and requeueing ends this script at once: a background
  # subshell that ignores the job's SIGTERM sets it as soon as the job is pending (well within KillWait).
  ( trap '' TERM INT HUP
    for _ in $(seq 80); do
      $NRP_SCONTROL update JobId="$SLURM_JOB_ID" ExcNodeList="$nrp_list" 2>/dev/null && exit 0
      sleep 0.25
    done
    echo "nemo-resiliency-plugins: could not set ExcNodeList=$nrp_list on job $SLURM_JOB_ID" ) &
}
nrp_keep_function scontrol NRP_SCONTROL
scontrol() {
  local nrp_reason nrp_node
  if [ "${1:-}" = requeue ] && [ -n "${NRP_NO_RESTART_EXIT_CODE:-}" ] && [ "${exitcode:-0}" != 0 ]; then
    nrp_reason=$(nrp_no_restart_reason)
    if [ "$exitcode" = "$NRP_NO_RESTART_EXIT_CODE" ] || [ -n "$nrp_reason" ]; then
      nrp_node="ft_launcher's no-restart code"
      [ "$exitcode" = "$NRP_NO_RESTART_EXIT_CODE" ] ||
        nrp_node="srun's code after one launcher exited $NRP_NO_RESTART_EXIT_CODE and the others were stopped"
      echo "nemo-resiliency-plugins: NVRx decided the job must not be restarted (${nrp_reason:-reason not in the" \
        "log}; step exit code $exitcode: $nrp_node): not requeued, no node excluded, the job ends FAILED with" \
        "no-restart code $NRP_NO_RESTART_EXIT_CODE"
      exitcode=$NRP_NO_RESTART_EXIT_CODE
      return 0
    fi
  fi
  if [ "${1:-}" = requeue ] && [ "${exitcode:-0}" != 0 ] && [ "${NRP_EXCLUDE_FAILED_NODES:-0}" = 1 ]; then
    nrp_exclude_failed_node
  fi
  if [ "${1:-}" = requeue ] && [ "${exitcode:-1}" = 0 ] && [ "${ANY_JOB_STEP_FAILED:-1}" = 0 ] &&
      nrp_straggler_stopped; then
    # Megatron Bridge saved and exited 0 on a straggler: requeue away from the slow node, or end the job if it
    # cannot be left behind (the same node would be found slow again, and an exit 0 never counts as a failure).
    nrp_node=$(nrp_straggler_nodes | paste -sd, -)
    if [ -n "$nrp_node" ] && nrp_exclude_nodes "$nrp_node" "was reported as a straggler (training stopped)"; then
      echo "nemo-resiliency-plugins: step exited 0 on a straggler stop: requeue without node $nrp_node"
      nrp_scratch_gone
      $NRP_SCONTROL "$@"
      return
    fi
    echo "nemo-resiliency-plugins: step exited 0 on a straggler stop, but no slow node of this job could be" \
      "${nrp_node:+excluded}${nrp_node:-told from the report}: not requeued, the job ends FAILED (resubmit it" \
      "when the slow node is out of the pool)"
    exitcode=1
    return 0
  fi
  if [ "${1:-}" = requeue ] && [ "${exitcode:-1}" = 0 ] && [ "${ANY_JOB_STEP_FAILED:-1}" = 0 ]; then
    if [ -z "${NRP_PREEMPTION_SIGNAL:-}" ]; then
      touch "$(dirname "$JOB_RESULTS_FILE")/$(basename "$FAULT_TOL_FINISHED_FLAG_FILE")"
      echo "nemo-resiliency-plugins: step exited 0 without a preemption signal: finished, not requeued"
      return 0
    fi
    echo "nemo-resiliency-plugins: step exited 0 after SIG${NRP_PREEMPTION_SIGNAL}: preempted, requeue"
  fi
  [ "${1:-}" != requeue ] || nrp_scratch_gone
  $NRP_SCONTROL "$@"
}
