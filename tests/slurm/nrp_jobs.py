"""Submit the reference workload with our plugins through NeMo-Run's real SlurmExecutor + LocalTunnel.

Same set-up as tests/slurm/test_nemo_run_slurm.py (see its docstring for why each setting is needed); the
experiment is built in a subprocess so NEMORUN_HOME is a fresh directory per job. The job is followed with
the ``local_slurm`` fixture (scontrol/jobcomp: it also lifts the hold Slurm puts on a requeued job); NeMo-Run's
own view of a job's state, which it reads with ``sacct`` from the cluster's slurmdbd, is :func:`nemo_run_state`.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nemo_resiliency_plugins.job import log_lines as ll

VENV_BIN = str(Path(sys.executable).parent)

SUBMIT = textwrap.dedent(
    """
    import json, os, sys
    import nemo_run as run
    from nemo_resiliency_plugins.fault_tolerance import FaultTolerancePlugin
    from nemo_resiliency_plugins.preemption import PreemptionPlugin
    from nemo_resiliency_plugins.straggler import StragglerDetectionPlugin

    spec = json.loads(sys.argv[1])
    home = os.environ["NEMORUN_HOME"]
    executor = run.SlurmExecutor(
        account="local",
        partition=spec["partition"],
        tunnel=run.LocalTunnel(job_dir=os.path.join(home, "experiments")),
        nodes=spec["nodes"],
        ntasks_per_node=spec["ntasks_per_node"],
        time=spec["time"],
        container_image=None,
        packager=run.Packager(),
        env_vars={"PATH": spec["venv_bin"] + ":/usr/local/bin:/usr/bin:/bin", **spec["env"]},
        setup_lines=spec.get("setup_lines"),
        srun_args=spec.get("srun_args"),
    )
    launcher = spec.get("launcher")
    if isinstance(launcher, dict):  # a SlurmTemplate, e.g. Megatron Bridge's own bash -c wrapper
        from nemo_run.core.execution.launcher import SlurmTemplate
        executor.launcher = SlurmTemplate(template_inline=launcher["template"], template_vars=launcher["vars"])
    elif launcher is not None:
        executor.launcher = launcher
    task = run.Script(
        path="nemo_resiliency_plugins.testing.workload", m=True, entrypoint="python", args=spec["args"]
    )
    plugins = []
    if spec.get("preemption") is not None:
        plugins.append(PreemptionPlugin(**spec["preemption"]))
    if spec.get("ft") is not None:
        plugins.append(FaultTolerancePlugin(**spec["ft"]))
    if spec.get("straggler") is not None:
        plugins.append(StragglerDetectionPlugin(**spec["straggler"]))
    with run.Experiment(spec["name"], executor=executor, skip_status_at_exit=True,
                        enable_goodbye_message=False) as exp:
        exp.add(task, name="train", plugins=plugins)
        exp.run(detach=True)
        handle = exp.jobs[0].handle
    print(f"HANDLE={handle}")
    print(f"EXPDIR={exp._exp_dir}")
    """
)


# What a user does to see a detached experiment's state later: reload it by id and ask for its status, which
# goes through NeMo-Run's runner to its SlurmTunnelScheduler.describe (``sacct --parsable2 -j <id>``). The
# runner's own answer is printed too: Job.status() hides an error behind the state saved at launch.
STATUS = textwrap.dedent(
    """
    import sys
    import nemo_run as run

    exp = run.Experiment.from_id(sys.argv[1])
    (status,) = exp.status(return_dict=True).values()
    described = exp._runner.status(status["handle"])
    print(f"STATE={status['status']}")
    print(f"DESCRIBED={described!r}")
    """
)


@dataclass
class SubmittedJob:
    job_id: str
    exp_dir: Path
    submitted_at: float

    @property
    def nemorun_home(self) -> Path:
        return self.exp_dir.parents[2]  # <NEMORUN_HOME>/experiments/<title>/<id>

    def task_dir(self) -> Path:
        return self.exp_dir / "train"

    def sbatch_script(self) -> str:
        return next(self.exp_dir.glob("*_sbatch.sh")).read_text()

    def logs(self) -> str:
        """Every attempt's rank/launcher log (``log-*_<restart>.out``) and the batch log, in name order."""
        files = sorted(self.task_dir().glob("*.out"))
        return "\n".join(f"===== {f.name}\n{f.read_text(errors='replace')}" for f in files)

    def attempt_logs(self) -> dict[int, str]:
        """``SLURM_RESTART_COUNT`` -> that attempt's srun output (NeMo-Run names it ``..._<restart>.out``)."""
        out = {}
        for f in self.task_dir().glob("log-*.out"):
            m = re.search(r"_(\d+)\.out\Z", f.name)
            if m:
                out[int(m.group(1))] = f.read_text(errors="replace")
        return out


