"""Test helpers that drive the real NeMo-Run code paths (Experiment.add applies plugins, package() builds
the command torchx would launch)."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import fcntl
import json
import logging
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import nemo_run as run
from nemo_run.run.torchx_backend.packaging import package

from nemo_resiliency_plugins.job import log_lines as ll


def add_job(task, executor, plugins, name: str = "train"):
    """Add ``task`` to a real Experiment (which clones it and runs every plugin's setup) and return the job."""
    with run.Experiment(f"t-{name}", executor=executor) as exp:
        exp.add(task, executor=executor, plugins=plugins, name=name)
        return exp.jobs[0]


def launch_command(job) -> tuple[str, list[str], dict[str, str]]:
    """(entrypoint, args, env) of the role NeMo-Run would launch for ``job``."""
    app = package(job.id, job.task, job.executor, serialize_to_file=False)
    role = app.roles[0]
    return role.entrypoint, list(role.args), dict(role.env)


def workload_script(save_dir: Path, fault: str | None, *, step_time: str, fault_step: int, fault_rank: int = 1):
    """The reference workload as a run.Script saving into ``save_dir``, with an optional injected fault."""
    from nemo_resiliency_plugins.testing.local_run import workload_task

    env = {"NRP_STEP_TIME": step_time}
    if fault:
        env |= {"NRP_FAULT": fault, "NRP_FAULT_STEP": str(fault_step), "NRP_FAULT_RANK": str(fault_rank)}
    return workload_task([f"checkpoint.save={save_dir}"], env=env)


def final_params(save_dir: Path) -> dict:
    import torch

    return torch.load(Path(save_dir) / "final_params.pt")


def assert_same_params(a: dict, b: dict) -> None:
    """Bit-identical parameters: nothing was lost to the fault."""
    import torch

    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key


_RANK_LINE = re.compile(r"\[[a-z]+\d+\]:")  # torch's prefix for a worker's teed line: [default1]:


def assert_ended_by_kill(row, *, rank: int | None = None) -> None:
    """A report row (``tools/report.py``'s CycleRow) of a cycle that a SIGKILLed rank ended: the report names the
    killed rank; or, when one poll of torch's agent found it dead together with a rank it took down (which then failed
    in its next collective, gloo's "Connection closed by peer"), torch's line names only that rank, and the row says
    it only lost a peer (``exit_after_peer``; ``tests/unit/test_report_exit_cause.py`` makes that case on purpose).
    Seen in CI on a loaded host: a Docker crash-loop cycle named "rank exited with code 1"."""
    from nemo_resiliency_plugins.tools.report import PEER_NOTE

    if row.exit_after_peer:
        assert row.exit_code > 0 and row.detected_by == f"rank exited with code {row.exit_code}{PEER_NOTE}", row
        return
    assert (row.detected_by, row.exit_code) == ("rank killed by signal 9", -9), row
    if rank is not None:
        assert row.detected_on_rank == rank, row


def fault_line(result, save_dir: Path, index: int = 0) -> tuple[int, float]:
    """(index in the job's log of the ``index``-th injected fault's FAULT_INJECTED line, the fault's Unix time as
    the injecting rank wrote it in its marker file)."""
    from nemo_resiliency_plugins.testing.faults import marker_name

    fields = dict(re.findall(r"(\w+)=(\S+)", (Path(save_dir) / marker_name(index)).read_text()))
    needle = f"FAULT_INJECTED kind={fields['kind']} step={fields['step']} rank={fields['rank']}"
    return next(i for i, line in enumerate(result.lines) if needle in line), float(fields["time"])


def before_fault(result, save_dir: Path, index: int = 0):
    """The job's log before the ``index``-th injected fault of its chain, each writer's lines cut on its own
    evidence. The ranks' lines reach the log through torch's tail threads, which poll each rank's file, so the
    launcher's lines about a fault can come before the faulting rank's last lines (the project's CI of 29a0657:
    ft_launcher's restart decision above rank 1's kill marker). Rank lines are cut at the fault's marker line;
    the launcher's lines at the first one stamped at or after the fault's time, which the injecting rank wrote
    with time.time() before it faulted (one host, one clock; the stamps are truncated to 1 ms, and no launcher
    reacts to a fault within 1 ms: its monitor polls every 0.3 s or more)."""
    from nemo_resiliency_plugins.tools.report import launcher_stamp

    rank_end, fault_time = fault_line(result, save_dir, index)
    year = dt.datetime.fromtimestamp(fault_time).year
    kept, launcher_done = [], False
    for i, line in enumerate(result.lines):
        if _RANK_LINE.match(line):
            if i < rank_end:
                kept.append(line)
            continue
        when = launcher_stamp(line, year)  # report's reading of NVRx's and torch's launcher stamps (local time)
        launcher_done = launcher_done or (when is not None and when.timestamp() >= fault_time)
        if not launcher_done:
            kept.append(line)  # an unstamped launcher line belongs with the stamped one above it
    return dataclasses.replace(result, lines=kept, log="\n".join(kept))


#: Rank 0's line when Megatron Bridge's in-process coordination store could not bind MASTER_PORT + 1.
_STORE_COLLISION = re.compile(r"DistNetworkError: The server socket has failed to listen .*EADDRINUSE")


def after_store_collisions(result):
    """(the job's log after the launcher restarts that start-up store collisions caused, how many there were).

    docs/races.md, "Megatron Bridge's in-process restart stores can collide with another socket": the store binds
    MASTER_PORT + 1, a random port of the ephemeral range that another socket of a busy host may hold; rank 0 then
    dies before its first step, and under ft_launcher the workers are started again on new ports (seen in a loaded CI
    run). A restart no test injected, and not the one a test asserts on: each launcher cycle before the job's first
    injected fault that ended in such a collision is cut off here, up to the next cycle's START lines, and counted.
    A collision later in the job is left in the log (the test's own assertions then show it)."""
    lines = result.lines
    cut = count = 0
    while True:
        # The next cycle begins with its ranks' START lines (restart=<the launcher's restart count>): the launcher
        # decided the restart before it started them, so its line is above them whatever the tail threads' order.
        starts = ll.exact(ll.WORKLOAD_START, None, None, count + 1)
        nxt = next((i for i in range(cut, len(lines)) if starts.search(lines[i])), None)
        if nxt is None:
            break
        cycle = lines[cut:nxt]
        if not any(_STORE_COLLISION.search(line) for line in cycle) or any("FAULT_INJECTED" in x for x in cycle):
            break
        cut, count = nxt, count + 1
    kept = lines[cut:]
    return dataclasses.replace(result, lines=kept, log="\n".join(kept)), count


REPO = Path(__file__).resolve().parents[1]


def workload_env(**extra: str) -> dict[str, str]:
    """The environment of a workload run started by a test itself (no NeMo-Run): none of the caller's NRP_,
    torchelastic or rank variables, the environment's and NVRx's bin first, 10 ms of extra compute per step."""
    venv = Path(sys.prefix)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NRP_", "TORCHELASTIC_", "PET_"))}
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "GROUP_RANK"):
        env.pop(k, None)
    env["PATH"] = os.pathsep.join([str(venv / "nvrx" / "bin"), str(venv / "bin"), env.get("PATH", "")])
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["PYTHONWARNINGS"] = "ignore"
    env["NRP_STEP_TIME"] = "0.01"
    env.update(extra)
    return env


