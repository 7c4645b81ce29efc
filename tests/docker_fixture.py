"""pytest fixture for the local Docker daemon and image of ``.ci/docker-up`` / ``.ci/docker-down``.

Use it from a conftest (``from tests.docker_fixture import local_docker  # noqa: F401``) and mark the tests
``@pytest.mark.docker``. The session-scoped fixture ``local_docker``:

* runs ``.ci/docker-up`` (idempotent; installs docker.io if missing, starts dockerd, builds the image if it is
  missing or stale; needs root). If Docker cannot be brought up the test **fails** with the script's output --
  it is never skipped;
* stops the daemon at the end of the session only if this session started it (when CI's ``.ci/run`` or a
  developer started it beforehand, it is left running);
* yields a :class:`LocalDocker`, whose :meth:`LocalDocker.executor` builds a real ``run.DockerExecutor`` for
  that image and :meth:`LocalDocker.run` launches a task through it and collects what happened.

The image holds only system libraries and a shell (see ``.ci/docker-up``); the interpreter, this environment and
the repository are bind-mounted read-only at their host paths, so the container runs exactly the code under test.
Directories a job writes (checkpoints) are mounted read-write at their host paths; NeMo-Run itself mounts the
job directory at ``/nemo_run``.
"""

from __future__ import annotations

import contextlib
import glob
import os
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
DOCKER_UP = REPO_ROOT / ".ci" / "docker-up"
DOCKER_DOWN = REPO_ROOT / ".ci" / "docker-down"
STATE_DIR = Path(os.environ.get("DOCKER_LOCAL_DIR", "/tmp/nrp-docker"))
IMAGE = os.environ.get("NRP_DOCKER_IMAGE", "nrp-hostfs:latest")
DOCKER = "/usr/bin/docker"  # the client docker.io installs (matches the daemon's API), not the first on PATH


@dataclass
class DockerRunResult:
    """Outcome of one DockerExecutor job: torchx's final state and the container's log (``log_<name>.out``)."""

    state: str
    wall_s: float
    job_dir: str
    log: str
    lines: list[str] = field(default_factory=list)
    #: the experiment directory NeMo-Run saved (what ``nemo-resiliency doctor`` reads)
    exp_dir: str = ""
    #: NeMo-Run's wait ended without a terminal state (its race with the container's auto-removal) and the state
    #: was asked for again (:func:`_settled_state`)
    wait_race: bool = False

    def grep(self, needle: str) -> list[str]:
        return [line for line in self.lines if needle in line]


@dataclass
class LocalDocker:
    #: the image's id (``sha256:...``): NeMo-Run's scheduler tries to pull any image named by tag before each
    #: job, which here (no registry) is a wasted network attempt; an id is used as it is
    image: str
    #: read-only bind mounts that make the host's interpreter, environment and repository visible at the same paths
    mounts: list[str]
    #: environment of every container: PATH to this environment first, the repository importable
    env: dict[str, str]
    started_here: bool
    up_output: str = ""

    def executor(
        self,
        *,
        ntasks: int = 2,
        writable: Iterable[Path | str] = (),
        env: dict[str, str] | None = None,
        launcher: Any = None,
    ):
        """A real ``run.DockerExecutor`` on the host's network (one node: rendezvous on localhost), with
        ``writable`` directories mounted read-write at their own paths."""
        import nemo_run as run

        volumes = [*self.mounts, *(f"{Path(d).resolve()}:{Path(d).resolve()}:rw" for d in writable)]
        return run.DockerExecutor(
            container_image=self.image,
            num_gpus=0,
            ntasks_per_node=ntasks,
            network="host",
            shm_size="1g",
            packager=run.Packager(),  # nothing to ship: the repository is mounted
            volumes=volumes,
            env_vars={**self.env, **(env or {})},
            launcher=launcher,
        )

    def run(self, task: Any, executor: Any, plugins: list[Any], *, name: str) -> DockerRunResult:
        """Launch ``task`` on ``executor`` with ``plugins`` through a real ``run.Experiment``; block until the
        container ends (NeMo-Run waits for the job when the Experiment context exits)."""
        import nemo_run as run

        started = time.monotonic()
        # DockerExecutor.package runs `mkdir`/`tar` through invoke, which forwards this process's stdin to them;
        # under pytest's capture reading stdin raises. The commands read nothing: give them an empty stdin.
        with open(os.devnull) as devnull, _stdin(devnull):
            with run.Experiment(name, log_level="WARN") as exp:
                exp.add(task, executor=executor, plugins=plugins, name=name)
                exp.run(sequential=True, detach=False, tail_logs=False)
        job = exp.jobs[0]
        wall = time.monotonic() - started
        job_dir = job.executor.job_dir
        state = _state_name(job.state)
        wait_race = state not in TERMINAL
        if wait_race:
            state = _settled_state(job.handle)
        logs = sorted(glob.glob(os.path.join(job_dir, "log_*.out")))
        text = "\n".join(Path(p).read_text(errors="replace") for p in logs)
        return DockerRunResult(
            state=state,
            wall_s=wall,
            job_dir=job_dir,
            log=text,
            lines=text.splitlines(),
            exp_dir=str(Path(job_dir).parent),  # NeMo-Run puts each job's directory in the experiment's
            wait_race=wait_race,
        )


