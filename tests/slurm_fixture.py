"""pytest fixture for the local one-node Slurm cluster of ``.ci/slurm-up`` / ``.ci/slurm-down``.

Use it from a conftest (``from tests.slurm_fixture import local_slurm  # noqa: F401``) and mark the
tests ``@pytest.mark.slurm``. The session-scoped fixture ``local_slurm``:

* runs ``.ci/slurm-up`` (idempotent; installs the packages if missing, needs root). If the cluster
  cannot be brought up the test **fails** with the script's output -- it is never skipped;
* stops the cluster at the end of the session only if this session started it (when CI's ``.ci/run``
  or a developer started it beforehand, it is left running);
* yields a :class:`LocalSlurm` with ``partition`` and ``run_sbatch(script_text, timeout)``.

Job state: jobs are followed with ``scontrol show job -o`` (the record lives ``MinJobAge`` = 600 s after
the job ends); if the record is already gone, the last line for the job in the jobcomp file
(``JobCompType=jobcomp/filetxt``, ``$SLURM_LOCAL_DIR/log/jobcomp.txt``) gives the final state.
If ``sacct`` works (slurm-up brings up slurmdbd; a cluster without it answers "Slurm accounting storage
is disabled"), it is used as a further fallback.

Which source carries which field (a test asserts a field only from a source that carries it):

* ``Restarts`` (how often the job was requeued): the live record has it; the jobcomp file has no such field but
  one line per run that ended (a requeued run's line says ``JobState=PENDING``), so the count of the job's lines
  less one is its requeue count; ``sacct -D`` has one row per run. :attr:`JobResult.restarts` is the largest of
  what the live record showed while it was followed and what the final source says: never a missing field read
  as 0 (a loaded CI run read ``restarts=0`` from a jobcomp line of a job requeued once).
* ``ExcNodeList``, ``Reason``, ``BeginTime``: the live record only. :meth:`LocalSlurm.wait` asserts on them only
  while the record is live; a test that reads them from ``JobResult.record`` checks ``source == "scontrol"``.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
SLURM_UP = REPO_ROOT / ".ci" / "slurm-up"
SLURM_DOWN = REPO_ROOT / ".ci" / "slurm-down"
STATE_DIR = Path(os.environ.get("SLURM_LOCAL_DIR", "/tmp/nrp-slurm"))

#: States after which a job record does not change any more (unless someone requeues it).
TERMINAL_STATES = frozenset(
    {
        "COMPLETED",
        "FAILED",
        "CANCELLED",
        "TIMEOUT",
        "NODE_FAIL",
        "PREEMPTED",
        "OUT_OF_MEMORY",
        "BOOT_FAIL",
        "DEADLINE",
    }
)

#: seconds between seeing a requeued job's BeginTime hold and lifting it (see LocalSlurm.wait)
REQUEUE_RELEASE_DELAY = 2.0

_KV = re.compile(r"(\w+)=(\S*)")


def _sh(cmd: list[str], timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def _exit_code(raw: str) -> int | None:
    """Slurm's ``ExitCode=rc:signal`` -> rc, or 128+signal when the job was killed by a signal."""
    m = re.fullmatch(r"(\d+):(\d+)", raw or "")
    if not m:
        return None
    rc, sig = int(m.group(1)), int(m.group(2))
    return 128 + sig if sig else rc


@dataclass
class JobResult:
    """Outcome of a batch job. Unpacks as ``job_id, state, exit_code, stdout_text``."""

    job_id: str
    state: str
    exit_code: int | None
    stdout_text: str
    #: requeues of the job, from the sources that carry them (module docstring), never a missing field read as 0
    restarts: int = 0
    #: the last raw record (``scontrol show job`` / jobcomp / sacct fields)
    record: dict[str, str] = field(default_factory=dict)
    #: where the final state came from: "scontrol", "jobcomp" or "sacct"
    source: str = ""
    output_path: Path | None = None

    def __iter__(self):
        return iter((self.job_id, self.state, self.exit_code, self.stdout_text))


class SlurmJobTimeout(AssertionError):
    pass


