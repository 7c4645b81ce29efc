# nemo-resiliency-plugins: step verdicts
# shellcheck shell=bash
# What the training step's own log says about how it ended, for the requeue guard's scontrol function. srun's exit
# code alone cannot say it on several nodes: srun returns the highest task exit code (or 128+signal), and NeMo-Run
# runs it with --kill-on-bad-exit=1, so when one node's ft_launcher exits with NVRx's no-restart code the step is
# torn down and the others end by SIGTERM: the batch shell sees 143, not 93. NVRx 0.7's launcher writes its verdict
# nowhere but its log ("NVRx decided the job must not be restarted (<reason>)"), so that line, on any node, is the
# verdict. A straggler stop exits 0 like a finished run; Megatron Bridge's "Exiting program due to straggler
# detection." line and its last "STRAGGLER DETECTION WARNING ... Affected ranks: {StragglerId(rank=R, node='N')}"
# report tell them apart and name the slow rank.
NRP_STEP_LOGS=$(mktemp "${TMPDIR:-/tmp}/nrp-step-logs.XXXXXX")
NRP_SCRATCH+=("$NRP_STEP_LOGS")  # removed by the requeue guard's EXIT trap
nrp_step_logs_mark() {  # the launchers' srun arguments: their --output/--error files and sizes before the step
  local nrp_arg nrp_prev='' nrp_file
  : > "$NRP_STEP_LOGS"
  for nrp_arg in "$@"; do
    nrp_file=
    case "$nrp_prev" in --output|-o|--error|-e) nrp_file=$nrp_arg ;; esac
    case "$nrp_arg" in --output=*|--error=*) nrp_file=${nrp_arg#*=} ;; esac
    nrp_prev=$nrp_arg
    [ -n "$nrp_file" ] || continue
    nrp_file=${nrp_file//%j/$SLURM_JOB_ID}
    case "$nrp_file" in *%*) continue ;; esac  # one file per task or node: not read
    printf '%s %s\n' "$(stat -c %s "$nrp_file" 2>/dev/null || echo 0)" "$nrp_file" >> "$NRP_STEP_LOGS"
  done
}
nrp_step_log() {  # what the last launchers' step wrote (its log files from the mark on), then srun's own stderr
  local nrp_from nrp_file
  while read -r nrp_from nrp_file; do
    tail -c +"$(( nrp_from + 1 ))" "$nrp_file" 2>/dev/null
  done < "$NRP_STEP_LOGS"
  cat "$NRP_SRUN_ERR" 2>/dev/null
}
nrp_no_restart_reason() {  # NVRx's reason (no_progress, attribution_stop, ...) when any launcher gave one
  nrp_step_log | nrp_launcher_lines | grep -oE "$NRP_RE_NO_RESTART" | head -n 1 |
    sed -E 's/.*\(([A-Za-z_]+)\)$/\1/'
}
nrp_straggler_stopped() {  # exit 0 when the step ended on Megatron Bridge's straggler stop (a rank's whole line)
  nrp_step_log | grep -E "$NRP_RE_RANK" | grep -qE "$NRP_RE_STRAGGLER_STOP"
}
# Rank -> node, shared by the awk programs below (prepended to each): a rank's node group is rank / ranks-per-node
# (per: NVRx's "Using nproc_per_node=N." line, else the job's SLURM_NTASKS_PER_NODE), and that group's launcher is
# the task whose log line says "Assigned active rank <group>" (NVRx's infra:<task> tag; task i runs on the i-th node
# of the allocation, host[i + 1]); without such a line, task = group.
# shellcheck disable=SC2016  # awk's own $0, not the shell's
NRP_AWK_RANK_NODE='
function nrp_assignment(line,  task, group) {  # a launcher line of NVRx rank assignment: which task holds the group
  if (line !~ ENVIRON["NRP_RE_LAUNCHER"]) return ""
  if (match(line, ENVIRON["NRP_RE_NPROC"])) per = substr(line, RSTART + 21, RLENGTH - 22) + 0
  if (!match(line, ENVIRON["NRP_RE_INFRA_TAG"])) return ""
  task = substr(line, RSTART + 6, RLENGTH - 7)
  if (!match(line, ENVIRON["NRP_RE_ASSIGNED"])) return ""
  group = substr(line, RSTART + 21, RLENGTH - 21); sub(/ .*/, "", group); task_of[group] = task
  return group
}
function nrp_node_of_rank(rank,  group, task) {
  group = int(rank / per); task = (group in task_of) ? task_of[group] : group
  return (task + 1 <= n) ? host[task + 1] : ""
}'
nrp_straggler_nodes() {  # the job's nodes that host the ranks of the last straggler report, one a line
  # A rank's node: the node name NVRx reports (the rank's host name) when it is one of the job's nodes, or the
  # NodeHostName of exactly one of them; otherwise the rank's node group (NRP_AWK_RANK_NODE). Several nodes
  # sharing one host name (the local test cluster) take the second way.
  local nrp_hosts nrp_hostnames nrp_h
  nrp_hosts=$($NRP_SCONTROL show hostnames "$SLURM_JOB_NODELIST" | paste -sd' ' -)
  nrp_hostnames=$(for nrp_h in $nrp_hosts; do
      $NRP_SCONTROL show node "$nrp_h" -o 2>/dev/null | grep -oE 'NodeHostName=[^ ]+' | cut -d= -f2 | head -n 1
    done | paste -sd' ' -)
  nrp_step_log | nrp_awk -v hosts="$nrp_hosts" -v hostnames="$nrp_hostnames" -v per="${SLURM_NTASKS_PER_NODE%%(*}" \
    "$NRP_AWK_RANK_NODE"'
    BEGIN { n = split(hosts, host, " "); split(hostnames, hname, " "); if (per !~ /^[0-9]+$/ || per < 1) per = 1 }
    { nrp_assignment($0) }
    $0 ~ ENVIRON["NRP_RE_RANK"] && $0 ~ ENVIRON["NRP_RE_STRAGGLER_REPORT"] { report = $0 }
    END {
      rest = report
      while (match(rest, /StragglerId\(rank=[0-9]+, node=.[^,)]*.\)/)) {
        id = substr(rest, RSTART, RLENGTH); rest = substr(rest, RSTART + RLENGTH)
        match(id, /rank=[0-9]+/); rank = substr(id, RSTART + 5, RLENGTH - 5)
        match(id, /node=.[^,)]*./); name = substr(id, RSTART + 6, RLENGTH - 7); sub(/\..*/, "", name)
        found = ""; same = 0
        for (i = 1; i <= n; i++) if (host[i] == name) found = host[i]
        if (found == "") { for (i = 1; i <= n; i++) if (hname[i] == name) { same++; cand = host[i] }; if (same == 1) found = cand }
        if (found == "") found = nrp_node_of_rank(rank)
        if (found != "" && !(found in seen)) { seen[found] = 1; print found }
      }
    }'
}
# A rank hung inside a collective: every rank waiting in it times out too, and srun names whichever node's
# launcher ended first. With FaultTolerancePlugin(diagnostics=True) NVRx stops the hung ranks with SIGABRT and
# Python's faulthandler writes each one's stack to the log, each line under torch elastic's prefix, which the guard
# makes carry the global rank ([default<local rank>]:[rank<rank>]:, TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE; see
# the srun function). The ranks whose main thread is in a torch.distributed collective waited; a rank that is not
# is the one they waited for. nemo-resiliency report reads the same dumps (tools/report_stacks.py; the unit tests
# hold the two readings to the same answers).
nrp_hung_rank_node() {  # "<node> <rank>[,<rank>...]" when the last cycle's dumps put the ranks outside on one node
  local nrp_hosts
  nrp_hosts=$($NRP_SCONTROL show hostnames "$SLURM_JOB_NODELIST" | paste -sd' ' -)
  nrp_step_log | nrp_awk -v hosts="$nrp_hosts" -v per="${SLURM_NTASKS_PER_NODE%%(*}" "$NRP_AWK_RANK_NODE"'
    BEGIN { n = split(hosts, host, " "); if (per !~ /^[0-9]+$/ || per < 1) per = 1; round = -1 }
    $0 ~ ENVIRON["NRP_RE_LAUNCHER"] && match($0, ENVIRON["NRP_RE_ASSIGNED"]) {
      r = substr($0, RSTART, RLENGTH); sub(/.*round=/, "", r); sub(/\)/, "", r)
      if (r + 0 != round) { round = r + 0; split("", dumped); split("", indump); split("", threads) }
      nrp_assignment($0); next
    }
    $0 ~ ENVIRON["NRP_RE_NPROC"] { nrp_assignment($0) }
    match($0, ENVIRON["NRP_RE_RANK_DUMP"]) {
      who = substr($0, 1, RLENGTH); rest = substr($0, RLENGTH + 1); sub(/^ /, "", rest)
      rank = who; sub(/.*\[rank/, "", rank); sub(/\].*/, "", rank)
      if (rest ~ /^Fatal Python error: /) { dumped[rank] = 1; indump[rank] = 1; threads[rank] = 0; next }
      if (!indump[rank]) next
      if (rest ~ /^(Current thread|Thread) 0x/) {
        t = rank SUBSEP (++threads[rank]); current[t] = (rest ~ /^Current thread/); last[t] = ""; c10d[t] = 0
      } else if (rest ~ /^ *File "/ && threads[rank]) {
        t = rank SUBSEP threads[rank]; f = rest; sub(/.* in /, "", f); last[t] = f
        if (rest ~ /torch\/distributed\/distributed_c10d\.py"/) c10d[t] = 1
      } else if (rest ~ /^Extension modules:/) indump[rank] = 0
    }
    END {
      for (rank in dumped) {
        main = ""
        for (i = 1; i <= threads[rank]; i++) if (last[rank SUBSEP i] == "<module>") { main = rank SUBSEP i; break }
        if (main == "") for (i = 1; i <= threads[rank]; i++) if (current[rank SUBSEP i]) main = rank SUBSEP i
        if (main != "" && c10d[main]) waited++
        else { out[rank] = 1; outside++ }
      }
      if (!waited || !outside) exit
      for (rank in out) {
        node = nrp_node_of_rank(rank); if (node == "") exit
        if (the != "" && node != the) exit
        the = node; ranks = ranks (ranks == "" ? "" : ",") rank
      }
      print the, ranks
    }'
}
