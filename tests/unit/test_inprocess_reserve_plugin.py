"""InProcessRestartPlugin with a warm reserve (``active_world_size`` below the executor's ranks): what setup()
does to real NeMo-Run tasks and executors (dry runs through ``Experiment.add`` and NeMo-Run's packaging), and the
rank keeper's exit rules with real processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import nemo_run as run
import pytest
from nemo_run.core.execution.launcher import FaultTolerance

from nemo_resiliency_plugins import FaultTolerancePlugin, ResiliencyConfigError
from nemo_resiliency_plugins.core.front_program import keeper_source
from nemo_resiliency_plugins.inprocess_restart import InProcessRestartPlugin
from nemo_resiliency_plugins.job.rank_keeper import CHAIN_ENV, KEEPER_MODULE, MODULE_ENV, SCRIPT_ENV
from tests.helpers import HANG_GUARD_S, TRAIN, add_job, launch_command

WORKLOAD = "nemo_resiliency_plugins.testing.workload"
#: What InProcessRestartPlugin sets on every job it runs the keeper in (the keeper stops a rank without it).
NVLS_OFF = {"NCCL_NVLS_ENABLE": "0"}


def module_task(*args, env=None):
    return run.Script(path=WORKLOAD, m=True, entrypoint="python", args=list(args), env=dict(env or {}))


def three_ranks(**kw):
    return run.LocalExecutor(ntasks_per_node=3, **kw)


def reserve(**kw) -> InProcessRestartPlugin:
    return InProcessRestartPlugin(**({"granularity": "rank", "active_world_size": 2} | kw))


def kept(job) -> bool:
    """The task runs the rank keeper as the file LocalExecutor ships (issue 29: nothing of this package needed in
    the job), with the keeper's exact text."""
    path = Path(job.task.path)
    return not job.task.m and path.name.endswith("-rank_keeper.py") and path.read_text() == keeper_source()


def test_a_reserve_runs_each_rank_under_the_keeper_with_the_task_arguments_untouched():
    job = add_job(module_task("checkpoint.save=/tmp/ck"), three_ranks(), [reserve()])
    assert kept(job)
    assert job.executor.env_vars[CHAIN_ENV] == f"rank_keeper:path:{job.task.path},task:module:{WORKLOAD}"
    assert job.task.args[0] == "checkpoint.save=/tmp/ck"
    assert "++inprocess_restart.active_world_size=2" in job.task.args
    assert "++inprocess_restart.granularity=rank" in job.task.args
    entrypoint, args, env = launch_command(job)
    assert entrypoint == "torchrun"
    assert args[args.index("--nproc-per-node") + 1] == "3"
    assert job.task.path in args and KEEPER_MODULE not in args
    assert env[CHAIN_ENV] == f"rank_keeper:path:{job.task.path},task:module:{WORKLOAD}"


def test_a_script_file_is_named_by_path():
    job = add_job(run.Script(path=TRAIN, entrypoint="python"), three_ranks(), [reserve()])
    assert job.executor.env_vars[CHAIN_ENV].endswith(f",task:path:{TRAIN}") and kept(job)


@pytest.mark.parametrize("active", [None, 3])
def test_without_a_reserve_the_task_is_left_alone(active):
    job = add_job(module_task(), three_ranks(), [InProcessRestartPlugin(granularity="rank", active_world_size=active)])
    assert job.task.path == WORKLOAD
    assert CHAIN_ENV not in job.executor.env_vars


def test_node_granularity_needs_whole_spare_nodes():
    with pytest.raises(ResiliencyConfigError, match="granularity.*'rank' for a reserve on a single node"):
        add_job(module_task(), three_ranks(), [reserve(granularity="node")])
    with pytest.raises(ResiliencyConfigError, match="a multiple of the 2 tasks per node"):
        add_job(
            module_task(),
            run.LocalExecutor(nodes=3, ntasks_per_node=2),
            [reserve(granularity="node", active_world_size=3)],
        )
    job = add_job(
        module_task(), run.LocalExecutor(nodes=3, ntasks_per_node=2), [reserve(granularity="node", active_world_size=4)]
    )
    assert kept(job)


def test_the_reserve_counts_nodes_times_tasks_per_node():
    with pytest.raises(ResiliencyConfigError, match=r"at most the 6 ranks .*3 node\(s\) x 2 tasks per node"):
        add_job(module_task(), run.LocalExecutor(nodes=3, ntasks_per_node=2), [reserve(active_world_size=7)])


