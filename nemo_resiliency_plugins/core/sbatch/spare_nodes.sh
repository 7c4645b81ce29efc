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
# run on each node by srun, ahead of ft_launcher ($0), with SLURM_NODEID set for the task by Slurm
# shellcheck disable=SC2016  # expanded by the bash that srun starts on each node, not here
NRP_SPARE_HOST_SHIM='nrp_h=0; [ "${SLURM_NODEID:-}" = 0 ] && nrp_h=1; exec "$0" --rdzv-conf "is_host=$nrp_h" "$@"'
nrp_spare_finished() {  # exit 0 when the last step's launchers say training finished despite a lost node
  local nrp_zero nrp_active=$(( ${SLURM_JOB_NUM_NODES:-1} - ${NRP_SPARE_NODES:-0} ))
  nrp_step_log | grep -qE "exit code = [1-9]" && return 1
  nrp_zero=$(nrp_step_log | grep -cE "Agent exits with exit code = 0\b")
  [ "${nrp_zero:-0}" -ge "$nrp_active" ]
}
srun() {
  local nrp_arg nrp_prev='' nrp_launcher=0 nrp_rc
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
  $NRP_SRUN_SPARES "${nrp_args[@]}"
  nrp_rc=$?
  if [ "$nrp_rc" != 0 ] && nrp_spare_finished; then
    echo "nemo-resiliency-plugins: step exit code $nrp_rc, but every launcher that ended says training finished" \
      "(a node was lost and a spare took its place): the step finished"
    return 0
  fi
  return "$nrp_rc"
}