def submit(
    local_slurm: Any,
    tmp_path: Path,
    *,
    name: str,
    args: list[str],
    time_limit: str,
    env: dict[str, str] | None = None,
    preemption: dict[str, Any] | None = None,
    ft: dict[str, Any] | None = None,
    nodes: int = 1,
    ntasks_per_node: int = 2,
    straggler: dict[str, Any] | None = None,
    setup_lines: str | None = None,
    launcher: str | dict[str, Any] | None = None,
    srun_args: list[str] | None = None,
) -> SubmittedJob:
    home = tmp_path / "nemorun_home"
    home.mkdir(exist_ok=True)
    spec = dict(
        partition=local_slurm.partition,
        time=time_limit,
        venv_bin=VENV_BIN,
        env=env or {},
        args=args,
        name=name,
        preemption=preemption,
        ft=ft,
        nodes=nodes,
        ntasks_per_node=ntasks_per_node,
        straggler=straggler,
        setup_lines=setup_lines,
        launcher=launcher,
        srun_args=srun_args,
    )
    p = subprocess.run(
        [sys.executable, "-c", SUBMIT, json.dumps(spec)],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "NEMORUN_HOME": str(home)},
        cwd=tmp_path,
    )
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    # NeMo-Run may print the job's queue state ("[SLURM] Job 52 - State: PENDING, ...") right after the handle,
    # on the same line, when the job does not start at once (a busy cluster): read the id, not the whole line.
    handle = re.search(r"^HANDLE=slurm_tunnel://[^/\s]+/(\d+)", p.stdout, re.MULTILINE)
    assert handle, out
    job_id = handle.group(1)
    exp_dir = Path(next(ln.split("=", 1)[1] for ln in p.stdout.splitlines() if ln.startswith("EXPDIR=")))
    return SubmittedJob(job_id=job_id, exp_dir=exp_dir, submitted_at=time.time())


#: NeMo-Run's terminal job states (torchx ``AppState`` names).
NEMO_RUN_TERMINAL = frozenset({"SUCCEEDED", "FAILED", "CANCELLED"})
#: How long NeMo-Run's view may lag the controller's. slurmctld sends a job's end to slurmdbd asynchronously (an
#: agent queue, retried while slurmdbd is busy), so ``sacct`` -- which NeMo-Run reads -- can still say RUNNING for
#: a while after ``scontrol`` says COMPLETED: a second or two here when quiet, more under load. 90 s bounds it.
SACCT_SETTLE_S = 90.0