def shared_reference_run(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """The fault-free reference run: 2 ranks under torchrun, no plugin, the reference config (20 steps, a checkpoint
    every 5), saving into ``<dir>/save``. Returns (save dir, the finished process with its output).

    Its final parameters are what every faulty run of the suite must reproduce bit for bit: the workload is
    deterministic whatever launches it and however slow its steps (checked on one CI run's directories: the
    torchrun reference, a LocalExecutor + ft_launcher run, a DockerExecutor run and a Slurm run gave identical
    parameters). Computed once per test session: the pytest-xdist workers share it through a lock file in the
    session's common temporary directory, so the second worker waits for the first worker's run instead of
    starting its own (each run costs about 35 s of CPU, most of it two interpreters importing Megatron Bridge)."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # pytest-<n>/ holds every worker's popen-gw<k>/: this session's, shared
    ref = root / "workload-reference"
    result = ref / "result.json"
    with open(root / "workload-reference.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also if this worker dies
        if not result.exists():
            ref.mkdir(exist_ok=True)
            cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
            cmd += ["-m", "nemo_resiliency_plugins.testing.workload", f"checkpoint.save={ref / 'save'}"]
            cmd += [f"checkpoint.load={ref / 'save'}"]
            proc = subprocess.run(
                cmd,
                cwd=REPO,
                env=workload_env(),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                timeout=HANG_GUARD_S,
            )
            (ref / "output.txt").write_text(proc.stdout)
            result.write_text(json.dumps({"args": cmd, "returncode": proc.returncode}))
    done = json.loads(result.read_text())
    return ref / "save", subprocess.CompletedProcess(done["args"], done["returncode"], (ref / "output.txt").read_text())


TRAIN = "/tmp/nrp-train.py"

#: Timeout of a child process that imports NeMo-Run or Megatron Bridge in a fast test. It only catches a hung child:
#: a healthy one ends far sooner, however loaded the host. Importing Megatron Bridge takes about 13 s on a quiet
#: 2-core machine and has taken over 180 s there at a load average of 20 (other work beside the tests), so a bound
#: near the quiet time fails healthy runs (issue 28).
HANG_GUARD_S = 900


def local(**kw):
    """A 2-rank LocalExecutor, as the unit tests use it."""
    return run.LocalExecutor(ntasks_per_node=2, **kw)


def slurm(tmp_path, **kw):
    """A 2-rank SlurmExecutor with a LocalTunnel under ``tmp_path`` (dry runs only)."""
    return run.SlurmExecutor(
        account="acct",
        partition="debug",
        nodes=1,
        ntasks_per_node=2,
        time="00:30:00",
        tunnel=run.LocalTunnel(job_dir=str(tmp_path / "slurm-jobs")),
        packager=run.Packager(),
        **kw,
    )


class LogRecords(logging.Handler):
    """The records one logger emits, on a handler of that logger's own."""

    def __init__(self, level: int) -> None:
        super().__init__(level)
        self.records: list[logging.LogRecord] = []
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)
        self.messages.append(record.getMessage())


