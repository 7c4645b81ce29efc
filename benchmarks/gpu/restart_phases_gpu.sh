#!/usr/bin/env bash
# Issue 52 item 2 (GPU part), one device call: Megatron Bridge's own pretrain() under FaultTolerancePlugin's in-job
# restart, through NeMo-Run itself (nemorun_job.py: run.Experiment + LocalExecutor + FaultTolerancePlugin +
# AsyncCheckpointPlugin, the rank SIGKILLed at step 25), ALONE on the GPU: NVRx's wait for the GPU's memory after the
# kill then covers the killed rank's own memory only (on 2026-12-05 the job shared the GPU with three others).
# logger.log_interval=1, so the first step after the restart is one iteration, not ten.
#
# Run from the repository root on the GPU machine, the packed files carried in $WHL (README.md: pack_site.py
# --nemo-run, plus extra.tar.gz); ~4 minutes. The phases are read back on the CPU machine by the package's own code:
#     .venv/bin/python benchmarks/restart_phases.py --log <fetched OUT>/nemorun
set -u
export WHL=${WHL:-.tmp/devcarry}
SITE=/tmp/nrp_site
rm -rf "$SITE" && mkdir -p "$SITE"
for t in site nvrx extra nemorun; do tar -xzf "$WHL/$t.tar.gz" -C "$SITE" || exit 1; done
touch "$SITE/.complete"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH="$SITE:$PWD"
mkdir -p /tmp/nrp_bin "$OUT"
# NVRx's console script (pip would write the same): NeMo-Run's ft_launcher component runs `ft_launcher`.
printf '#!/bin/sh\nexec python3 -m nvidia_resiliency_ext.fault_tolerance.launcher "$@"\n' > /tmp/nrp_bin/ft_launcher
ln -sf "$(command -v python3)" /tmp/nrp_bin/python
chmod +x /tmp/nrp_bin/ft_launcher
export PATH=/tmp/nrp_bin:$PATH NEMORUN_HOME=/tmp/nemorun_home
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; date -u; } > "$OUT/env.txt" 2>&1
timeout -s KILL "${PHASES_JOB_TIMEOUT:-420}" python3 benchmarks/gpu/nemorun_job.py "$OUT/nemorun" logger.log_interval=1 \
    > "$OUT/nemorun.out" 2>&1
echo "nemorun rc=$?" | tee -a "$OUT/nemorun.out"
date -u >> "$OUT/env.txt"
grep -a "NEMORUN_JOB" "$OUT/nemorun.out" | cut -c1-3000
grep -ah "memory reclaimed\|time to initialize megatron\|after megatron is initialized\|after dataloaders" \
    "$OUT"/nemorun/*combined.log | cut -c1-300
