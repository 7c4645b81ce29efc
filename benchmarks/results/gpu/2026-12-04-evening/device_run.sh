#!/usr/bin/env bash
# Device call: issue 20's checkpoint proof alone first (its timings), then the real-pretrain cases side by side.
set -u
export WHL=.devcarry
SITE=/tmp/nrp_site
rm -rf "$SITE" && mkdir -p "$SITE"
for t in site nvrx extra; do tar -xzf "$WHL/$t.tar.gz" -C "$SITE" || exit 1; done
touch "$SITE/.complete"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
mkdir -p "$OUT/ckpt"
( export PYTHONPATH="$SITE:$PWD"; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; date -u;
  timeout -s KILL 200 python3 -m torch.distributed.run --standalone --nnodes=1 --nproc-per-node=1 \
    benchmarks/gpu/checkpoint_entry.py /tmp/ckpt_proof 512; echo "checkpoint proof rc=$?"; date -u ) \
  > "$OUT/ckpt/checkpoint_proof.out" 2>&1
tail -5 "$OUT/ckpt/checkpoint_proof.out"
[ "${1:-}" = none ] && exit 0
export PROOF_JOB_TIMEOUT=${PROOF_JOB_TIMEOUT:-280}
OUT="$OUT/pretrain" bash benchmarks/gpu/pretrain_proof.sh "${1:-calc,straggler,base,async,local,localbad}" > "$OUT/pretrain.out" 2>&1
grep "GPU_PROOF" "$OUT/pretrain.out"
python3 benchmarks/gpu/checkpoint_rows.py "$OUT" > "$OUT/checkpoint_rows.out" 2>&1; cat "$OUT/checkpoint_rows.out"