TERMINAL = frozenset({"SUCCEEDED", "FAILED", "CANCELLED"})
#: How long NeMo-Run may take to see a finished container's status file: Docker removes an exited auto-remove
#: container in well under a second on a quiet host (seconds on a loaded one); NeMo-Run's describe() reads the
#: file as soon as the container is gone. 120 s is far beyond both and still bounds a wait that would never end.
SETTLE_S = 120.0


def _state_name(state: Any) -> str:
    return getattr(state, "name", str(state))


def _settled_state(handle: str) -> str:
    """NeMo-Run's state of a job whose wait ended without one, asked again until it is terminal.

    The race (tools/job_outcome.py, docs/races.md): NeMo-Run's wait found the container ``exited`` and asked
    docker-py about it after Docker had auto-removed it: ``404 ... No such container``; NeMo-Run logs the
    exception and leaves the job ``SUBMITTED``. Once the container is gone, NeMo-Run's ``describe()`` reads the
    container's own ``status_<container>.out``; until then a status call can lose the same race (docker-py's
    ``NotFound``), so it is asked again, once a second, for at most :data:`SETTLE_S`, through a fresh NeMo-Run
    runner (the experiment's own was closed when its context ended).
    """
    from nemo_run.run.torchx_backend.runner import get_runner

    deadline = time.monotonic() + SETTLE_S
    state = "UNKNOWN"
    with get_runner() as runner:
        while time.monotonic() < deadline:
            try:
                status = runner.status(handle)
            except Exception:  # noqa: BLE001 - docker-py's NotFound: the same race, lost again
                status = None
            state = _state_name(status.state) if status is not None else state
            if state in TERMINAL:
                return state
            time.sleep(1.0)
    return state


@contextlib.contextmanager
def _stdin(stream: IO[str]) -> Iterator[None]:
    saved, sys.stdin = sys.stdin, stream
    try:
        yield
    finally:
        sys.stdin = saved


def _daemon_answers() -> bool:
    try:
        return subprocess.run([DOCKER, "info"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _ours_running() -> bool:
    """Whether the dockerd of ``.ci/docker-up``'s pid file is alive (the one ``.ci/docker-down`` would stop)."""
    try:
        pid = int((STATE_DIR / "run" / "dockerd.pid").read_text().strip())
        return Path(f"/proc/{pid}/comm").read_text().strip() == "dockerd"
    except (OSError, ValueError):
        return False


def _mounts() -> list[str]:
    """The interpreter's prefix, the environment (its real path: ``.venv`` may be a link) and the repository,
    read-only at their host paths. The environment's scripts (``ft_launcher``) name its python by path."""
    paths = {Path(sys.base_prefix).resolve(), Path(sys.prefix).resolve(), REPO_ROOT}
    if Path(sys.prefix).parent != Path(sys.prefix).resolve().parent:
        paths.add(Path(sys.prefix).parent)  # the directory holding the link, so that sys.prefix itself resolves
    # A path inside another one is already visible.
    keep = sorted(p for p in paths if not any(q != p and p.is_relative_to(q) for q in paths))
    return [f"{p}:{p}:ro" for p in keep]


@pytest.fixture(scope="session")
def local_docker():
    already_up = _daemon_answers()
    env = {**os.environ, "DOCKER_LOCAL_DIR": str(STATE_DIR), "NRP_DOCKER_IMAGE": IMAGE, "NRP_VENV": sys.prefix}
    try:
        p = subprocess.run([str(DOCKER_UP)], capture_output=True, text=True, timeout=900, env=env)
    except (OSError, subprocess.TimeoutExpired) as e:
        pytest.fail(f"local Docker: running {DOCKER_UP} failed: {e!r}", pytrace=False)
    out = (p.stdout + p.stderr).strip()
    if p.returncode != 0:
        pytest.fail(f"local Docker: {DOCKER_UP} exited {p.returncode}:\n{out}", pytrace=False)
    q = subprocess.run([DOCKER, "image", "inspect", "-f", "{{.Id}}", IMAGE], capture_output=True, text=True)
    if q.returncode != 0:
        pytest.fail(f"local Docker: {DOCKER_UP} succeeded but image {IMAGE} is missing:\n{q.stderr}", pytrace=False)
    docker = LocalDocker(
        image=q.stdout.strip(),
        mounts=_mounts(),
        env={
            "PATH": f"{sys.prefix}/bin:/usr/local/bin:/usr/bin:/bin",
            "PYTHONPATH": str(REPO_ROOT),
            "PYTHONUNBUFFERED": "1",
            "PYTHONDONTWRITEBYTECODE": "1",  # the code is mounted read-only
            "HOME": "/tmp",
            # NeMo-Run gives the container a hostname (its name) that nothing resolves on the host's network:
            # torch's and NVRx's rendezvous would advertise it and wait 300 s for a store they cannot reach, and
            # gloo would look it up. One node: everything talks over loopback.
            "PET_LOCAL_ADDR": "127.0.0.1",
            "GLOO_SOCKET_IFNAME": "lo",
        },
        started_here=not already_up and _ours_running(),
        up_output=out,
    )
    try:
        yield docker
    finally:
        if docker.started_here:
            d = subprocess.run([str(DOCKER_DOWN)], capture_output=True, text=True, timeout=300, env=env)
            if d.returncode != 0:
                raise RuntimeError(f"{DOCKER_DOWN} exited {d.returncode}:\n{d.stdout}{d.stderr}")
