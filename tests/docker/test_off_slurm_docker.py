"""Off Slurm on NeMo-Run's real DockerExecutor (issue 35): ``docker stop`` saves and a rerun resumes; a crash loop
ends with NVRx's no-restart exit and nothing restarts it.

FaultTolerancePlugin + PreemptionPlugin put this package's container entry (``job/container_entry.py``, shipped
by a read-only bind mount) in front of NeMo-Run's ``bash -c "... | tee ..."`` as the container's first process.
Nothing is mocked: dockerd runs the container, ``docker stop`` sends the SIGTERM, NVRx's ft_launcher passes it to
the torch + gloo ranks, Megatron Bridge's ``DistributedSignalHandler`` makes them save and exit.

* stop: a job stopped with ``docker stop`` while training saves at the signal (both ranks), the container exits 0;
  ``Experiment.reset()`` + ``run()`` of the same experiment (the executor, entry included, as NeMo-Run saved it)
  resumes from that checkpoint and ends with parameters bit-identical to a fault-free Docker job's.
* crash loop: rank 1 killed at step 7 in every cycle; NVRx's progress tracker stops after one cycle without a
  new checkpoint and ft_launcher exits 93: the container exits 93 (the entry passes the status through) and,
  with no restart policy (NeMo-Run auto-removes its containers), is not started again.

Container exit statuses come from dockerd itself (``wait`` with condition ``removed``, started before the
container can end: NeMo-Run's containers are auto-removed, so a later ``docker inspect`` would find nothing).
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
from tests.docker_fixture import DOCKER, _stdin
from tests.helpers import assert_same_params, final_params, workload_script

pytestmark = [pytest.mark.docker, pytest.mark.slow]

STEPS = 20  # the reference config's train.train_iters; checkpoint every 5 steps
CRASH_STEP = 7  # after the checkpoint of step 5: every later cycle resumes from 5 and dies at 7 (no progress)


def _plugins(**ft) -> list:
    settings = dict(
        num_in_job_restarts=3,
        num_job_retries_on_failure=0,
        section_timeouts={"setup": 120.0, "step": 10.0, "checkpointing": 60.0},
        out_of_section_timeout=60.0,
        workload_check_interval=1.0,
    )
    return [FaultTolerancePlugin(**(settings | ft)), PreemptionPlugin()]


class Launched:
    """A detached DockerExecutor job, its container and dockerd's answer to ``wait(condition='removed')``."""

    def __init__(self, local_docker, task, plugins, *, name: str, writable: list[Path]):
        import docker
        import nemo_run as run

        self.client = docker.from_env()
        executor = local_docker.executor(ntasks=2, writable=writable)
        with open(os.devnull) as devnull, _stdin(devnull):
            with run.Experiment(name, log_level="WARN") as exp:
                exp.add(task, executor=executor, plugins=plugins, name=name)
                exp.run(detach=True, tail_logs=False)
        self.exp_id = exp._id
        self.job_dir = exp.jobs[0].executor.job_dir
        self.container = self._find_container()
        self.status: dict = {}
        self._waiter = threading.Thread(target=self._wait_removed, daemon=True)
        self._waiter.start()

    def _find_container(self):
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            found = self.client.containers.list(all=True, filters={"label": f"nemo-run/experiment-id={self.exp_id}"})
            if found:
                return found[0]
            time.sleep(0.2)
        raise AssertionError(f"no container of experiment {self.exp_id} within 60 s")

    def _wait_removed(self) -> None:
        try:
            self.status = self.client.api.wait(self.container.id, condition="removed")
        except Exception as error:  # a container already gone before the wait started: recorded, asserted on
            self.status = {"error": repr(error)}

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

    def exit_code(self, timeout: float) -> int:
        self._waiter.join(timeout)
        assert not self._waiter.is_alive(), f"the container did not end within {timeout} s"
        assert "StatusCode" in self.status, self.status
        return int(self.status["StatusCode"])

    def status_file(self) -> str:
        (path,) = Path(self.job_dir).glob("status_*.out")
        return json.loads(path.read_text())["exit_code"]


def _lines(text: str, needle: str) -> list[str]:
    return [line for line in text.splitlines() if needle in line]