def test_tasks_the_keeper_cannot_wrap_are_refused():
    from nemo_resiliency_plugins.testing.te_compat import ensure_megatron_bridge_importable

    ensure_megatron_bridge_importable()
    from nemo_resiliency_plugins.testing import workload

    partial = run.Partial(workload.pretrain, config=workload.reference_config_buildable("/tmp/nrp-ck"))
    with pytest.raises(ResiliencyConfigError, match="fdl_runner"):
        add_job(partial, three_ranks(), [reserve()])
    with pytest.raises(ResiliencyConfigError, match="inline"):
        add_job(run.Script(inline="python train.py"), three_ranks(), [reserve()])
    with pytest.raises(ResiliencyConfigError, match="task.entrypoint"):
        add_job(run.Script(path="train.sh"), three_ranks(), [reserve()])
    with pytest.raises(ResiliencyConfigError, match="task.path"):
        add_job(run.Script(path="train;rm -rf x.py", entrypoint="python"), three_ranks(), [reserve()])


def test_a_users_keeper_target_is_never_overwritten_nor_ignored():
    with pytest.raises(ResiliencyConfigError, match=MODULE_ENV):
        add_job(module_task(), three_ranks(env_vars={MODULE_ENV: "other.module"}), [reserve()])
    with pytest.raises(ResiliencyConfigError, match=CHAIN_ENV):
        add_job(module_task(env={CHAIN_ENV: "x"}), three_ranks(), [reserve()])


def test_calculated_ft_timeouts_are_refused_with_a_reserve_and_fixed_ones_accepted():
    with pytest.raises(ResiliencyConfigError, match="calc_ft_timeouts=False"):
        add_job(module_task(), three_ranks(), [FaultTolerancePlugin(), reserve()])
    ft = FaultTolerancePlugin(
        calc_ft_timeouts=False, section_timeouts={"setup": 300, "step": 300, "checkpointing": 300}
    )
    job = add_job(module_task(), three_ranks(), [ft, reserve()])
    assert isinstance(job.executor.launcher, FaultTolerance)
    entrypoint, args, _ = launch_command(job)
    assert entrypoint == "ft_launcher" and job.task.path in args and kept(job)


def test_where_no_file_can_be_shipped_the_keeper_is_the_module_and_doctor_says_what_the_image_needs():
    """DockerExecutor has no route for a file of this package: each rank runs the keeper module, so the image needs
    the package; the line the plugin logs at set-up (front_program.image_needs) is doctor's warning too."""
    import nemo_resiliency_plugins
    from nemo_resiliency_plugins.core.front_program import image_needs
    from nemo_resiliency_plugins.tools.doctor import check_job

    docker = run.DockerExecutor(container_image="x", num_gpus=0, ntasks_per_node=3)
    job = add_job(module_task(), docker, [reserve()])
    assert (job.task.path, job.task.m) == (KEEPER_MODULE, True)
    wanted = f"pip install --no-deps nemo-resiliency-plugins=={nemo_resiliency_plugins.__version__}"
    assert len(image_needs(job.task)) == 1 and wanted in image_needs(job.task)[0]
    checks = check_job(job.task, job.executor, [reserve()])
    found = [c for c in checks if c.name == "the job's image has this package"]
    assert len(found) == 1 and found[0].verdict == "warn" and wanted in found[0].detail, found
    # Where the keeper ships as a file, the image needs nothing of this package.
    assert image_needs(add_job(module_task(), three_ranks(), [reserve()]).task) == []


def test_the_shipped_keeper_file_runs_a_rank_and_passes_its_exit_code_and_interpreter_options_on(tmp_path):
    """The keeper as a file outside the package (what a job without this package installed runs): it starts the
    real rank with the launcher's interpreter options (here -u) and passes its exit code on."""
    shipped = tmp_path / "0123456789ab-rank_keeper.py"
    shipped.write_text(keeper_source())
    code = "import sys; print('-u' in sys.orig_argv, sys.argv[1:]); sys.exit(5)"
    env = {k: v for k, v in os.environ.items() if k not in (MODULE_ENV, "PYTHONPATH")} | {SCRIPT_ENV: "-c", **NVLS_OFF}
    out = subprocess.run(
        [sys.executable, "-I", "-u", str(shipped), code, "-m", "x"], env=env, capture_output=True, text=True, cwd="/"
    )
    # -I: isolated, so nothing of this package can be imported by the keeper; -u reached the rank; "-m" in the
    # rank's own arguments is not taken for the keeper's.
    assert out.returncode == 5, out.stderr
    assert out.stdout.strip() == "True ['-m', 'x']", out.stdout


# ------------------------------------------------------------------------------------------ the keeper itself


