"""Off Slurm (issue 35), dry runs through NeMo-Run 0.11.1: where job retries are refused and why, and what the
container entry does to a DockerExecutor, DGXCloudExecutor and LeptonExecutor job (the real Docker proof is
tests/docker/test_off_slurm_docker.py; the entry as each platform's first process, signalled in a real container:
tests/docker/test_container_entry_routes.py).
SkyPilot and Kubeflow, which need the overlay environment, are in test_off_slurm_sky_kubeflow.py."""

from __future__ import annotations

import base64
import logging
import os
import re
import shlex
import warnings
from pathlib import Path

import pytest

from nemo_resiliency_plugins import FaultTolerancePlugin, PreemptionPlugin, ResiliencyConfigError
from nemo_resiliency_plugins.core.container_entry import ENTRY_FILE, INTERPRETER, entry_source
from nemo_resiliency_plugins.core.entry_command import BOOTSTRAP, ENTRY_ACTIVE_ENV
from nemo_resiliency_plugins.core.executors import for_executor
from nemo_resiliency_plugins.preemption import PreemptionSignalWarning
from tests.contract.executor_jobs import render
from tests.contract.test_executors_ft import dgxcloud, docker, lepton
from tests.helpers import logged
from tests.runai_standin import runai_standin


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


def _quiet_render(make, plugins, **kw):
    """Render with PreemptionSignalWarning as an error: with a route, the signal is never reported lost."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", PreemptionSignalWarning)
        return render(make(**kw), plugins)


def _entry_words(words: list[str]) -> list[str]:
    """The launch command after ``python3 -c BOOTSTRAP <entry>``, checking the entry is this package's."""
    assert words[:3] == [INTERPRETER, "-c", BOOTSTRAP], words[:3]
    assert base64.b64decode(words[3]).decode() == entry_source()
    return words[4:]


def test_preemption_on_dgx_cloud_makes_the_entry_the_workloads_command():
    """NeMo-Run's own launch() against a stand-in of the Run:ai API (tests/runai_standin.py): the workload it
    posts runs ``sh -c '<exec the entry> /bin/bash <pvc_job_dir>/launch_script.sh'``, the form of NeMo-Run's own
    data mover, and the launch script it wrote on the way is the one the entry starts."""
    plugins = [FaultTolerancePlugin(num_job_retries_on_failure=0), PreemptionPlugin()]
    job = _quiet_render(dgxcloud, plugins)
    executor = job.executor
    with runai_standin() as (url, posted):
        executor.base_url, executor.launched_from_cluster = url, True  # no data mover: nothing to copy to
        executor.launch("train", ["ft_launcher", "--nnodes=2", "train.py"])
    ((workload,),) = [posted]
    spec = workload["body"]["spec"]
    assert spec["command"] == "sh -c"
    (script,) = shlex.split(spec["args"])  # one single-quoted word, as the data mover's args
    words = shlex.split(script)
    assert words[0] == "exec"
    launch = f"{executor.pvc_job_dir}/launch_script.sh"
    assert _entry_words(words[1:]) == ["/bin/bash", launch]
    assert (Path(executor.job_dir) / "launch_script.sh").is_file()  # NeMo-Run wrote the script the entry starts
    # Listed twice, the plugins leave one command; a command of the user's own is refused, not overwritten.
    twice = render(dgxcloud(), [*plugins, PreemptionPlugin()]).executor
    ours = job.executor.custom_spec["args"]
    assert twice.custom_spec["args"] == ours.replace(executor.pvc_job_dir, twice.pvc_job_dir)
    with pytest.raises(ResiliencyConfigError, match=r"custom_spec\['command'\] = 'python train.py'.*replaces"):
        render(dgxcloud(custom_spec={"command": "python train.py"}), plugins)
    # The launch script's path goes into a shell line as one word: a directory bash would split is refused.
    with pytest.raises(ResiliencyConfigError, match=r"executor\.pvc_job_dir = .*nemo run.*shell line"):
        spaced = dgxcloud()
        spaced.pvc_nemo_run_dir = "/pvc/nemo run"
        render(spaced, [PreemptionPlugin()])


def test_preemption_on_lepton_puts_the_entry_first_in_the_launch_script(tmp_path):
    """The first pre-launch command of NeMo-Run's launch_script.sh (written by the real LeptonExecutor.launch,
    which then stops at copying data to Lepton: there is none here) replaces the script's bash with the entry,
    which runs the same script again; the user's own pre-launch commands follow it."""
    job = _quiet_render(lepton, [PreemptionPlugin()], pre_launch_commands=["echo users-own"])
    executor = job.executor
    with pytest.raises(Exception):  # noqa: B017,PT011 - whatever the Lepton client raises without a workspace
        executor.launch("train", ["ft_launcher", "train.py"])
    lines = (Path(executor.job_dir) / "launch_script.sh").read_text().strip().splitlines()
    guard, users = lines[0], lines[1]
    assert users == "echo users-own"
    test, _, command = guard.partition(" || ")
    assert test == f'[ -n "${{{ENTRY_ACTIVE_ENV}:-}}" ]'
    words = shlex.split(command)
    assert words[:2] == [f"{ENTRY_ACTIVE_ENV}=1", "exec"]
    assert _entry_words(words[2:]) == ["/bin/bash", "$0"]
    assert render(lepton(), [PreemptionPlugin(), PreemptionPlugin()]).executor.pre_launch_commands == [guard]


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
