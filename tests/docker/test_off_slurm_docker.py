"""Off Slurm on NeMo-Run's real DockerExecutor (issue 35): ``docker stop`` saves and a rerun resumes; a crash loop
ends with NVRx's no-restart exit and nothing restarts it.

FaultTolerancePlugin + PreemptionPlugin put this package's container entry (``job/container_entry.py``, shipped
by a read-only bind mount) in front of NeMo-Run's ``bash -c "... | tee ..."`` as the container's first process.
Nothing is mocked: dockerd runs the container, ``docker stop`` sends the SIGTERM, NVRx's ft_launcher passes it to
the torch + gloo ranks, Megatron Bridge's ``DistributedSignalHandler`` makes them save and exit.

* stop: a job stopped with ``docker stop`` while training saves at the signal (both ranks), the container exits 0;
  ``Experiment.reset()`` + ``run()`` of the same experiment (the executor, entry included, as NeMo-Run saved it)
  resumes from that checkpoint and ends with the suite's fault-free parameters (``reference_run``).
* crash loop: rank 1 killed at step 7 in every cycle; NVRx's progress tracker stops after one cycle without a
  new checkpoint and ft_launcher exits 93: the container exits 93 (the entry passes the status through) and,
  with no restart policy (NeMo-Run auto-removes its containers), is not started again.

NeMo-Run cannot detach from a DockerExecutor job (it waits for the container), so each job runs in a thread while
the test watches its container. Container exit statuses come from dockerd itself (``wait`` with condition
``removed``, started while the container still runs: NeMo-Run's containers are auto-removed, so a later
``docker inspect`` would find nothing) and from the status file the container's own command line writes.
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import threading
import time
from pathlib import Path

import pytest

from nemo_resiliency_plugins import FaultTolerancePlugin, PreemptionPlugin
from nemo_resiliency_plugins.core.container_entry import ENTRY_FILE
from nemo_resiliency_plugins.tools.report import SIGNAL_EXITED, report_job
from tests.docker_fixture import DOCKER, _stdin
from tests.helpers import assert_ended_by_kill, assert_same_params, final_params, workload_script

pytestmark = [pytest.mark.docker, pytest.mark.slow]

STEPS = 20  # the reference config's train.train_iters; checkpoint every 5 steps
CRASH_STEP = 7  # after the checkpoint of step 5: every later cycle resumes from 5 and dies at 7 (no progress)
EXPERIMENT_LABEL = "nemo-run/experiment-id"  # NeMo-Run's label on each container it starts


def experiment_containers(client, name: str) -> list[dict]:
    """Every container of experiment ``name`` (NeMo-Run's experiment id is "<title>_<timestamp>"), as dockerd's
    list gives it (Id, State, Labels), in one call.

    Not docker-py's ``containers.list``: it lists the ids, then inspects each one, and an auto-removed container of
    another test's job (every NeMo-Run container has the label) can vanish in between: ``404 No such container``
    (seen in a loaded CI run)."""
    listed = client.api.containers(all=True, filters={"label": EXPERIMENT_LABEL})
    return [c for c in listed if (c.get("Labels") or {}).get(EXPERIMENT_LABEL, "").startswith(f"{name}_")]


def _plugins(**ft) -> list:
    settings = dict(
        num_in_job_restarts=3,
        num_job_retries_on_failure=0,
        section_timeouts={"setup": 120.0, "step": 10.0, "checkpointing": 60.0},
        out_of_section_timeout=60.0,
        workload_check_interval=1.0,
    )
    return [FaultTolerancePlugin(**(settings | ft)), PreemptionPlugin()]


class Running:
    """A DockerExecutor job that NeMo-Run runs (and waits for) in a thread, its container, and dockerd's answer
    to ``wait(condition='removed')`` for that container."""

    def __init__(self, local_docker, task, plugins, *, name: str, writable: list[Path]):
        import docker

        self.name = name
        self.client = docker.from_env()
        self.result = None
        self.error: BaseException | None = None
        executor = local_docker.executor(ntasks=2, writable=writable)

        def run() -> None:
            try:
                self.result = local_docker.run(task, executor, plugins, name=name)
            except BaseException as error:  # noqa: BLE001 - asserted on in the test's thread
                self.error = error

        self._runner = threading.Thread(target=run, daemon=True)
        self._runner.start()
        self.container = self._find_container()
        self.status: dict = {}
        self._waiter = threading.Thread(target=self._wait_removed, daemon=True)
        self._waiter.start()

    def _find_container(self):
        """The job's container once dockerd says it runs.

        docker-py's ``containers.run`` creates the container and then starts it: ``list(all=True)`` can return it
        in between, in state ``created``, where ``exec`` answers 409 "is not running" (seen in CI). So the wait is
        on dockerd's state, not on the container's existence."""
        import docker

        # The experiment's title is unique to this test.
        deadline = time.monotonic() + 120  # packaging + container start: seconds, more on a loaded host
        seen = None
        while time.monotonic() < deadline:
            for listed in experiment_containers(self.client, self.name):
                seen = listed["State"]
                if seen == "running":
                    try:
                        return self.client.containers.get(listed["Id"])
                    except docker.errors.NotFound:  # ended and auto-removed since the list: handled below
                        seen = "removed"
                if seen in ("exited", "dead", "removing", "removed"):
                    raise AssertionError(f"the container of {self.name} ended before it was seen running ({seen})")
            if not self._runner.is_alive():
                raise AssertionError(f"NeMo-Run's run ended before its container was seen running: {self.error!r}")
            time.sleep(0.2)
        raise AssertionError(f"no running container of experiment {self.name} within 120 s ({seen or 'never created'})")

    def _wait_removed(self) -> None:
        try:
            self.status = self.client.api.wait(self.container.id, condition="removed")
        except Exception as error:  # a container already gone before the wait started: recorded, asserted on
            self.status = {"error": repr(error)}

    @property
    def job_dir(self) -> str:
        (found,) = glob.glob(os.path.join(os.environ["NEMORUN_HOME"], "experiments", self.name, "*", self.name))
        return found

    def log(self) -> str:
        return "\n".join(Path(p).read_text(errors="replace") for p in sorted(glob.glob(f"{self.job_dir}/log_*.out")))

    def wait_for(self, needle: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if needle in self.log():
                return
            if not self._waiter.is_alive():
                raise AssertionError(f"the container ended before {needle!r}:\n{self.log()[-4000:]}")
            time.sleep(0.2)
        raise AssertionError(f"{needle!r} not in the job's log within {timeout} s:\n{self.log()[-4000:]}")

    def finish(self, timeout: float) -> tuple[int, str]:
        """(dockerd's exit status of the container, NeMo-Run's final state of the job) once both ended."""
        self._waiter.join(timeout)
        assert not self._waiter.is_alive(), f"the container did not end within {timeout} s"
        assert "StatusCode" in self.status, self.status
        self._runner.join(timeout)
        assert not self._runner.is_alive(), f"NeMo-Run's wait did not end within {timeout} s of the container's"
        assert self.error is None, repr(self.error)
        return int(self.status["StatusCode"]), self.result.state

    def status_file(self) -> str:
        (path,) = Path(self.job_dir).glob("status_*.out")
        return json.loads(path.read_text())["exit_code"]


def _lines(text: str, needle: str) -> list[str]:
    return [line for line in text.splitlines() if needle in line]


def test_docker_stop_saves_exits_0_and_a_rerun_resumes_to_the_fault_free_parameters(
    local_docker, reference_run, tmp_path, record_property
):
    import docker
    import nemo_run as run

    save = tmp_path / "ckpt"
    save.mkdir()
    t0 = time.monotonic()
    # 20 steps of 1 s: the stop lands mid-run even on a loaded host.
    job = Running(
        local_docker,
        workload_script(save, None, step_time="1", fault_step=0),
        _plugins(),
        name="offslurm-stop",
        writable=[save],
    )
    # The container's first process is the entry, Docker would restart nothing, and it is auto-removed.
    attrs = job.container.attrs
    assert attrs["Config"]["Entrypoint"][0] == "python3"
    assert attrs["Config"]["Entrypoint"][1].endswith(ENTRY_FILE), attrs["Config"]["Entrypoint"]
    assert attrs["HostConfig"]["RestartPolicy"]["Name"] in ("", "no") and attrs["HostConfig"]["AutoRemove"]
    pid1 = job.container.exec_run(["cat", "/proc/1/cmdline"]).output.decode().split("\0")
    assert pid1[:2] == attrs["Config"]["Entrypoint"], pid1

    job.wait_for("CHECKPOINT saved step=5", timeout=300)
    stopped = subprocess.run([DOCKER, "stop", job.container.id], capture_output=True, text=True, timeout=60)
    assert stopped.returncode == 0, stopped.stderr
    code, state = job.finish(timeout=120)
    log = job.log()
    record_property("docker_stop_wall_s", round(time.monotonic() - t0, 1))
    # docker stop's SIGTERM reached ft_launcher (through the entry), which passed it to both ranks: they saved.
    exits = _lines(log, "EXIT on signal step=")
    assert len(exits) == 2, log[-4000:]
    stop_step = int(exits[0].rsplit("=", 1)[1])
    assert 5 < stop_step < STEPS and f"CHECKPOINT saved step={stop_step}" in log, log[-4000:]
    assert (code, job.status_file(), state) == (0, "0", "SUCCEEDED"), log[-4000:]
    assert (save / "latest_checkpointed_iteration.txt").read_text().strip() == str(stop_step)
    assert "FINISHED step=" not in log
    # `nemo-resiliency report` (issue 36) on the container's log: one cycle, ended by the signal after its save.
    (stopped,) = report_job(job.job_dir).rows
    assert (stopped.detected_by, stopped.checkpoints[-1], stopped.finished_step) == (SIGNAL_EXITED, stop_step, None)
    assert stopped.injected == [], stopped  # the stop came from outside (docker stop), no fault of the workload's

    # A rerun of the same experiment (what brings a Docker job back): NeMo-Run rebuilds it from what it saved. NeMo-Run
    # 0.11.1's Docker scheduler appended the job directory's /nemo_run mount to the executor it saved, and appends
    # it again on the rerun: Docker refuses the container. docs/off-slurm.md gives the workaround tried next.
    (exp_dir,) = glob.glob(os.path.join(os.environ["NEMORUN_HOME"], "experiments", "offslurm-stop", "*"))
    exp_id = Path(exp_dir).name
    with open(os.devnull) as devnull, _stdin(devnull):
        with pytest.raises(docker.errors.APIError, match="Duplicate mount point: /nemo_run"):
            with run.Experiment.from_id(exp_id) as exp:
                exp.reset()
                exp.run(sequential=True, detach=False, tail_logs=False)
        with run.Experiment.from_id(exp_id) as exp:
            for saved in exp.jobs:  # the workaround: drop the stale mount; NeMo-Run adds the new job's
                saved.executor.volumes = [v for v in saved.executor.volumes if not v.endswith(":/nemo_run")]
            exp.reset()
            exp.run(sequential=True, detach=False, tail_logs=False)
    rerun_log = "\n".join(
        Path(p).read_text(errors="replace") for p in glob.glob(f"{exp.jobs[0].executor.job_dir}/log_*.out")
    )
    record_property("docker_stop_and_rerun_wall_s", round(time.monotonic() - t0, 1))
    assert len(_lines(rerun_log, f"RESUMED from step {stop_step}")) == 2, rerun_log[-4000:]
    assert f"FINISHED step={STEPS}" in rerun_log, rerun_log[-4000:]
    (resumed,) = report_job(exp.jobs[0].executor.job_dir).rows
    assert (resumed.resumed_from, resumed.finished_step, resumed.detected_by) == (stop_step, STEPS, None)
    assert_same_params(final_params(save), final_params(reference_run[0]))


def test_crash_loop_ends_with_the_no_restart_exit_and_docker_does_not_restart_it(
    local_docker, tmp_path, record_property
):
    save = tmp_path / "ckpt"
    save.mkdir()
    task = workload_script(save, "kill", step_time="0.05", fault_step=CRASH_STEP)
    task.env["NRP_FAULT_REPEAT"] = "same"  # rank 1 dies at step 7 in every cycle
    t0 = time.monotonic()
    job = Running(local_docker, task, _plugins(max_no_progress_cycles=1), name="offslurm-crash-loop", writable=[save])
    assert job.container.attrs["HostConfig"]["RestartPolicy"]["Name"] in ("", "no")
    code, state = job.finish(timeout=400)
    log = job.log()
    record_property("docker_crash_loop_wall_s", round(time.monotonic() - t0, 1))
    assert log.count(f"FAULT_INJECTED kind=kill step={CRASH_STEP} rank=1") == 2, log[-4000:]  # cycles 0 and 1
    assert "made NO progress" in log, log[-4000:]
    assert (code, job.status_file(), state) == (93, "93", "FAILED"), log[-4000:]
    report = report_job(job.job_dir)  # issue 36: both cycles ended by the same kill, the second without progress
    assert (report.requeues, report.restarts, report.finished) == (0, 1, False)
    for row in report.rows:
        assert row.injected == [f"kill at step {CRASH_STEP} on rank 1"]
        assert_ended_by_kill(row, rank=1)
    assert report.rows[0].checkpoints == [5], report.rows
    assert (report.rows[1].resumed_from, report.rows[1].checkpoints) == (5, [])
    # Not started again: dockerd removed the container (the wait above ended with its removal) and no container of
    # the experiment exists (auto-removed, no restart policy: nothing would create one).
    left = experiment_containers(job.client, "offslurm-crash-loop")
    assert left == [], left
