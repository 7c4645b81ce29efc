"""Issue 48 item 5: NeMo 2's ``PerfEnvPlugin(user_buffer_registration=True)`` turns NVLink SHARP on
(``NCCL_NVLS_ENABLE=1``), which in-process restart needs off. Caught whatever the plugin order: at set-up when it
ran first, and in the job's final environment (the rank keeper, before the rank starts) when it ran after.

The NeMo 2 plugin is a reduction pinned by commit (tests/fixtures/upstream/nemo2/perf_env.py); the jobs are built
by a real NeMo-Run Experiment and packaged as NeMo-Run would launch them.
"""

from __future__ import annotations

import os
import subprocess
import sys

import nemo_run as run
import pytest

from nemo_resiliency_plugins import ResiliencyConfigError
from nemo_resiliency_plugins.inprocess_restart import NVLS_ENV, NVLS_SETTER, REQUIRED_ENV, InProcessRestartPlugin
from nemo_resiliency_plugins.job import rank_keeper
from tests.fixtures.upstream.nemo2.perf_env import PerfEnvPlugin
from tests.helpers import HANG_GUARD_S, add_job, launch_command

WORKLOAD = "nemo_resiliency_plugins.testing.workload"


def task() -> run.Script:
    return run.Script(path=WORKLOAD, m=True, entrypoint="python", args=["checkpoint.save=/tmp/ck"])


def three_ranks() -> run.LocalExecutor:
    return run.LocalExecutor(ntasks_per_node=3)


def reserve() -> InProcessRestartPlugin:
    return InProcessRestartPlugin(granularity="rank", active_world_size=2)


@pytest.mark.parametrize("plugin", [InProcessRestartPlugin(), reserve()], ids=["no-reserve", "reserve"])
def test_perf_env_first_is_refused_at_setup_naming_both_plugins(plugin):
    with pytest.raises(ResiliencyConfigError) as info:
        add_job(task(), three_ranks(), [PerfEnvPlugin(user_buffer_registration=True), plugin])
    text = str(info.value)
    assert text.startswith("InProcessRestartPlugin"), text
    assert "NCCL_NVLS_ENABLE='1'" in text and "PerfEnvPlugin(user_buffer_registration=True)" in text, text


def test_perf_env_first_is_refused_by_a_direct_setup_call_too():
    executor = three_ranks()
    PerfEnvPlugin(user_buffer_registration=True).setup(task(), executor)
    with pytest.raises(ResiliencyConfigError, match=r"NCCL_NVLS_ENABLE='1'.*PerfEnvPlugin"):
        InProcessRestartPlugin().setup(task(), executor)


def test_perf_env_after_ours_stops_the_job_at_start_with_one_line(tmp_path):
    """The later plugin overwrites the value silently; the job's final environment (what NeMo-Run launches)
    has NVLS on, and each rank's keeper stops before the training program starts."""
    job = add_job(task(), three_ranks(), [reserve(), PerfEnvPlugin(user_buffer_registration=True)])
    _, _, env = launch_command(job)
    assert env[NVLS_ENV] == "1"  # the overwrite happened: nothing at set-up could see it
    marker = tmp_path / "started"
    rank = env | {rank_keeper.CHAIN_ENV: "rank_keeper:path:x.py,task:path:never.py"}
    code = f"open({str(marker)!r}, 'w').close()"
    done = subprocess.run(
        [sys.executable, job.task.path, "-c", code],
        env=os.environ | rank,
        capture_output=True,
        text=True,
        timeout=HANG_GUARD_S,
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "InProcessRestartPlugin" in lines[0] and "NCCL_NVLS_ENABLE='1'" in lines[0], lines
    assert NVLS_SETTER in lines[0], lines
    assert not marker.exists()


def test_perf_env_without_user_buffers_leaves_nvls_off_in_either_order():
    for plugins in ([PerfEnvPlugin(), reserve()], [reserve(), PerfEnvPlugin()]):
        _, _, env = launch_command(add_job(task(), three_ranks(), plugins))
        assert env[NVLS_ENV] == "0" and env["TORCH_NCCL_HIGH_PRIORITY"] == "1"
        assert rank_keeper.nvls_problem(env) is None


def test_the_keeper_and_the_plugin_require_the_same_value():
    """The keeper is standard library only (shipped alone), so it states the value again; it must agree."""
    assert rank_keeper.NVLS_ENV == NVLS_ENV and REQUIRED_ENV[NVLS_ENV] == rank_keeper.NVLS_REQUIRED
    assert rank_keeper.nvls_problem({NVLS_ENV: "0"}) is None
    assert "unset" in rank_keeper.nvls_problem({})
    assert NVLS_SETTER in rank_keeper.nvls_problem({NVLS_ENV: "1"})


def test_without_a_reserve_the_overwrite_builds_and_doctor_names_it():
    """No program of this package runs in the rank without a reserve, so the job itself is not stopped (open, see
    docs/dropin.md); ``nemo-resiliency doctor`` on the built job judges it by the plugin's own rule and fails it."""
    from nemo_resiliency_plugins.tools.doctor import check_job

    plugins = [InProcessRestartPlugin(), PerfEnvPlugin(user_buffer_registration=True)]
    job = add_job(task(), three_ranks(), plugins)
    assert launch_command(job)[2][NVLS_ENV] == "1"
    found = {c.name: c for c in check_job(job.task, job.executor, plugins)}["in-process env vars"]
    assert found.verdict == "FAIL" and NVLS_ENV in found.detail, found