def nemo_run_state(job: SubmittedJob, settle_s: float = SACCT_SETTLE_S) -> tuple[str, str]:
    """NeMo-Run's state of a job the controller already reports ended (a torchx ``AppState`` name: ``SUCCEEDED``,
    ``FAILED``, ...), asked the way a user would, in a fresh interpreter with the job's NEMORUN_HOME, and the output
    to show when it is wrong. Asked again (every 3 s, for at most ``settle_s``) while the answer is not terminal:
    the accounting NeMo-Run reads lags the controller (:data:`SACCT_SETTLE_S`)."""
    deadline = time.monotonic() + settle_s
    while True:
        p = subprocess.run(
            [sys.executable, "-c", STATUS, job.exp_dir.name],
            capture_output=True,
            text=True,
            timeout=180,
            env={**os.environ, "NEMORUN_HOME": str(job.nemorun_home)},
            cwd=job.exp_dir.parent,
        )
        out = p.stdout + p.stderr
        assert p.returncode == 0, out
        state = re.search(r"^STATE=(\w+)$", p.stdout, re.MULTILINE)
        assert state, out
        if state.group(1) in NEMO_RUN_TERMINAL or time.monotonic() > deadline:
            return state.group(1), out
        time.sleep(3.0)


def finished_hash(text: str) -> tuple[int, str]:
    m = ll.WORKLOAD_FINISHED_HASH.findall(text)
    assert m, "no FINISHED line:\n" + text[-6000:]
    return int(m[-1][0]), m[-1][1]


def launcher_times(text: str, pattern: str = "") -> list[float]:
    """Epoch seconds of ft_launcher's own log lines (``2026-12-02 15:19:07,000 [...]``) matching ``pattern``."""
    found = []
    for line in text.splitlines():
        m = ll.NVRX_STAMP.match(line)
        if m and re.search(pattern, line):
            found.append(time.mktime(time.strptime(m.group(1), "%Y-%m-%d %H:%M:%S")) + int(m.group(2)) / 1000)
    return found


# ------------------------------------------------------- a node of a running job, lost or frozen from outside


