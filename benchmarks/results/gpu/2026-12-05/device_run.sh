#!/usr/bin/env bash
# One device call (issue 37 + issue 32 item 6), run from the carried copy of the branch (.devcarry-gpu/repo):
# 1. the checkpoint proof alone (async vs sync at each size and setting: its timings need the GPU to itself);
# 2. side by side: the fault-free replay (base), the local-checkpoint guard (localguard), in-process restart with
#    timeouts above the longest save (inprocesslong), and the NeMo-Run job (nemorun_job.py: run.Experiment).
set -u
export WHL=${WHL:-../whl}
SITE=/tmp/nrp_site
rm -rf "$SITE" && mkdir -p "$SITE"
for t in site nvrx extra nemorun; do tar -xzf "$WHL/$t.tar.gz" -C "$SITE" || exit 1; done
touch "$SITE/.complete"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH="$SITE:$PWD"
mkdir -p /tmp/nrp_bin "$OUT/ckpt"
# NVRx's console script (pip would write the same): NeMo-Run's ft_launcher component runs `ft_launcher`.
printf '#!/bin/sh\nexec python3 -m nvidia_resiliency_ext.fault_tolerance.launcher "$@"\n' > /tmp/nrp_bin/ft_launcher
ln -sf "$(command -v python3)" /tmp/nrp_bin/python
chmod +x /tmp/nrp_bin/ft_launcher
export PATH=/tmp/nrp_bin:$PATH
( nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; date -u; df -h /tmp | tail -1
  timeout -s KILL ${CKPT_TIMEOUT:-260} python3 -m torch.distributed.run --standalone --nnodes=1 --nproc-per-node=1 \
    benchmarks/gpu/checkpoint_entry.py /tmp/ckpt_proof ${CKPT_SIZES:-512,2048}; echo "checkpoint proof rc=$?"; date -u ) \
  > "$OUT/ckpt/checkpoint_proof.out" 2>&1
grep -E "^(COPY|SYNC|ASYNC|FULLY|REPLICA|checkpoint proof)" "$OUT/ckpt/checkpoint_proof.out"
rm -rf /tmp/ckpt_proof
[ "${1:-}" = none ] && exit 0
export PROOF_JOB_TIMEOUT=${PROOF_JOB_TIMEOUT:-250} NEMORUN_HOME=/tmp/nemorun_home
( timeout -s KILL 280 python3 benchmarks/gpu/nemorun_job.py "$OUT/nemorun" > "$OUT/nemorun.out" 2>&1; echo "nemorun rc=$?" >> "$OUT/nemorun.out" ) &
OUT="$OUT/pretrain" bash benchmarks/gpu/pretrain_proof.sh "${1:-base,localguard,inprocesslong}" > "$OUT/pretrain.out" 2>&1
wait
grep -a "NEMORUN_JOB\|nemorun rc" "$OUT/nemorun.out" | cut -c1-3000
tail -5 "$OUT/nemorun.out"
python3 - "$OUT/pretrain/summary.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
def show(name, r):
    print(name, {k: r.get(k) for k in ("rc", "wall_s", "finished_step", "params_sha256", "params_equal_base",
                                       "launcher_restarts", "fault_to_resumed_s", "train_starts", "guard_lines",
                                       "save_lines") if r.get(k) is not None})
for k, v in d.items():
    if "rc" in v: show(k, v)
    else:
        for kk, vv in v.items():
            if isinstance(vv, dict): show(f"{k}.{kk}", vv)
PY