def keeper(code: str, *, local_world_size: int = 1) -> subprocess.Popen:
    env = os.environ | {MODULE_ENV: "", SCRIPT_ENV: "", "LOCAL_WORLD_SIZE": str(local_world_size), **NVLS_OFF}
    env.pop(MODULE_ENV)
    env[SCRIPT_ENV] = "-c"
    return subprocess.Popen([sys.executable, "-m", KEEPER_MODULE, code], env=env, stdout=subprocess.PIPE, text=True)


def test_an_exit_code_is_passed_on():
    assert keeper("import sys; sys.exit(3)").wait(60) == 3
    assert keeper("pass").wait(60) == 0


def test_a_killed_rank_with_no_rank_left_on_the_node_is_reported_to_the_launcher():
    proc = keeper("import os, signal; os.kill(os.getpid(), signal.SIGKILL)")
    assert proc.wait(60) == -signal.SIGKILL
    assert "no rank of this node is alive" in proc.stdout.read()


def test_a_launcher_stop_is_forwarded_and_the_keeper_dies_the_same_way():
    proc = keeper("import time; print('up', flush=True); time.sleep(60)")
    assert proc.stdout.readline().strip() == "up"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == -signal.SIGTERM


def test_a_killed_rank_waits_while_a_sibling_rank_lives_and_leaves_with_0_when_it_finished(tmp_path):
    """Two keepers under one parent (as under torchrun): rank A is killed, rank B finishes a moment later."""
    killed = "import os, signal, time; time.sleep(1); os.kill(os.getpid(), signal.SIGKILL)"
    finishing = "import time; time.sleep(4)"
    parent = f"""
import os, subprocess, sys
env = dict(os.environ, LOCAL_WORLD_SIZE="2", {SCRIPT_ENV}="-c", NCCL_NVLS_ENABLE="0")
env.pop("{MODULE_ENV}", None)
a = subprocess.Popen([sys.executable, "-m", "{KEEPER_MODULE}", {killed!r}], env=env)
b = subprocess.Popen([sys.executable, "-m", "{KEEPER_MODULE}", {finishing!r}], env=env)
print(a.wait(), b.wait(), flush=True)
"""
    started = time.monotonic()
    out = subprocess.run([sys.executable, "-c", parent], capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert out.stdout.strip().splitlines()[-1] == "0 0", out.stdout + out.stderr
    assert "RANK_DIED" in out.stdout and "the other ranks finished: exit 0" in out.stdout
    assert time.monotonic() - started >= 4, "the killed rank's keeper left before its sibling finished"


def test_forks_of_the_launcher_are_not_taken_for_keepers(tmp_path):
    """As under NVRx's ft_launcher: the launcher's command line names the keeper module (``-m <keeper>`` is its
    training program) and it forks one long-lived rank-monitor process per local rank, which keeps that command
    line. Rank A is killed, rank B finishes: A's keeper must still see that the other ranks finished and leave
    with 0, not wait for the monitors and then pass its rank's death on (a failed worker group after success)."""
    killed = "import os, signal, time; time.sleep(1); os.kill(os.getpid(), signal.SIGKILL)"
    finishing = "import time; time.sleep(4)"
    launcher = f"""
import os, subprocess, sys, time
monitors = []
for _ in range(2):  # ft_launcher's rank monitors: forks of the launcher, alive until the launcher ends
    pid = os.fork()
    if pid == 0:
        time.sleep(30)
        os._exit(0)
    monitors.append(pid)
env = dict(os.environ, LOCAL_WORLD_SIZE="2", {SCRIPT_ENV}="-c", NCCL_NVLS_ENABLE="0")
env.pop("{MODULE_ENV}", None)
a = subprocess.Popen([sys.executable, "-u", "-m", "{KEEPER_MODULE}", {killed!r}], env=env)
b = subprocess.Popen([sys.executable, "-u", "-m", "{KEEPER_MODULE}", {finishing!r}], env=env)
codes = a.wait(), b.wait()
for pid in monitors:
    os.kill(pid, 9)
    os.waitpid(pid, 0)
print(*codes, flush=True)
"""
    # The launcher's own command line names the keeper as its program's module, as ft_launcher's does.
    out = subprocess.run(
        [sys.executable, "-c", launcher, "--nproc-per-node=2", "-m", KEEPER_MODULE, "train.x=1"],
        capture_output=True,
        text=True,
        timeout=HANG_GUARD_S,
    )
    assert out.stdout.strip().splitlines()[-1] == "0 0", out.stdout + out.stderr
    assert "the other ranks finished: exit 0" in out.stdout, out.stdout
