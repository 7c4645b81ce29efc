# nemo-resiliency-plugins: log lines
# shellcheck shell=bash disable=SC2034  # the patterns are read by the other blocks, which shellcheck reads apart
# The lines the requeue guard reads, each pattern (an ERE, for grep -E and awk) defined once here; the other blocks
# use these variables (awk gets them through its environment: nrp_awk below; awk -v would eat the backslashes).
# A step's log mixes what the launchers write with what the ranks print, and a rank may print anything, a quote of
# NVRx's verdict included. So a verdict ("finished", "no restart", a launcher's exit code, the rank -> node map, the
# failed node) is read from launcher lines only: a line is a launcher line when it has the launcher's own shape.
#
# NVRx 0.7's launcher and rank monitor log through nvidia_resiliency_ext/shared_utils/log_manager.py:
#   "%(asctime)s [%(levelname)s] [<node>] [workload:<rank>(<local>) infra:<task>(<local>)] %(filename)s:%(lineno)d ..."
# (a file handler, or srun --label, puts "<task>: " in front); launcher.py's early failure line carries no tag.
NRP_RE_LAUNCHER='^( *[0-9]+: )?[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}(,[0-9]{3})? \[[A-Z]+\] \[[^]]*\] '
# A rank's line: torch elastic (--tee, which NeMo-Run's ft_launcher command gives) puts "[<role><local rank>]:" in
# front of each line a rank writes (with diagnostics, "[<role><local rank>]:[rank<rank>]:", the guard's
# TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE), and srun --label "<task>: " in front of that. It never starts with a
# time stamp, so it is never a launcher line.
NRP_RE_RANK='^( *[0-9]+: )?\[[A-Za-z_]*[0-9]+\]:'
# The same prefix carrying the global rank (the stack dumps: nrp_hung_rank_node).
NRP_RE_RANK_DUMP='^\[[A-Za-z_]*[0-9]+\]:\[rank[0-9]+\]:'
# srun's own messages, on srun's stderr (the guard's srun function captures them, apart from the tasks' output).
NRP_RE_SRUN='^srun: '
# srun's "srun: error: <node>: task <n>: Exited with exit code 1" (or Killed, Terminated): the first failed node.
NRP_RE_SRUN_TASK_ERROR='^srun: error: [A-Za-z0-9._-]+: tasks? [0-9,-]+: '
# The launcher's tag: NVRx's infra:<task>( (SLURM_PROCID of the launcher's srun task).
NRP_RE_INFRA_TAG='infra:[0-9]+\('
# launcher.py main(): "NVRx decided the job must not be restarted (<reason>): ... Agent's exit code = <code>", and
# its rendezvous closure line "Rendezvous closed because NVRx decided the job must not be restarted (<reason>)."
NRP_RE_NO_RESTART='NVRx decided the job must not be restarted \([A-Za-z_]+\)'
# launcher.py main(): "Agent exits with exit code = 0." (a spare that was never needed says it too)
NRP_RE_EXIT_ZERO='Agent exits with exit code = 0\.'
# launcher.py main(): "... Agent's exit code = <code>" after a failure, an exception or a no-restart verdict
NRP_RE_EXIT_NONZERO='exit code = [1-9]'
# ft_rendezvous_barrier.py: "Assigned active rank <group> (round=<round>)", and launcher.py "Using nproc_per_node=N."
NRP_RE_ASSIGNED='Assigned active rank [0-9]+ \(round=[0-9]+\)'
NRP_RE_NPROC='Using nproc_per_node=[0-9]+\.'
# rank_monitor_server.py's section and heartbeat timeouts, and the launcher's own failure and exit lines
NRP_RE_TIMEOUT='has been open for [0-9.]+ seconds|Was out of section for|Did not get [a-z]+ heartbeat'
NRP_RE_WORKERS_FAILED='Worker group (FAILED|UNHEALTHY)|exited with non-zero'
NRP_RE_LAUNCHER_EXIT='exit code =|Launcher exiting'
# Megatron Bridge 0.6.2 (training/nvrx_straggler.py, train.py): the straggler report and the stop line are written
# by a rank, never by a launcher: they count only as a whole rank line (the torch prefix, a logger's prefix, then
# Megatron Bridge's sentence to the line's end), not quoted inside another line.
NRP_RE_STRAGGLER_REPORT='STRAGGLER DETECTION WARNING: .*Affected ranks: \{[^}]*\}$'
NRP_RE_STRAGGLER_STOP='Exiting program due to straggler detection\.$'
nrp_launcher_lines() {  # stdin -> the launchers' own lines and srun's (rank lines dropped)
  grep -E "$NRP_RE_LAUNCHER|$NRP_RE_SRUN" || true
}
nrp_awk() {  # awk with the patterns above in ENVIRON (not exported to the job's other programs)
  NRP_RE_LAUNCHER=$NRP_RE_LAUNCHER NRP_RE_RANK=$NRP_RE_RANK NRP_RE_RANK_DUMP=$NRP_RE_RANK_DUMP \
    NRP_RE_INFRA_TAG=$NRP_RE_INFRA_TAG NRP_RE_ASSIGNED=$NRP_RE_ASSIGNED NRP_RE_NPROC=$NRP_RE_NPROC \
    NRP_RE_TIMEOUT=$NRP_RE_TIMEOUT NRP_RE_WORKERS_FAILED=$NRP_RE_WORKERS_FAILED \
    NRP_RE_LAUNCHER_EXIT=$NRP_RE_LAUNCHER_EXIT NRP_RE_STRAGGLER_REPORT=$NRP_RE_STRAGGLER_REPORT awk "$@"
}
