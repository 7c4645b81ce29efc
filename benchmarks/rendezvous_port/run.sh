#!/usr/bin/env bash
# Two 2-node ft_launcher jobs on one host (one launcher per "node"), job A then job B, as NeMo-Run's Slurm launch
# starts them when their first nodes are the same host. Usage: run.sh PORT_A LOG_DIR [PORT_B]
# One port (PORT_B omitted): B's launchers are clients of A's rendezvous store; when A ends, B's agents fail with
# DistNetworkError. Two ports (what FaultTolerancePlugin gives each multi-node Slurm job): B restarts its failed
# rank and finishes. Needs NVRx's ft_launcher on PATH (or FT_LAUNCHER=...). Results: README.md here.
set -u
PORT=$1 LOGS=$2
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mkdir -p "$LOGS" && rm -f "$LOGS"/*.log
start() { # PAIR NODE RDZV_ID PORT
  PAIR=$1 NVRX_ENABLE_MULTI_LAUNCHERS_PER_NODE=1 GROUP_RANK=$2 "${FT_LAUNCHER:-ft_launcher}" --ft-ignore-missing-cfg \
    --rdzv-backend c10d --rdzv-endpoint "127.0.0.1:$4" --rdzv-id "$3" --nnodes 2 --nproc-per-node 1 --node-rank "$2" \
    --max-restarts 2 --monitor-interval 0.3 "$here/worker.py" > "$LOGS/$1$2.log" 2>&1 &
}
start A 0 111 "$PORT"; start A 1 111 "$PORT"
for _ in $(seq 200); do  # B starts once A's rendezvous is done: A's launcher hosts the store
  grep -q "Cycle: 0 Event: rendezvous_completed" "$LOGS/A1.log" 2>/dev/null && break
  sleep 0.2
done
start B 0 222 "${3:-$PORT}"; start B 1 222 "${3:-$PORT}"
wait
grep -H "hosts the TCP store\|DistNetworkError(\|B rank\|Agent exits" "$LOGS"/*.log | grep -v "^.*frame #" | cut -c1-200