@dataclass
class LocalSlurm:
    partition: str
    state_dir: Path
    jobs_dir: Path
    started_here: bool
    #: whether ``sacct`` works on this cluster (False without slurmdbd)
    accounting: bool
    up_output: str = ""

    # -- submission --------------------------------------------------------------------------------
    def sbatch(self, script_text: str, args: Sequence[str] = (), name: str | None = None) -> tuple[str, Path]:
        """Submit ``script_text`` with ``sbatch --parsable``; returns ``(job_id, output_path)``.

        The job runs in its own directory under ``jobs_dir``; stdout and stderr go to one output file,
        opened in append mode so a requeued job's runs are all kept. ``args`` go to sbatch before the
        script (they override ``#SBATCH`` lines).
        """
        if not script_text.startswith("#!"):
            script_text = "#!/bin/bash\n" + script_text
        tag = name or f"job-{uuid.uuid4().hex[:8]}"
        d = self.jobs_dir / tag
        d.mkdir(parents=True, exist_ok=True)
        script = d / "job.sh"
        script.write_text(script_text)
        out = d / "slurm-%j.out"
        cmd = [
            "sbatch",
            "--parsable",
            f"--partition={self.partition}",
            f"--job-name={tag}",
            f"--chdir={d}",
            f"--output={out}",
            "--open-mode=append",
            *args,
            str(script),
        ]
        p = _sh(cmd)
        if p.returncode != 0:
            raise AssertionError(f"sbatch failed (rc {p.returncode}): {' '.join(cmd)}\n{p.stdout}{p.stderr}")
        job_id = p.stdout.strip().split(";")[0]
        return job_id, Path(str(out).replace("%j", job_id))

    # -- state -------------------------------------------------------------------------------------
    def job_record(self, job_id: str) -> tuple[dict[str, str], str]:
        """Current record of a job and where it came from; ``({}, "")`` if nothing knows the job."""
        try:
            p = _sh(["scontrol", "show", "job", "-o", job_id])
        except subprocess.TimeoutExpired:
            return {}, ""  # a controller too busy to answer in 30 s: ask again at the next poll
        if p.returncode == 0 and "JobState=" in p.stdout:
            return dict(_KV.findall(p.stdout.splitlines()[0])), "scontrol"
        if "Invalid job id" not in p.stderr:
            # The controller did not answer (busy: "Socket timed out on send/recv"), it did not say the record is
            # gone. The completion log must not answer for it then: a requeued job's earlier attempt has a line
            # there too, and that line would end the wait on a state the job has left.
            return {}, ""
        # Record purged (MinJobAge) or controller restarted: fall back to the completion log. Its lines carry no
        # Restarts field; one line per run that ended does (module docstring), so the count is put in the record.
        runs = self._jobcomp_records(job_id)
        if runs:
            return {**runs[-1], "Restarts": str(len(runs) - 1)}, "jobcomp"
        if self.accounting:
            # -D: one row per run of the job (a requeued run's row says REQUEUED), so the rows give Restarts too.
            p = _sh(["sacct", "-n", "-X", "-D", "-P", "-j", job_id, "-o", "JobID,State,ExitCode"])
            rows = [ln.split("|") for ln in p.stdout.splitlines() if ln.split("|")[0] == job_id]
            if p.returncode == 0 and rows:
                _, st, ec = rows[-1]
                return {"JobState": st.split()[0], "ExitCode": ec, "Restarts": str(len(rows) - 1)}, "sacct"
        return {}, ""

    def _jobcomp_records(self, job_id: str) -> list[dict[str, str]]:
        """The job's jobcomp lines, oldest first: one per run that ended (slurm-up empties the file when it clears
        the controller's state, so a job id is never another cluster's)."""
        path = self.state_dir / "log" / "jobcomp.txt"
        try:
            lines = path.read_text().splitlines()
        except OSError:
            return []
        return [dict(_KV.findall(line)) for line in lines if line.startswith(f"JobId={job_id} ")]

    def wait(
        self,
        job_id: str,
        timeout: float,
        *,
        release_requeue_hold: bool = True,
        output_path: Path | None = None,
        poll: float = 0.5,
    ) -> JobResult:
        """Poll until the job reaches a terminal state; raise :class:`SlurmJobTimeout` after ``timeout`` s.

        ``release_requeue_hold``: Slurm keeps a requeued batch job PENDING (Reason=BeginTime) for 120 s
        before it may start again; with this flag the hold is lifted (``scontrol update StartTime=now``)
        ~2 s after it is seen, so requeue tests take seconds instead of minutes.
        """
        deadline = time.monotonic() + timeout
        released: set[str] = set()
        hold_seen: dict[str, float] = {}
        rec: dict[str, str] = {}
        src = ""
        most_restarts = 0  # the largest Restarts seen: a source read later must not lower it (module docstring)
        while True:
            rec, src = self.job_record(job_id)
            state = rec.get("JobState", "")
            most_restarts = max(most_restarts, int(rec.get("Restarts", "0") or 0))
            if state in TERMINAL_STATES:
                break
            restarts = rec.get("Restarts", "0")
            if (
                release_requeue_hold
                and state == "PENDING"
                and rec.get("Reason") == "BeginTime"
                and restarts != "0"
                and restarts not in released
            ):
                # Not at once: slurmd rejects a launch whose credential is from the same second as the
                # previous run's revocation ("Killing non-startable batch job: Job credential revoked",
                # the job ends FAILED). 2 s after the requeue is safe.
                first = hold_seen.setdefault(restarts, time.monotonic())
                if time.monotonic() - first >= REQUEUE_RELEASE_DELAY:
                    _sh(["scontrol", "update", f"jobid={job_id}", "StartTime=now"])
                    released.add(restarts)
            if time.monotonic() > deadline:
                text = output_path.read_text() if output_path and output_path.exists() else ""
                _sh(["scancel", job_id])
                raise SlurmJobTimeout(
                    f"job {job_id} not finished after {timeout:.0f} s (last state {state or '?'} from "
                    f"{src or 'nothing'}: {rec}); cancelled it. Output so far:\n{text}"
                )
            time.sleep(poll)
        text = ""
        if output_path is not None:
            # The batch output is written by slurmstepd; it is complete once the job is terminal.
            text = output_path.read_text() if output_path.exists() else ""
        return JobResult(
            job_id=job_id,
            state=state,
            exit_code=_exit_code(rec.get("ExitCode", "")),
            stdout_text=text,
            restarts=most_restarts,
            record=rec,
            source=src,
            output_path=output_path,
        )

    def run_sbatch(
        self, script_text: str, timeout: float = 120, args: Sequence[str] = (), release_requeue_hold: bool = True
    ) -> JobResult:
        """Submit, wait for a terminal state, return ``(job_id, state, exit_code, stdout_text)``."""
        job_id, out = self.sbatch(script_text, args)
        return self.wait(job_id, timeout, release_requeue_hold=release_requeue_hold, output_path=out)


