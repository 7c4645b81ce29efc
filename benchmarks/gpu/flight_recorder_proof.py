"""GPU proof of ``FaultTolerancePlugin(diagnostics=True)``'s flight recorder (issue 36), and what it costs.

Run on the GPU machine from the repository root: ``python benchmarks/gpu/flight_recorder_proof.py OUT``.
Needs only torch with CUDA and NCCL (no nemo-run: the package's ``__init__`` imports no plugin until one is used).

1. **Dump on timeout.** One NCCL rank (the lent machine has one GPU; NCCL refuses two ranks on one GPU) runs with
   exactly the environment the plugin sets (``core.diagnostics.diagnostics_env`` with a job directory under
   ``OUT``), a process-group timeout of 10 s, three all_reduces, then a fourth queued behind a GPU kernel that
   spins for a minute: the watchdog sees the collective outlive the timeout and torch writes the rank's flight
   recorder to ``<job dir>/flight_recorder_rank_0``. ``tools/report_flight.py`` (what ``nemo-resiliency report``
   runs) reads it and must name collective #4, an all_reduce, unfinished.
2. **Cost.** The same loop of all_reduces timed with the recorder off (``TORCH_FR_BUFFER_SIZE=0``) and with the
   plugin's 2000 entries, alternated in one run, small and 64 MiB messages.

Writes ``flight_recorder.json`` and the dump (``job/flight_recorder_rank_0``) under OUT. What one GPU cannot show:
a collective that two ranks disagree on (which rank never entered it); that case is proven on CPU with gloo ranks
(``tests/unit/test_report_flight.py``), whose recorder has the same format.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, _ROOT)

from nemo_resiliency_plugins.core.diagnostics import diagnostics_env  # noqa: E402
from nemo_resiliency_plugins.tools.report.flight import flight_report  # noqa: E402

_HANG = r"""
import datetime, os, sys, torch, torch.distributed as dist
dist.init_process_group("nccl", init_method="file://" + sys.argv[1], rank=0, world_size=1,
                        timeout=datetime.timedelta(seconds=10), device_id=torch.device("cuda:0"))
t = torch.ones(1024, device="cuda")
for _ in range(3):
    dist.all_reduce(t)
torch.cuda.synchronize()
print("three all_reduces done", flush=True)
torch.cuda._sleep(int(2e9 * 60))          # about a minute of GPU cycles: the next collective cannot start
dist.all_reduce(t)
print("fourth all_reduce queued", flush=True)
t.cpu()                                   # waits for the kernel; the watchdog has timed #4 out and dumped by then
print("the kernel ended; the watchdog's abort follows", flush=True)
"""

_COST = r"""
import datetime, json, sys, time, torch, torch.distributed as dist
dist.init_process_group("nccl", init_method="file://" + sys.argv[1], rank=0, world_size=1,
                        device_id=torch.device("cuda:0"))
out = {}
for label, numel, n in (("small (4 KiB)", 1024, 20000), ("64 MiB", 16 * 1024 * 1024, 2000)):
    t = torch.ones(numel, device="cuda")
    for _ in range(200):
        dist.all_reduce(t)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(n):
        dist.all_reduce(t)
    torch.cuda.synchronize()
    out[label] = (time.perf_counter() - start) / n * 1e6
print("COST " + json.dumps(out), flush=True)
dist.destroy_process_group()
"""


def _run(code: str, env: dict[str, str], store: str, timeout: float) -> subprocess.CompletedProcess[str]:
    if os.path.exists(store):
        os.remove(store)
    return subprocess.run(
        [sys.executable, "-c", code, store], env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def main(out: str) -> int:
    job_dir = os.path.join(out, "job")
    os.makedirs(job_dir, exist_ok=True)
    plugin_env = diagnostics_env(job_dir)
    env = {**os.environ, **plugin_env}
    result: dict[str, object] = {"torch": _torch_version(), "plugin_env": plugin_env}

    start = time.monotonic()
    hang = _run(_HANG, env, os.path.join(out, "store-hang"), timeout=240)
    result["hang"] = {
        "exit_code": hang.returncode,
        "seconds": round(time.monotonic() - start, 1),
        "stdout": hang.stdout[-2000:],
        "stderr_tail": hang.stderr[-4000:],
        "files": sorted(os.listdir(job_dir)),
    }
    report = flight_report(job_dir)
    result["report_lines"] = report.lines() if report else None
    ok = bool(report) and any("#4" in line and "all_reduce" in line for line in report.lines())
    ok = ok and not any("completed" in line for line in report.lines())
    result["dump_ok"] = ok

    cost: dict[str, list[dict[str, float]]] = {"off": [], "on": []}
    for _ in range(3):  # alternated, so drift in the machine's state hits both
        for label, size in (("off", "0"), ("on", plugin_env["TORCH_FR_BUFFER_SIZE"])):
            run = _run(_COST, {**os.environ, "TORCH_FR_BUFFER_SIZE": size}, os.path.join(out, "store-cost"), 300)
            line = next((x for x in run.stdout.splitlines() if x.startswith("COST ")), None)
            if line is None:
                result.setdefault("cost_errors", []).append(run.stderr[-2000:])  # type: ignore[union-attr]
                continue
            cost[label].append(json.loads(line[5:]))
    result["cost_us_per_all_reduce"] = cost
    summary = {}
    for size in ("small (4 KiB)", "64 MiB"):
        off = [c[size] for c in cost["off"]]
        on = [c[size] for c in cost["on"]]
        if off and on:
            summary[size] = {"off_min": min(off), "on_min": min(on), "on/off": round(min(on) / min(off), 3)}
    result["cost_summary"] = summary
    with open(os.path.join(out, "flight_recorder.json"), "w") as handle:
        json.dump(result, handle, indent=2)
    print(json.dumps({k: result[k] for k in ("torch", "report_lines", "dump_ok", "cost_summary")}, indent=2))
    print(f"hang run: exit {hang.returncode}, files {result['hang']['files']}")  # type: ignore[index]
    return 0 if ok else 1


def _torch_version() -> str:
    import torch

    return f"{torch.__version__} cuda {torch.version.cuda} nccl {'.'.join(map(str, torch.cuda.nccl.version()))}"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else os.environ.get("OUT", "/tmp/fr-proof")))