def job_processes(job_id: str, node_id: str, ranks_only: bool = False) -> dict[int, str]:
    """pid -> node name of every process of Slurm job ``job_id`` on its ``node_id``-th node (SLURM_NODEID), read
    from /proc/<pid>/environ: the task processes and everything they started (launcher, monitors, ranks).
    ``ranks_only``: only the training ranks (torch's launcher gives each worker LOCAL_RANK; the launcher and its
    monitors have none): a rank that dies on a healthy node."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            raw = Path(f"/proc/{entry}/environ").read_bytes()
        except OSError:
            continue
        env = dict(item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
        if (
            env.get(b"SLURM_JOB_ID") == job_id.encode()
            and env.get(b"SLURM_NODEID") == node_id.encode()
            and env.get(b"SLURM_STEP_ID", b"batch") not in (b"batch", b"extern")
            and (not ranks_only or b"LOCAL_RANK" in env)
        ):
            found[int(entry)] = env.get(b"SLURMD_NODENAME", b"?").decode()
    return found


def signal_node_when(
    job,
    attempt: int,
    pattern: str,
    sig: int,
    record: dict,
    node_id=lambda job: "1",
    timeout: float = 500,
    choose_after: str | None = None,
    ranks_only: bool = False,
) -> bool:
    """Once attempt ``attempt``'s log matches ``pattern``, send ``sig`` to every process of the job on one of its
    nodes (``node_id(job)``, SLURM_NODEID; by default the second node, the one running rank 1): SIGKILL is a node
    that dies, SIGSTOP one that hangs as a whole. Records the node name, the pids and the time in ``record``.

    ``choose_after``: a pattern of the same log after which the node and its processes are chosen ahead of
    ``pattern``. Taking a node's processes reads every process's environment (and ``node_id`` may read more, e.g.
    the host's sockets): seconds on a loaded host, longer than the few steps between ``pattern`` and the next
    checkpoint; chosen ahead, the signal follows ``pattern`` within one 0.1 s poll. Processes of that node that
    started after the choice (none are expected once its ranks run) are signalled in a second pass. ``ranks_only``:
    only the node's training ranks (see :func:`job_processes`)."""
    deadline = time.monotonic() + timeout
    chosen: tuple[str, dict[int, str]] | None = None
    while time.monotonic() < deadline:
        text = job.attempt_logs().get(attempt, "")
        if chosen is None and choose_after is not None and re.search(choose_after, text):
            node = node_id(job)
            chosen = (node, job_processes(job.job_id, node, ranks_only))
        if re.search(pattern, text):
            node, procs = chosen if chosen is not None else (node_id(job), {})
            procs = procs or job_processes(job.job_id, node, ranks_only)
            at = _signal(procs, sig)
            late = {p: n for p, n in job_processes(job.job_id, node, ranks_only).items() if p not in procs}
            procs.update(late)
            _signal(late, sig)
            record.update(node=sorted(set(procs.values())), pids=sorted(procs), at=at)
            return True
        time.sleep(0.1)
    return False


def _signal(procs: dict[int, str], sig: int) -> float:
    """Send ``sig`` to each pid (one already gone is skipped); the time it was sent."""
    at = time.time()
    for pid in procs:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass
    return at


def store_pids(job) -> set[int]:
    """The processes listening on the job's own c10d port (FaultTolerancePlugin gives each multi-node job one; the
    launchers print it as their rdzv_endpoint): the ft_launcher that hosts the rendezvous TCPStore."""
    import psutil

    found = ll.TORCH_RDZV_PORT.findall("\n".join(job.attempt_logs().values()))
    assert found and len(set(found)) == 1, found  # the same port in every attempt, read from the launchers' lines
    port = int(found[0])
    return {c.pid for c in psutil.net_connections(kind="tcp") if c.status == "LISTEN" and c.laddr.port == port}


#: NVRx's line when its rendezvous gives a launcher an active rank: (srun task, active rank, round).
# A launcher's own line only (a time stamp first): a rank that prints one (NRP_SPOOF_LINES) is not a launcher.
class _AssignedActive:
    """``findall(text)``: (srun task, active rank, round) of each NVRx line (log_lines.NVRX_ASSIGNED) at a line's
    start after NVRx's own time stamp (log_lines.NVRX_STAMP), as ``re.findall`` gives them."""

    @staticmethod
    def findall(text: str) -> list[tuple[str, str, str]]:
        return [
            m.groups()
            for line in text.splitlines()
            if ll.NVRX_STAMP.match(line) and (m := ll.NVRX_ASSIGNED.search(line))
        ]


ASSIGNED_ACTIVE = _AssignedActive()


def training_node_without_store(job) -> str:
    """SLURM_NODEID of a node whose launcher runs a training rank and does not host the rendezvous store, the last
    such node (the first one runs the batch script): the loss a spare can make good. Read from NVRx's own lines of
    the first run, cheaply (a scan of every process and socket took longer than five steps on a loaded host): the
    launchers it gave an active rank in round 0 (``infra:<task>``; one task per node, so the task is the node), less
    the first node, which hosts the store (FaultTolerancePlugin's spare block says so to each launcher)."""
    text = job.attempt_logs().get(0, "")
    active = {task for task, _, rnd in ASSIGNED_ACTIVE.findall(text) if rnd == "0"}
    found = sorted(active - {"0"}, key=int)
    if not found:
        raise AssertionError(f"no launcher but the store host's was given an active rank in round 0: {sorted(active)}")
    return found[-1]


def newest_training_node_without_store(job) -> str:
    """As :func:`training_node_without_store`, in the newest rendezvous round of the first run: after a spare took a
    lost node's place, the node (a spare until then) that trains beside the store host."""
    found = [(int(rnd), task) for task, _, rnd in ASSIGNED_ACTIVE.findall(job.attempt_logs().get(0, ""))]
    newest = max((rnd for rnd, _ in found), default=None)
    active = sorted({task for rnd, task in found if rnd == newest} - {"0"}, key=int)
    if not active:
        raise AssertionError(f"no launcher but the store host's has an active rank in the newest round: {found}")
    return active[-1]
