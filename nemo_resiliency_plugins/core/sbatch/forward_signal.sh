# nemo-resiliency-plugins: signal forwarding
# shellcheck shell=bash
# Slurm's plain --signal=SIG@N signals EVERY process of the job step. Under ft_launcher that includes NVRx's
# rank monitors, which close on SIGTERM; Megatron Bridge's checkpoint-save hooks then fail ("RankMonitorClient
# could not send section update: Broken pipe") and the save-and-exit is lost. With --signal=B:SIG@N only this
# batch shell gets the signal, and it sends it on to the process in each task that acts on it: the task's first
# process (the launcher on each node, or the rank itself when there is no launcher), or, when that process is a
# shell wrapper (a SlurmTemplate's `bash -c '...'`, an inline script), the first non-shell process under it.
# A shell without a trap dies on SIGTERM and passes nothing on; Slurm then ends the step and kills the rank
# before it has saved. ft_launcher's children (ranks, NVRx's rank monitors) are never signalled here: the
# launcher passes the signal to its ranks and keeps the monitors up until they have saved. torchrun is the
# exception: it passes the signal on too, but then raises SignalException and exits 1 although every rank saved
# and exited 0, and NeMo-Run's plain template takes that for a failed run (no requeue with retries=0). So under
# torchrun the ranks (its children) get the signal; torchrun sees its workers succeed and exits 0 itself.
nrp_children() {  # PID: the pids of its child processes
  local nrp_kids
  if nrp_kids=$(cat /proc/"$1"/task/*/children 2>/dev/null); then
    echo "$nrp_kids"
  else
    ps -o pid= --ppid "$1" 2>/dev/null
  fi
}
nrp_is_torchrun() {  # PID: torch's elastic launcher (torchrun, python -m torch.distributed.run or .launch)?
  local nrp_cmd nrp_a0 nrp_a1 nrp_a2
  # (torch renames its thread "pt_elastic", so /proc/PID/comm cannot tell; the command line can)
  nrp_cmd=$(tr '\0' ' ' < /proc/"$1"/cmdline 2>/dev/null) || return 1
  read -r nrp_a0 nrp_a1 nrp_a2 _ <<< "$nrp_cmd"
  case "${nrp_a0##*/} ${nrp_a1##*/} ${nrp_a2:-}" in
    "torchrun "*|python*" torchrun "*|python*" -m torch.distributed.run"|python*" -m torch.distributed.launch")
      return 0 ;;
  esac
  return 1
}
nrp_signal_process() {  # SIG PID: signal PID, or, for a shell or torchrun, the first process(es) under it that act
  local nrp_comm nrp_child nrp_sent=1 nrp_under=0
  nrp_comm=$(cat /proc/"$2"/comm 2>/dev/null) || return 1
  case "$nrp_comm" in
    bash|sh|dash|zsh|ksh|mksh|busybox) nrp_under=1 ;;
    *) nrp_is_torchrun "$2" && nrp_under=1 ;;  # torchrun: its ranks, not torchrun (see above)
  esac
  if [ "$nrp_under" = 1 ]; then
    for nrp_child in $(nrp_children "$2"); do
      nrp_signal_process "$1" "$nrp_child" && nrp_sent=0
    done
    # Something under it got the signal; nothing under it yet (a shell between two commands, torchrun before its
    # ranks start): the process itself gets it.
    [ "$nrp_sent" = 1 ] || return 0
  fi
  kill -s "$1" "$2" && echo "nemo-resiliency-plugins: sent SIG$1 to task pid $2 ($nrp_comm) on $(hostname -s)"
}
nrp_signal_tasks() {
  local nrp_pid
  # This node's name (srun sets SLURMD_NODENAME): where several slurmd share a host (a test or front-end cluster),
  # listpids without it asks the host's first slurmd and finds no task of a job that runs on another.
  for nrp_pid in $(scontrol listpids "$SLURM_JOB_ID" ${SLURMD_NODENAME:+"$SLURMD_NODENAME"} 2>/dev/null |
      awk -v own="$SLURM_STEP_ID" 'NR > 1 && $3 ~ /^[0-9]+$/ && $3 != own && $4 ~ /^[0-9]+$/ {print $1}'); do
    nrp_signal_process "$1" "$nrp_pid"
  done
}
export -f nrp_children nrp_is_torchrun nrp_signal_process nrp_signal_tasks
NRP_SIGNALLED=0
NRP_PREEMPTION_SIGNAL=
nrp_forward_signal() {
  NRP_SIGNALLED=1
  # shellcheck disable=SC2034  # read by requeue_guard.sh's scontrol stand-in
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
  # shellcheck disable=SC2153  # NRP_SRUN is set by nrp_keep_function (chain_helpers.sh)
  $NRP_SRUN "$@" &
  local nrp_srun=$! nrp_rc
  while :; do
    NRP_SIGNALLED=0
    wait "$nrp_srun"
    nrp_rc=$?
    [ "$NRP_SIGNALLED" = 1 ] || return "$nrp_rc"
  done
}
