"""A job through NeMo-Run itself on the GPU machine: ``run.Experiment`` + ``LocalExecutor`` + the plugins.

Not a replay (``prepare.py`` + ``pretrain_proof.py`` record what the plugins set on the CPU machine and replay it):
here nemo-run is imported on the GPU machine (carried by ``pack_site.py --nemo-run``, ``--no-deps`` style, plus
what its LocalExecutor + ft_launcher path imports), the plugins' ``setup()`` runs there, and NeMo-Run's torchx
local scheduler starts NVRx's ``ft_launcher`` (its ft_launcher component) with Megatron Bridge's ``pretrain()``
(``pretrain_entry.py``) as the task, exactly as the README's first example does it:

    FaultTolerancePlugin(...) + AsyncCheckpointPlugin() on a run.Script, run.Experiment(...).run()

The rank is SIGKILLed at step 25 (``NRP_FAULT=kill``, once per save directory); ft_launcher restarts it in the
job, Megatron Bridge loads the async step-20 checkpoint and finishes step 40. This script prints the
experiment's status as NeMo-Run reports it, and ``NEMORUN_JOB`` lines read from the job's log: the restarts,
the checkpoint it resumed from and the final parameter hash, to compare with the fault-free run's.

    python3 benchmarks/gpu/nemorun_job.py OUT_DIR [OVERRIDE ...]   (the carried packages on PYTHONPATH, ft_launcher
                                                                     on PATH; OVERRIDEs: more Hydra overrides for
                                                                     the task, e.g. logger.log_interval=1)
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import sys
import time

import nemo_run as run

from nemo_resiliency_plugins import AsyncCheckpointPlugin, FaultTolerancePlugin
from nemo_resiliency_plugins.job import log_lines as ll

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from prepare import ASYNC, FT  # noqa: E402  (the replay's settings, so the two proofs are comparable)

ENTRY = os.path.join(HERE, "pretrain_entry.py")
WORK = "/tmp/nemorun_job"
ITERS = 40
FAULT_STEP = 25


def main(out: str, extra: list[str] | None = None) -> int:
    os.makedirs(out, exist_ok=True)
    shutil.rmtree(WORK, ignore_errors=True)
    save = os.path.join(WORK, "ckpt")
    task = run.Script(
        path=ENTRY,
        entrypoint="python",
        args=[f"checkpoint.save={save}", "checkpoint.save_interval=10", f"train.train_iters={ITERS}", *(extra or [])],
    )
    env = {
        "NRP_DEVICE": "cuda",
        "NRP_STEP_TIME": "0.02",
        "NRP_FAULT": "kill",
        "NRP_FAULT_STEP": str(FAULT_STEP),
        "NRP_FAULT_RANK": "0",
    }
    executor = run.LocalExecutor(ntasks_per_node=1, env_vars=env)
    plugins = [FaultTolerancePlugin(**FT), AsyncCheckpointPlugin(**ASYNC)]
    started = time.time()
    with run.Experiment("nrp-gpu-ft-async", log_level="INFO") as exp:
        exp.add(task, executor=executor, plugins=plugins, name="pretrain")
        exp.run(sequential=True, detach=False)
    # NeMo-Run waits for the job when the Experiment context exits: the final state exists only after it.
    wall = time.time() - started
    job = exp.jobs[0]
    state = getattr(job.state, "name", str(job.state))
    with run.Experiment.from_id(exp._id) as again:  # what a user asks later: NeMo-Run's own record of the job
        status = {k: str(v.get("status")) for k, v in again.status(return_dict=True).items()}
    job_dir = job.executor.job_dir
    logs = sorted(glob.glob(os.path.join(job_dir, "**", "*.log"), recursive=True))
    text = ""
    for path in logs:
        with open(path, errors="replace") as f:
            text += f.read() + "\n"
        shutil.copy(path, os.path.join(out, "nemorun_" + os.path.basename(path)))
    hashes = ll.WORKLOAD_FINISHED_HASH.findall(text)
    summary = {
        "experiment_id": exp._id,
        "job_dir": job_dir,
        "state": state,
        "status_from_id": status,
        "wall_s": round(wall, 1),
        "plugins": [repr(p) for p in plugins],
        "task_args": [str(a) for a in job.task.args] if hasattr(job, "task") else None,
        "launcher": type(job.executor.launcher).__name__ if job.executor.launcher is not None else None,
        "logs": [os.path.relpath(p, job_dir) for p in logs],
        "starts": re.findall(r"\] START pid=\d+ restart=\d+", text),
        "faults": [m.group(0) for m in ll.WORKLOAD_INJECTED.finditer(text)][:3],
        "restarts": len(ll.NVRX_WILL_RESTART.findall(text)),
        "async_lines": re.findall(r"[^\n]*(?:scheduled an async checkpoint|successfully saved checkpoint)[^\n]*", text)[
            :8
        ],
        "resume_lines": re.findall(r"[^\n]*successfully loaded checkpoint[^\n]*", text)[:4],
        "finished": hashes,
    }
    with open(os.path.join(out, "nemorun_summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
    print("NEMORUN_JOB " + json.dumps(summary), flush=True)
    return 0 if hashes and state == "SUCCEEDED" else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "/tmp/nemorun_job_out", sys.argv[2:]))
