"""Hand-made job directories for the report's hostile-input tests (issue 47), and the CLI run in a child process
under a memory limit (a report that builds a list of a trillion node names must fail there, not take this
machine's memory)."""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path

#: A launcher log of one Slurm attempt: NVRx's dated line, a rank's exit seen by torch's agent, a restart, the
#: next cycle's start, the workload's finish (the shapes of job/log_lines.py's fixture lines).
GOOD_LOG = (
    "2026-12-05 10:00:00,000 [INFO] [nrp-node1] [workload:?(?) infra:0(4242)] launcher.py:1 ft_launcher: started\n"
    "E1205 10:00:05.000000 4242 torch/distributed/elastic/agent/server/api.py:1] failed (exitcode: -9) local_rank: 1"
    " (pid: 7) of binary: python\n"
    "I1205 10:00:05.500000 4242 torch/distributed/elastic/agent/server/api.py:1]   restart_count=1\n"
    "2026-12-05 10:00:07,000 [INFO] [nrp-node1] [workload:?(?) infra:0(4242)] profiling.py:93   - "
    "Cycle: 1 Event: worker_start_completed Node: nrp-node1_4242_0 Rank: 0 "
    "Time: 2026-12-05 10:00:07.000000\n"
    "[default0]:[rank0] FINISHED step=40 params_sha256=ab\n"
    "I1205 10:00:30.000000 4242 torch/distributed/elastic/agent/server/api.py:932] [default] worker group "
    "successfully finished. Waiting 300 seconds for other agents to finish.\n"
)
BATCH_LOG = "++ scontrol show hostnames 'nrp-node[1-2]'\nnemo-resiliency-plugins: attempt 0 started\n"
#: The address space the report's child process may use (bytes): the CLI's imports (torch maps its CUDA libraries,
#: several GB of address space, unused) fit; a list of a trillion node names does not.
MEMORY_LIMIT = 16 * 1024**3


def slurm_job(root: Path, log: str = GOOD_LOG, batch: str = BATCH_LOG) -> Path:
    job = root / "job"
    job.mkdir(parents=True, exist_ok=True)
    (job / "log-job_0.out").write_text(log)
    (job / "sbatch_job.out").write_text(batch)
    return job


def _limit() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def report_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``nemo-resiliency report ARGS`` in a child process with :data:`MEMORY_LIMIT` of address space; a hang is
    a TimeoutExpired (a failure, not a timed assertion: the command must end)."""
    code = "import sys; from nemo_resiliency_plugins.tools.cli import main; main(sys.argv[1:])"
    return subprocess.run(
        [sys.executable, "-c", code, "report", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        preexec_fn=_limit,
        check=False,
    )