@pytest.fixture(scope="module")
def fault_free(local_docker, tmp_path_factory):
    save = tmp_path_factory.mktemp("offslurm-baseline")
    result = local_docker.run(
        workload_script(save, None, step_time="0", fault_step=0),
        local_docker.executor(ntasks=2, writable=[save]),
        _plugins(),
        name="offslurm-baseline",
    )
    assert result.state == "SUCCEEDED", result.log[-4000:]
    return save


def test_docker_stop_saves_exits_0_and_a_rerun_resumes_to_the_fault_free_parameters(
    local_docker, fault_free, tmp_path, record_property
):
    import nemo_run as run

    save = tmp_path / "ckpt"
    save.mkdir()
    t0 = time.monotonic()
    job = Launched(
        local_docker,
        workload_script(save, None, step_time="2", fault_step=0),  # 20 x 2 s: a stop lands mid-run under load
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

    job.wait_for("CHECKPOINT saved step=5", timeout=240)
    stopped = subprocess.run([DOCKER, "stop", job.container.id], capture_output=True, text=True, timeout=60)
    assert stopped.returncode == 0, stopped.stderr
    code = job.exit_code(timeout=60)
    log = job.log()
    record_property("docker_stop_wall_s", round(time.monotonic() - t0, 1))
    # docker stop's SIGTERM reached ft_launcher (through the entry), which passed it to both ranks: they saved.
    assert "Received Signals.SIGTERM death signal" in log or "SIGTERM" in log, log[-4000:]
    exits = _lines(log, "EXIT on signal step=")
    assert len(exits) == 2, log[-4000:]
    stop_step = int(exits[0].rsplit("=", 1)[1])
    assert 5 < stop_step < STEPS and f"CHECKPOINT saved step={stop_step}" in log, log[-4000:]
    assert code == 0 and job.status_file() == "0", (code, log[-4000:])
    assert (save / "latest_checkpointed_iteration.txt").read_text().strip() == str(stop_step)
    assert "FINISHED step=" not in log

    # A rerun of the same experiment (what brings a Docker job back): NeMo-Run rebuilds it from what it saved.
    with open(os.devnull) as devnull, _stdin(devnull):
        with run.Experiment.from_id(job.exp_id) as exp:
            exp.reset()
            exp.run(sequential=True, detach=False, tail_logs=False)
    rerun_log = "\n".join(
        Path(p).read_text(errors="replace") for p in glob.glob(f"{exp.jobs[0].executor.job_dir}/log_*.out")
    )
    record_property("docker_stop_and_rerun_wall_s", round(time.monotonic() - t0, 1))
    assert len(_lines(rerun_log, f"RESUMED from step {stop_step}")) == 2, rerun_log[-4000:]
    assert f"FINISHED step={STEPS}" in rerun_log, rerun_log[-4000:]
    assert_same_params(final_params(save), final_params(fault_free))


def test_crash_loop_ends_with_the_no_restart_exit_and_docker_does_not_restart_it(
    local_docker, tmp_path, record_property
):
    save = tmp_path / "ckpt"
    save.mkdir()
    task = workload_script(save, "kill", step_time="0.1", fault_step=CRASH_STEP)
    task.env["NRP_FAULT_REPEAT"] = "same"  # rank 1 dies at step 7 in every cycle
    t0 = time.monotonic()
    job = Launched(local_docker, task, _plugins(max_no_progress_cycles=1), name="offslurm-crash-loop", writable=[save])
    assert job.container.attrs["HostConfig"]["RestartPolicy"]["Name"] in ("", "no")
    code = job.exit_code(timeout=400)
    log = job.log()
    record_property("docker_crash_loop_wall_s", round(time.monotonic() - t0, 1))
    assert log.count(f"FAULT_INJECTED kind=kill step={CRASH_STEP} rank=1") == 2, log[-4000:]  # cycles 0 and 1
    assert "made NO progress" in log, log[-4000:]
    assert code == 93 and job.status_file() == "93", (code, log[-4000:])
    # Not started again: the experiment's only container is gone for good (auto-removed, no restart policy).
    time.sleep(2)
    left = job.client.containers.list(all=True, filters={"label": f"nemo-run/experiment-id={job.exp_id}"})
    assert left == [], left
