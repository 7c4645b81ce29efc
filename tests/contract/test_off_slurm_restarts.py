"""Off Slurm (issue 35), dry runs through NeMo-Run 0.11.1: where job retries are refused and why, and what the
container entry does to a DockerExecutor job (the real Docker proof is tests/docker/test_off_slurm_docker.py).
SkyPilot and Kubeflow, which need the overlay environment, are in test_off_slurm_sky_kubeflow.py."""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

import pytest

from nemo_resiliency_plugins import FaultTolerancePlugin, PreemptionPlugin, ResiliencyConfigError
from nemo_resiliency_plugins.core.container_entry import ENTRY_FILE, entry_source
from nemo_resiliency_plugins.core.executors import for_executor
from nemo_resiliency_plugins.preemption import PreemptionSignalWarning
from tests.contract.executor_jobs import render
from tests.contract.test_executors_ft import dgxcloud, docker, lepton
from tests.helpers import logged


def _entry(job) -> tuple[list[str], str]:
    """The container entrypoint NeMo-Run will hand docker-py, and the host file behind its bind mount."""
    entrypoint = job.executor.additional_kwargs["entrypoint"]
    (volume,) = [v for v in job.executor.volumes if v.split(":")[1] == entrypoint[-1]]
    host, inside, mode = volume.split(":")
    assert mode == "ro" and inside.startswith("/nemo_resiliency/") and inside.endswith(ENTRY_FILE)
    return entrypoint, host


def test_preemption_on_docker_makes_the_entry_the_containers_first_process(tmp_path):
    job = render(docker(), [FaultTolerancePlugin(num_job_retries_on_failure=0), PreemptionPlugin()])
    entrypoint, host = _entry(job)
    assert entrypoint[0] == "python3" and len(entrypoint) == 2
    assert Path(host).read_text() == entry_source()
    # NeMo-Run's own command (bash -c "... | tee ...") is unchanged: it becomes the entry's arguments.
    assert job.request.containers[0].command[0] == "ft_launcher"
    assert job.executor.retries == 0  # no restart policy: Docker would refuse the auto-removed container


def test_a_users_own_entrypoint_runs_first_and_execs_the_entry():
    nvidia = ["/opt/nvidia/nvidia_entrypoint.sh"]
    job = render(docker(additional_kwargs={"entrypoint": nvidia}), [PreemptionPlugin()])
    entrypoint, _ = _entry(job)
    assert entrypoint[:1] == nvidia and entrypoint[1] == "python3" and len(entrypoint) == 3


@pytest.mark.parametrize(
    "plugins", [[FaultTolerancePlugin(num_job_retries_on_failure=0)], [PreemptionPlugin(enable_exit_handler=False)]]
)
def test_no_entry_without_a_save_on_the_signal(plugins):
    job = render(docker(), plugins)
    assert "entrypoint" not in job.executor.additional_kwargs
    assert not any("/nemo_resiliency/" in v for v in job.executor.volumes)


@pytest.mark.parametrize(("make", "label"), [(dgxcloud, "DGXCloudExecutor"), (lepton, "LeptonExecutor")])
def test_container_executors_without_a_route_still_say_the_signal_is_lost(make, label):
    with pytest.warns(PreemptionSignalWarning, match=rf"{label}.*no route yet.*pkill -TERM -f ft_launcher"):
        render(make(), [PreemptionPlugin()])


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (docker, r"restart policy next to auto-remove"),
        (dgxcloud, r"only exports TORCHX_MAX_RETRIES"),
        (lepton, r"max_failure_retry=None and max_job_failure_retry=None"),
    ],
    ids=["docker", "dgxcloud", "lepton"],
)
def test_job_retries_off_slurm_are_refused_with_the_platforms_reason(make, reason):
    with pytest.raises(ResiliencyConfigError, match=rf"num_job_retries_on_failure.*{reason}"):
        render(make(), [FaultTolerancePlugin(num_job_retries_on_failure=3)])
    # Megatron Bridge's default (2) is not an error (drop-in), but never silent: a warning with the reason.
    with logged("nemo_resiliency_plugins.core.executor_config") as log:
        job = render(make(), [FaultTolerancePlugin()])
    (record,) = [r for r in log.records if "num_job_retries_on_failure=2 not applied" in r.getMessage()]
    assert record.levelno == logging.WARNING and re.search(reason, record.getMessage())
    assert job.executor.retries == 0
    assert not for_executor(job.executor).honours_retries and for_executor(job.executor).job_restarts


def test_the_entry_is_written_once_per_content(tmp_path):
    first = _entry(render(docker(), [PreemptionPlugin()]))[1]
    second = _entry(render(docker(), [PreemptionPlugin()]))[1]
    assert first == second and os.path.isfile(first)
