"""GPU proof of the resiliency mechanisms, run on the device machine by ``gpu_proof.sh``.

Every job is the reference workload in GPU mode (``NRP_DEVICE=cuda``: model and batches on the GPU, NCCL
process group of world size 1 - the lent machine has one GPU, and NCCL refuses two ranks on one GPU), with
Megatron Bridge's config parser and resiliency code, given what the plugins give it (``plugin_settings.json``
and ``ft_launcher.yaml``, written here by ``prepare.py`` from the plugins' own ``setup``):

  a0  ft_launcher, no fault (the reference parameters)
  a1  ft_launcher, rank 0 SIGKILLed at step 22          -> worker group restarted, resumed from step 20
  a2  ft_launcher, rank 0 hangs at step 22               -> 'step' section timeout, restarted, resumed
  b   in-process restart (Megatron Bridge's wrapper = NVRx inprocess.Wrapper with its GPU health checks),
      an exception raised at step 15                      -> restarted inside the same process, resumed
  c   NVRx straggler detection with CUPTI on, the step's GPU kernel made 3x slower from step 40
                                                          -> GPU individual score drops, straggler reported

Each output line is time-stamped on arrival; detection and recovery times are differences of those stamps.
Writes ``<out>/a_ft_launcher.log``, ``b_inprocess.log``, ``c_straggler.log``, ``summary.md``, ``summary.json``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

from nemo_resiliency_plugins.job import log_lines as ll

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
#: A detection as the launcher logs it (log_lines' patterns): NVRx's section timeout, torch's worker group state,
#: a worker's exit code (torch's agent, its error summary).
DETECTION = "|".join(
    p.pattern for p in (ll.NVRX_SECTION, ll.NVRX_WORKER_GROUP, ll.TORCH_EXITCODE, ll.TORCH_SUMMARY_EXITCODE)
)
EXITS = f"{ll.TORCH_EXITCODE.pattern}|{ll.TORCH_SUMMARY_EXITCODE.pattern}"
ENTRY = os.path.join("benchmarks", "gpu", "workload_entry.py")
STEP_TIME = "0.1"
TRAIN_ITERS = 40


class Job:
    def __init__(self, name: str, cmd: list[str], env: dict[str, str], timeout: float) -> None:
        self.name, self.cmd, self.env, self.timeout = name, cmd, env, timeout
        self.lines: list[tuple[float, str]] = []
        self.rc: int | None = None
        self.wall_s = 0.0

    def run(self, log_path: str | None = None) -> Job:
        env = dict(os.environ)
        env.update(self.env)
        env["PYTHONUNBUFFERED"] = "1"
        start = time.monotonic()
        proc = subprocess.Popen(
            self.cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
        )
        assert proc.stdout is not None
        for line in proc.stdout:
            self.lines.append((time.monotonic() - start, line.rstrip("\n")))
            if time.monotonic() - start > self.timeout:
                proc.kill()
                self.lines.append((time.monotonic() - start, f"GPU_PROOF: killed after {self.timeout} s"))
                break
        self.rc = proc.wait()
        self.wall_s = time.monotonic() - start
        if log_path:
            with open(log_path, "a") as f:
                f.write(self.text())
        print(f"GPU_PROOF {self.name}: rc={self.rc} wall={self.wall_s:.1f}s", flush=True)
        return self

    def first(self, pattern: str, after: float = -1.0) -> tuple[float, str] | None:
        regex = re.compile(pattern)
        for t, line in self.lines:
            if t >= after and regex.search(line):
                return t, line
        return None

    def all(self, pattern: str) -> list[tuple[float, str]]:
        regex = re.compile(pattern)
        return [(t, line) for t, line in self.lines if regex.search(line)]

    def text(self) -> str:
        head = f"===== {self.name}: rc={self.rc} wall={self.wall_s:.1f}s\n$ {' '.join(self.cmd)}\n"
        head += "env: " + " ".join(f"{k}={v}" for k, v in sorted(self.env.items())) + "\n"
        return head + "\n".join(f"[{t:8.3f}] {line}" for t, line in self.lines) + "\n"


def _delta(job: Job, start_pat: str, end_pat: str) -> float | None:
    start = job.first(start_pat)
    if start is None:
        return None
    end = job.first(end_pat, after=start[0])
    return None if end is None else round(end[0] - start[0], 2)


def _sha(job: Job) -> str | None:
    hit = job.first(ll.WORKLOAD_FINISHED_HASH.pattern)
    return hit[1].split("params_sha256=")[1].strip() if hit else None


def main(out: str, settings_dir: str) -> int:
    with open(os.path.join(settings_dir, "plugin_settings.json")) as f:
        settings = json.load(f)
    yaml_path = os.path.join(settings_dir, "ft_launcher.yaml")
    ft, strag, ipr = settings["fault_tolerance"], settings["straggler"], settings["inprocess_restart"]
    py = sys.executable
    # GPU_PROOF_DEVICE=cpu runs the same jobs on a CPU machine (a check of this driver, not a GPU proof).
    device = os.environ.get("GPU_PROOF_DEVICE", "cuda")
    base_env = {"NRP_DEVICE": device, "NRP_STEP_TIME": STEP_TIME, "NRP_FAULT_RANK": "0"}

    def ft_job(name: str, fault: dict[str, str]) -> Job:
        lf = ft["launcher_fields"]
        env = dict(base_env, **fault, **ft["env"])
        env["PET_FT_CFG_PATH"] = os.path.abspath(yaml_path)  # the plugin's file, carried here
        cmd = [py, "-m", "nvidia_resiliency_ext.fault_tolerance.launcher"]
        # What NeMo-Run's ft_launcher component passes for these fields, then torchrun's own flags.
        cmd += ["--ft-workload_check_interval", str(lf["workload_check_interval"])]
        cmd += ["--ft-rank_termination_signal", lf["rank_termination_signal"], "--ft-log_level", lf["log_level"]]
        cmd += ["--max-restarts", str(lf["max_restarts"]), "--standalone", "--nnodes=1", "--nproc-per-node=1"]
        save = f"/tmp/gpu_proof/{name}"
        cmd += [ENTRY, *ft["args"], f"checkpoint.save={save}", f"train.train_iters={TRAIN_ITERS}"]
        return Job(name, cmd, env, timeout=150)

    results: dict[str, dict] = {}

    a_log = os.path.join(out, "a_ft_launcher.log")
    a0 = ft_job("a0_ft_no_fault", {}).run(a_log)
    a1 = ft_job("a1_ft_kill", {"NRP_FAULT": "kill", "NRP_FAULT_STEP": "22"}).run(a_log)
    a2 = ft_job("a2_ft_hang", {"NRP_FAULT": "hang", "NRP_FAULT_STEP": "22"}).run(a_log)
    ref = _sha(a0)
    for job in (a0, a1, a2):
        results[job.name] = {
            "rc": job.rc,
            "wall_s": round(job.wall_s, 2),
            "finished": _sha(job) is not None,
            "params_equal_fault_free": _sha(job) == ref if ref else None,
            "detect_s": _delta(job, r"FAULT_INJECTED", DETECTION + "|(?i:timed out)"),
            "fault_to_resumed_s": _delta(job, r"FAULT_INJECTED", ll.WORKLOAD_RESUMED.pattern),
            "detection_line": (job.first(f"{ll.NVRX_SECTION.pattern}|{ll.NVRX_WORKER_GROUP.pattern}") or (0, ""))[1],
            "resumed_line": (job.first(ll.WORKLOAD_RESUMED.pattern) or (0, ""))[1],
            "restarts": len(job.all(ll.NVRX_WILL_RESTART.pattern)),
        }

    b_save = "/tmp/gpu_proof/b_inprocess"
    b_env = dict(base_env, **ipr["env"], NRP_FAULT="raise", NRP_FAULT_STEP="15")
    b_cmd = [py, "-m", "torch.distributed.run", "--standalone", "--nnodes=1", "--nproc-per-node=1"]
    b_cmd += ["--max-restarts=0", ENTRY, *ipr["args"], f"checkpoint.save={b_save}", f"train.train_iters={TRAIN_ITERS}"]
    b = Job("b_inprocess_raise", b_cmd, b_env, timeout=180).run(os.path.join(out, "b_inprocess.log"))
    results[b.name] = {
        "rc": b.rc,
        "wall_s": round(b.wall_s, 2),
        "finished": _sha(b) is not None,
        "params_equal_fault_free": _sha(b) == ref if ref else None,
        "same_pid_reentered": bool(b.first(ll.exact(ll.WORKLOAD_INPROCESS, 1).pattern)),
        "fault_to_reentry_s": _delta(b, r"FAULT_INJECTED", ll.exact(ll.WORKLOAD_INPROCESS, 1).pattern),
        "fault_to_resumed_s": _delta(b, r"FAULT_INJECTED", ll.WORKLOAD_RESUMED.pattern),
        "inprocess_lines": [line for _, line in b.all(r"INPROCESS ")],
        "health_check_lines": [line for _, line in b.all(r"(?i)health")][:10],
        "launcher_restarts": len(b.all(ll.NVRX_WILL_RESTART.pattern)),
    }

    c_save = "/tmp/gpu_proof/c_straggler"
    c_env = dict(base_env, **strag["env"], NRP_FAULT="slow", NRP_FAULT_STEP="40")
    c_cmd = [py, "-m", "torch.distributed.run", "--standalone", "--nnodes=1", "--nproc-per-node=1"]
    c_cmd += ["--max-restarts=0", ENTRY, *strag["args"], f"checkpoint.save={c_save}", "train.train_iters=80"]
    c = Job("c_straggler_slow", c_cmd, c_env, timeout=180).run(os.path.join(out, "c_straggler.log"))
    reports = []
    current = None
    for t, line in c.lines:
        if "GPU individual performance" in line or "GPU relative performance" in line:
            current = {"t": round(t, 2), "kind": "individual" if "individual" in line else "relative", "scores": {}}
            reports.append(current)
            continue
        m = ll.NVRX_STRAGGLER_SCORE.search(line)
        if current is not None and m:
            current["scores"][m.group(1)] = float(m.group(2))
        else:
            current = None
    results[c.name] = {
        "rc": c.rc,
        "wall_s": round(c.wall_s, 2),
        "finished": _sha(c) is not None,
        "detector_initialised": bool(c.first(r"NVRx straggler detection enabled")),
        "cupti_failure": (c.first(r"(?i)cupti.*(error|fail)|Failed to initialize NVRx") or (0, ""))[1],
        "slow_from_s": (c.first(r"FAULT_INJECTED kind=slow") or (None,))[0],
        "score_blocks": reports,
        "straggler_warnings": [line for _, line in c.all(r"STRAGGLER DETECTION WARNING")],
        "first_warning_after_slow_s": _delta(c, r"FAULT_INJECTED kind=slow", r"STRAGGLER DETECTION WARNING"),
        "reports": [line for _, line in c.all(r"STRAGGLER_REPORT")],
    }

    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(results, f, indent=2)
    table = _summary_md(results)
    with open(os.path.join(out, "summary.md"), "w") as f:
        f.write(table)
    print(table)
    print(json.dumps(results, indent=2))
    return 0


def _summary_md(r: dict) -> str:
    rows = ["| job | rc | finished | params = fault-free | detection (s) | fault -> resumed (s) | notes |"]
    rows.append("|---|---|---|---|---|---|---|")
    for name in ("a0_ft_no_fault", "a1_ft_kill", "a2_ft_hang"):
        x = r[name]
        note = f"restarts={x['restarts']}; {x['detection_line'][-90:]}"
        rows.append(
            f"| {name} | {x['rc']} | {x['finished']} | {x['params_equal_fault_free']} | {x['detect_s']} | "
            f"{x['fault_to_resumed_s']} | {note.replace('|', '/')} |"
        )
    b = r["b_inprocess_raise"]
    rows.append(
        f"| b_inprocess_raise | {b['rc']} | {b['finished']} | {b['params_equal_fault_free']} | "
        f"{b['fault_to_reentry_s']} (to re-entry) | {b['fault_to_resumed_s']} | "
        f"same process re-entered={b['same_pid_reentered']}, launcher restarts={b['launcher_restarts']} |"
    )
    c = r["c_straggler_slow"]
    ind = [blk["scores"] for blk in c["score_blocks"] if blk["kind"] == "individual"]
    rel = [blk["scores"] for blk in c["score_blocks"] if blk["kind"] == "relative"]
    rows.append(
        f"| c_straggler_slow | {c['rc']} | {c['finished']} | n/a | {c['first_warning_after_slow_s']} "
        f"(slow -> warning) | n/a | individual={ind} relative={rel} warnings={len(c['straggler_warnings'])} |"
    )
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