@contextlib.contextmanager
def logged(name: str, level: int = logging.WARNING) -> Iterator[LogRecords]:
    """Collect what logger ``name`` emits at ``level`` and above, whatever earlier tests did to logging.

    Not pytest's caplog: caplog's handler sits on the root logger, and NeMo-Run replaces the root logger's
    handlers whenever an Experiment is created (``configure_logging(force=True)``) and drops the first one when
    an Experiment is garbage-collected (``Experiment.__del__``), which can happen in the middle of a later test.
    A library's ``logging.config`` call may also have disabled loggers it does not name.
    """
    logger = logging.getLogger(name)
    handler, saved = LogRecords(level), (logger.level, logger.disabled)
    logger.addHandler(handler)
    logger.setLevel(level)
    logger.disabled = False
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(saved[0])
        logger.disabled = saved[1]


# A stand-in rank for the signal-forwarding tests: saves (prints) on SIGTERM and exits 0, as Megatron Bridge's exit
# handler does; writes its pid to argv[1] (+ LOCAL_RANK under torchrun) once its handler is set.
RANK = """
import signal, sys, time, pathlib
def on_term(signum, frame):
    print("rank got SIGTERM, saved", flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
import os
pathlib.Path(sys.argv[1] + os.environ.get("LOCAL_RANK", "")).write_text(str(os.getpid()))
time.sleep(60)
print("rank never signalled", flush=True)
"""


def forward_block_program(body: str) -> str:
    """A bash program with the preemption signal forwarding's functions (core/sbatch/forward_signal.sh, after the
    chaining helpers it needs), then ``body``."""
    from nemo_resiliency_plugins.core import slurm_script

    return f"{slurm_script._CHAIN_HELPERS}\n{slurm_script._FORWARD}\n{body}"
