#!/usr/bin/env bash
# GPU proof of the resiliency mechanisms on one GPU; see benchmarks/gpu/README.md.
# Run from the repository root on the GPU machine, with .whl/ (site.tar.gz, nvrx.tar.gz, plugin/) carried:
#   bash benchmarks/gpu/gpu_proof.sh            (writes logs and summary to $OUT, default /tmp/gpu_proof_out)
set -u
OUT=${OUT:-/tmp/gpu_proof_out}
mkdir -p "$OUT" /tmp/gpu_proof
SITE=/tmp/nrp_site
rm -rf "$SITE" /tmp/gpu_proof/* && mkdir -p "$SITE"
tar -xzf .whl/site.tar.gz -C "$SITE" && tar -xzf .whl/nvrx.tar.gz -C "$SITE" || exit 1
export PYTHONPATH="$SITE:$PWD"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
{
  date -u +"date: %Y-%m-%dT%H:%M:%SZ"
  nvidia-smi --query-gpu=name,memory.total,driver_version,pci.bus_id --format=csv
  nvidia-smi
  uname -a
  python3 - <<'PY'
import importlib.metadata as md, sys, torch
print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda,
      "nccl", torch.cuda.nccl.version(), "gpu", torch.cuda.get_device_name(0))
for d in ("transformers", "megatron-core", "megatron-bridge", "nvidia-resiliency-ext", "omegaconf", "hydra-core"):
    try:
        print(d, md.version(d))
    except Exception as e:
        print(d, "missing", e)
PY
  python3 -c "import sys; sys.path.insert(0, 'benchmarks/gpu'); import workload_entry as w; \
w._register_package_without_plugins(); import nemo_resiliency_plugins.testing.workload; \
import nvidia_resiliency_ext.attribution.straggler.cupti as c; print('workload + CUPTI module import OK')" 2>&1 | tail -5
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
python3 benchmarks/gpu/gpu_proof.py "$OUT" .whl/plugin
