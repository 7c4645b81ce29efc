"""The container entry as DGX Cloud's and Lepton's first process (issue 35), signalled as the platform signals it.

No DGX Cloud or Lepton here: each job is built by NeMo-Run's own code (``Experiment.add`` with the plugins, then
the executor's real ``launch()``, which writes ``launch_script.sh`` and, on DGX Cloud, posts the workload to a
stand-in of the Run:ai API: tests/runai_standin.py). The container command the platform would start is then
started by the real Docker daemon with the job directory mounted where the platform's storage puts it, and the
container's first process gets SIGTERM (``docker kill --signal TERM``: what the kubelet sends a pod's
containers). The job's program stands in for ft_launcher: it says when it is up and whether SIGTERM reached it.
Without the entry the signal is lost (measured in tests/contract/test_executors_ft.py).
"""

from __future__ import annotations

import inspect
import re
import shlex
import subprocess
import sys
import time
import uuid
import warnings
from pathlib import Path

import pytest

from nemo_resiliency_plugins import PreemptionPlugin
from nemo_resiliency_plugins.preemption import PreemptionSignalWarning
from tests.contract.executor_jobs import render
from tests.contract.test_executors_ft import dgxcloud, lepton
from tests.docker_fixture import DOCKER
from tests.runai_standin import runai_standin

pytestmark = pytest.mark.docker

#: Seconds the stand-in for ft_launcher waits for SIGTERM before saying it never came.
PROGRAM_WAIT_S = 60
PROGRAM = f"""\
import signal, sys, time
def on_term(signum, frame):
    print("PROGRAM GOT SIGTERM", flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
print("PROGRAM UP", flush=True)
time.sleep({PROGRAM_WAIT_S})
print("PROGRAM NEVER SIGNALLED", flush=True)
sys.exit(3)
"""


def _docker(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([DOCKER, *args], capture_output=True, text=True, timeout=timeout)


def _signal_first_process(local_docker, command: list[str], mounts: list[str]) -> tuple[int, str, list[str]]:
    """Start ``command`` as a container's first process, SIGTERM that process once the program is up; return the
    container's exit code, its log and the first process's argv as it was when signalled."""
    name = f"nrp-entry-{uuid.uuid4().hex[:12]}"
    volumes = [arg for mount in [*local_docker.mounts, *mounts] for arg in ("-v", mount)]
    env = [arg for key, value in local_docker.env.items() for arg in ("-e", f"{key}={value}")]
    started = _docker("run", "-d", "--name", name, "--network", "none", *volumes, *env, local_docker.image, *command)
    assert started.returncode == 0, started.stderr
    try:
        deadline = time.monotonic() + PROGRAM_WAIT_S / 2  # the program starts in well under a second
        log = ""
        while "PROGRAM UP" not in log:  # its own line: the signal cannot come before its handler
            assert time.monotonic() < deadline, f"the job's program never started:\n{log}"
            time.sleep(0.2)
            log = _docker("logs", name).stdout
        pid1 = _docker("exec", name, "cat", "/proc/1/cmdline").stdout.split("\0")
        killed = _docker("kill", "--signal", "TERM", name)
        assert killed.returncode == 0, killed.stderr
        waited = _docker("wait", name, timeout=PROGRAM_WAIT_S + 30)  # a lost signal shows as exit 3 after the wait
        assert waited.returncode == 0, waited.stderr
        logs = _docker("logs", name)
        return int(waited.stdout.strip()), logs.stdout + logs.stderr, [part for part in pid1 if part]
    finally:
        _docker("rm", "-f", name)


def _program(tmp_path: Path) -> tuple[list[str], str]:
    """The job's command and the mount that makes its file visible in the container."""
    path = tmp_path / "program.py"
    path.write_text(PROGRAM)
    return ["python3", str(path)], f"{tmp_path}:{tmp_path}:ro"


def _render(make, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("error", PreemptionSignalWarning)  # with a route, the signal is not reported lost
        return render(make(**kw), [PreemptionPlugin()])


def _assert_forwarded(code: int, log: str, pid1: list[str]) -> None:
    assert pid1[:3] == ["python3", "-c", "import base64,sys;exec(base64.b64decode(sys.argv.pop(1)))"], pid1
    assert "PROGRAM GOT SIGTERM" in log and "PROGRAM NEVER SIGNALLED" not in log, log
    # No launcher in the tree: the program itself got it, named by its file name (never by its path: issue 50).
    assert re.search(r"container entry: got SIGTERM, sent it to pid \d+ \(program\.py\)$", log, re.M), log
    assert code == 0, log  # the entry exits with the launch script's status: the program's 0 after the signal


def test_dgx_cloud_workload_command_passes_sigterm_to_the_job(local_docker, tmp_path):
    job = _render(dgxcloud, nodes=1)
    executor = job.executor
    command, program_mount = _program(tmp_path)
    with runai_standin() as (url, posted):
        executor.base_url, executor.launched_from_cluster = url, True
        executor.launch("train", command)
    (workload,) = posted
    spec = workload["body"]["spec"]
    # Run:ai's command and args, read the way NeMo-Run's data mover writes them ("sh -c" + a single-quoted script).
    container_command = shlex.split(spec["command"]) + shlex.split(spec["args"])
    code, log, pid1 = _signal_first_process(
        local_docker, container_command, [f"{executor.job_dir}:{executor.pvc_job_dir}", program_mount]
    )
    _assert_forwarded(code, log, pid1)
    assert pid1[4:] == ["/bin/bash", f"{executor.pvc_job_dir}/launch_script.sh"]


def test_lepton_job_command_passes_sigterm_to_the_job(local_docker, tmp_path):
    from nemo_run.core.execution.lepton import LeptonExecutor

    job = _render(lepton, pre_launch_commands=["echo users-own-pre-launch"])
    executor = job.executor
    command, program_mount = _program(tmp_path)
    with pytest.raises(Exception):  # noqa: B017,PT011 - it stops at copying the job to Lepton (no workspace)
        executor.launch("train", command)
    # The container command create_lepton_job sends (fixed there; read from NeMo-Run's own code).
    lepton_command = ["/bin/bash", "-c", f"bash {executor.lepton_job_dir}/launch_script.sh"]
    assert 'cmd = ["/bin/bash", "-c", f"bash {self.lepton_job_dir}/launch_script.sh"]' in inspect.getsource(
        LeptonExecutor.create_lepton_job
    )
    code, log, pid1 = _signal_first_process(
        local_docker, lepton_command, [f"{executor.job_dir}:{executor.lepton_job_dir}", program_mount]
    )
    _assert_forwarded(code, log, pid1)
    assert pid1[4:] == ["/bin/bash", f"{executor.lepton_job_dir}/launch_script.sh"]
    assert log.count("users-own-pre-launch") == 1, log  # the user's pre-launch commands run once, under the entry


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
