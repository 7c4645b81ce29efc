#!/usr/bin/env bash
# Real-pretrain proof (Megatron Bridge's own pretrain() under each plugin, one GPU); see benchmarks/gpu/README.md.
# Run from the repository root on the GPU machine, with .whl/ (site.tar.gz, nvrx.tar.gz, extra.tar.gz, plugin/):
#   bash benchmarks/gpu/pretrain_proof.sh [case,case,...]   (writes to $OUT, default /tmp/pretrain_proof_out)
set -u
OUT=${OUT:-/tmp/pretrain_proof_out}
WHL=${WHL:-.whl}
mkdir -p "$OUT"
SITE=/tmp/nrp_site
if [ ! -f "$SITE/.complete" ]; then
  rm -rf "$SITE" && mkdir -p "$SITE"
  for t in site nvrx extra; do tar -xzf "$WHL/$t.tar.gz" -C "$SITE" || exit 1; done
  touch "$SITE/.complete"
fi
# Megatron Bridge's initialize_megatron runs Megatron Core's compile_helpers(), i.e. `make` in
# megatron/core/datasets, and exits 1 when make fails. The megatron-core 0.19.2 wheel ships the built
# helpers_cpp extension but no Makefile there, so make fails ("no makefile found") and every pretrain() ends
# with SystemExit: 1 (seen on the first device call). This Makefile only checks that the built extension is there.
DS="$SITE/megatron/core/datasets"
if [ ! -f "$DS/Makefile" ]; then
  printf 'all:\n\t@ls helpers_cpp*.so >/dev/null && echo "helpers_cpp: the wheel'"'"'s build is used"\n' > "$DS/Makefile"
fi
export PYTHONPATH="$SITE:$PWD"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
{
  date -u +"date: %Y-%m-%dT%H:%M:%SZ"
  nvidia-smi --query-gpu=name,memory.total,driver_version,pci.bus_id --format=csv
  uname -a
  python3 - <<'PY'
import importlib.metadata as md, sys, torch
print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda,
      "nccl", torch.cuda.nccl.version(), "gpu", torch.cuda.get_device_name(0))
for d in ("transformers", "megatron-core", "megatron-bridge", "nvidia-resiliency-ext", "nvidia-modelopt", "pulp",
          "omegaconf", "hydra-core"):
    try:
        print(d, md.version(d))
    except Exception as e:
        print(d, "missing", e)
PY
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
python3 benchmarks/gpu/pretrain_proof.py "$OUT" "$WHL/plugin" "${1:-}"