def _controller_up() -> bool:
    pidfile = STATE_DIR / "run" / "slurmctld.pid"
    try:
        pid = int(pidfile.read_text().strip())
        if Path(f"/proc/{pid}/comm").read_text().strip() != "slurmctld":
            return False
    except (OSError, ValueError):
        return False
    try:
        return _sh(["scontrol", "ping"], timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _probe_accounting() -> bool:
    try:
        p = _sh(["sacct", "-n", "-X", "-j", "1"], timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return p.returncode == 0 and "disabled" not in (p.stderr + p.stdout)


@pytest.fixture(scope="session")
def local_slurm(tmp_path_factory: pytest.TempPathFactory):
    already_up = _controller_up()
    env = {**os.environ, "SLURM_LOCAL_DIR": str(STATE_DIR)}
    try:
        p = subprocess.run([str(SLURM_UP)], capture_output=True, text=True, timeout=600, env=env)
    except (OSError, subprocess.TimeoutExpired) as e:
        pytest.fail(f"local Slurm: running {SLURM_UP} failed: {e!r}", pytrace=False)
    out = (p.stdout + p.stderr).strip()
    if p.returncode != 0:
        pytest.fail(f"local Slurm: {SLURM_UP} exited {p.returncode}:\n{out}", pytrace=False)
    slurm = LocalSlurm(
        partition="debug",
        state_dir=STATE_DIR,
        jobs_dir=tmp_path_factory.mktemp("slurm-jobs"),
        started_here=not already_up,
        accounting=_probe_accounting(),
        up_output=out,
    )
    try:
        yield slurm
    finally:
        if slurm.started_here:
            d = subprocess.run([str(SLURM_DOWN)], capture_output=True, text=True, timeout=300, env=env)
            if d.returncode != 0:
                raise RuntimeError(f"{SLURM_DOWN} exited {d.returncode}:\n{d.stdout}{d.stderr}")
