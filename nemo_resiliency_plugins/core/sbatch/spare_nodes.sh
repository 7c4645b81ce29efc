# nemo-resiliency-plugins: spare nodes
# shellcheck shell=bash
# FaultTolerancePlugin(spare_nodes=k): the job holds k nodes more than it trains on. NeMo-Run starts ft_launcher on
# every node with --nnodes <all nodes>; this function stands in for srun on that call and gives NVRx's launcher the
# range --nnodes <all - k>:<all> instead: the first <all - k> launchers to join train, the others wait as hot spares,
# and when an active node is lost a spare joins the next rendezvous and the worker group restarts in the same job
# (one of ft_launcher's --max-restarts). srun keeps the step when one node's task dies (the plugin adds
# --kill-on-bad-exit=0 --wait=0 to srun_args, after NeMo-Run's own flags). srun then returns the dead task's code
# although training finished: when every launcher that ended logged NVRx's "Agent exits with exit code = 0" (a spare
# that was never needed exits 0 too), at least the active count of them, and none a non-zero code, the step
# finished after a replacement and the function returns 0, so the requeue guard sees a finished run.
#
# Each launcher is also told whether it hosts the rendezvous store (--rdzv-conf is_host=1 on the first node of the
# allocation, where NeMo-Run points the endpoint; 0 elsewhere). Only the store host closes a rendezvous round and
# hands out the active ranks; without the flag NVRx decides by matching the endpoint's address against the
# machine's own, and where several Slurm nodes share one host every launcher takes itself for the host and closes
# the round from its own snapshot of the participants: two of them can then take the same active rank (seen with
# three launchers that joined within 40 ms). NeMo-Run's ft_launcher command has no --rdzv-conf of its own; one
# given later on that line would replace this one.
nrp_keep_function srun NRP_SRUN_SPARES
# NRP_SPARE_JOIN_TIMEOUT (whole seconds, checked by the plugin) becomes NVRx's join_timeout on the same line: when
# spares ran out, the launchers left wait that long (NVRx's default: 600 s) for a round that cannot fill, then exit
# and the requeue path takes over.
# run on each node by srun, ahead of ft_launcher ($0), with SLURM_NODEID set for the task by Slurm
# shellcheck disable=SC2016  # expanded by the bash that srun starts on each node, not here
NRP_SPARE_HOST_SHIM='nrp_h=0; [ "${SLURM_NODEID:-}" = 0 ] && nrp_h=1; nrp_t=${NRP_SPARE_JOIN_TIMEOUT:-}'
# shellcheck disable=SC2016  # the same
NRP_SPARE_HOST_SHIM+='; exec "$0" --rdzv-conf "is_host=$nrp_h${nrp_t:+,join_timeout=$nrp_t}" "$@"'
nrp_launchers_finished() {  # COMMAND...: exit 0 when the launcher lines it prints say training finished
  # (launcher lines only, log_lines.sh: a rank that prints NVRx's exit line is not a launcher that exited)
  local nrp_active=$(( ${SLURM_JOB_NUM_NODES:-1} - ${NRP_SPARE_NODES:-0} ))
  "$@" | nrp_launcher_lines | grep -qE "$NRP_RE_EXIT_NONZERO" && return 1
  [ "$("$@" | nrp_launcher_lines | grep -cE "$NRP_RE_EXIT_ZERO")" -ge "$nrp_active" ]
}
nrp_spare_finished() {  # the verdict on the last step's whole log (streamed: it can be large)
  nrp_launchers_finished nrp_step_log
}
# A node that froze (every process on it stopped: kernel, driver or file-system hang) is replaced like a lost one:
# the other ranks' section timeout ends the cycle and a spare joins the next rendezvous. But its task never ends,
# and srun (--wait=0, so that one dead node does not end the step) waits for it: the step, and the job with it,
# would hold every node until the time limit after training finished. So while the launchers' step runs, a
# watcher looks at the end of their log every 5 s (the last 64 KiB of each file: when training finished, the
# launchers' exit lines are the last ones written; nothing else is read, whatever the log's size); once at least
# the active count of launchers said "Agent exits with exit code = 0" and none a non-zero code, and the step is
# still running NRP_SPARE_FINISH_GRACE seconds (default 30) later, it stops the step (scancel --signal=KILL). The
# step then ends as any step that finished after a replacement (nrp_spare_finished above reads the whole log).
nrp_step_tails() {  # the end of each of the step's log files
  local nrp_file
  while read -r _ nrp_file; do tail -c 65536 "$nrp_file" 2>/dev/null; done < "$NRP_STEP_LOGS"
}
nrp_spare_tail_finished() {  # the same verdict, on the end of the step's log files only
  nrp_launchers_finished nrp_step_tails
}
# When spares ran out (or in-job restarts), the store host's launcher (node 0: NVRx tags its lines infra:0) exits
# with a non-zero code, and with it the rendezvous store: no launcher can go on. A frozen node's task would still
# hold the step, so this ends it the same way (srun then returns non-zero and the requeue path takes over).
nrp_store_host_failed() {  # prints the store host launcher's exit code when the end of the log has a non-zero one
  nrp_step_tails | nrp_launcher_lines | grep -E "infra:0\(.*$NRP_RE_EXIT_NONZERO" | tail -n 1 |
    grep -oE "exit code = [0-9]+" | tr -dc 0-9
}
nrp_step_ids() {  # the job's running steps, numbered ones only (not batch or extern), one number per line
  squeue -h -s -j "$SLURM_JOB_ID" -o '%i' 2>/dev/null | awk -F. '$2 ~ /^[0-9]+$/ {print $2}'
}
nrp_spare_watch() {  # SRUN_PID NEWEST_STEP_BEFORE_IT, in the background while the launchers' step runs
  local nrp_since='' nrp_step nrp_grace=${NRP_SPARE_FINISH_GRACE:-30} nrp_why nrp_code
  set +x  # the template traces the batch script: not this loop
  while sleep 5 >/dev/null 2>&1; do  # the sleep holds no output pipe of the job once the loop is stopped
    kill -0 "$1" 2>/dev/null || return 0
    if nrp_spare_tail_finished; then
      nrp_why="training finished on the active nodes"
    elif nrp_code=$(nrp_store_host_failed) && [ -n "$nrp_code" ]; then
      nrp_why="the store host's launcher exited with code $nrp_code (spares or restarts ran out)"
    else
      nrp_since=''; continue
    fi
    [ -n "$nrp_since" ] || nrp_since=$SECONDS
    [ $(( SECONDS - nrp_since )) -ge "$nrp_grace" ] || continue
    # The launchers' step: the first one started after srun was called (its name is the shim's "bash", or a
    # --job-name of the user's srun_args: not a thing to look for).
    nrp_step=$(nrp_step_ids | awk -v before="$2" '$1 > before && (s == "" || $1 < s) {s = $1} END {print s}')
    [ -z "$nrp_step" ] || nrp_step=$SLURM_JOB_ID.$nrp_step
    echo "nemo-resiliency-plugins: ${nrp_why}, but the step still ran ${nrp_grace} s" \
      "later (a task on a frozen node): stopping step ${nrp_step:-(not found: stopping srun)}"
    # Without the step's id (squeue did not answer) srun itself is stopped (with the shell function around it):
    # the batch script goes on, and the job's end takes the step's last tasks with it.
    if [ -z "$nrp_step" ] || ! scancel --signal=KILL "$nrp_step"; then
      pkill -KILL -P "$1" 2>/dev/null
      kill -KILL "$1" 2>/dev/null
    fi
    return 0
  done
}
srun() {
  local nrp_arg nrp_prev='' nrp_launcher=0 nrp_rc nrp_srun_pid nrp_watch_pid nrp_before
  local -a nrp_args=()
  for nrp_arg in "$@"; do
    case "$nrp_arg" in
      ft_launcher|*/ft_launcher)
        if [ "$nrp_launcher" = 0 ]; then  # ft_launcher becomes $0 of the per-node shim
          nrp_launcher=1
          nrp_args+=(bash -c "$NRP_SPARE_HOST_SHIM")
        fi ;;
    esac
    # ft_launcher's own --nnodes (the first one after it: the training script's arguments come later)
    if [ "$nrp_launcher" = 1 ] && [ "$nrp_prev" = --nnodes ] && [[ "$nrp_arg" =~ ^[0-9]+$ ]] &&
        [ "$nrp_arg" -gt "${NRP_SPARE_NODES:-0}" ]; then
      nrp_arg="$(( nrp_arg - NRP_SPARE_NODES )):$nrp_arg"
      nrp_launcher=2
    fi
    nrp_args+=("$nrp_arg")
    nrp_prev=$nrp_arg
  done
  if [ "$nrp_launcher" != 2 ] || [ "${NRP_SPARE_NODES:-0}" = 0 ]; then
    $NRP_SRUN_SPARES "$@"
    return
  fi
  nrp_before=$(nrp_step_ids | awk 'BEGIN {m = -1} $1 > m {m = $1} END {print m}')
  $NRP_SRUN_SPARES "${nrp_args[@]}" &
  nrp_srun_pid=$!
  nrp_spare_watch "$nrp_srun_pid" "$nrp_before" &
  nrp_watch_pid=$!
  # A trap (the preemption forwarding's) ends a wait early: wait again until srun itself has ended; bash keeps
  # its exit status for the last wait.
  while kill -0 "$nrp_srun_pid" 2>/dev/null; do wait "$nrp_srun_pid"; done
  wait "$nrp_srun_pid"
  nrp_rc=$?
  kill "$nrp_watch_pid" 2>/dev/null
  wait "$nrp_watch_pid" 2>/dev/null
  if [ "$nrp_rc" != 0 ] && nrp_spare_finished; then
    echo "nemo-resiliency-plugins: step exit code $nrp_rc, but every launcher that ended says training finished" \
      "(a node was lost and a spare took its place): the step finished"
    return 0
  fi
  return "$nrp_rc"
}
