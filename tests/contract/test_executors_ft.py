"""FaultTolerancePlugin on Docker, DGX Cloud and Lepton: the job NeMo-Run 0.11.1 renders, parsed by NVRx 0.7.0.

For each executor: what ft_launcher is started with (command line, env, the config file as the job will find
it) gives NVRx's rank monitor the section timeouts and the out-of-section timeout, no heartbeat timeouts, and
the restart count; job retries are set only where the executor honours them; one node gets GROUP_RANK=0 and
several never share one. What cannot work is refused by name. (SkyPilot and Kubeflow, which need their own
packages, are in ``test_executors_ft_sky_kubeflow.py``.)
"""

from __future__ import annotations

import logging
import os
import re

import nemo_run as run
import pytest

from nemo_resiliency_plugins import FaultTolerancePlugin, ResiliencyConfigError
from nemo_resiliency_plugins.core.executors import FaultToleranceWithSections, for_executor
from tests.contract.executor_jobs import (
    env_and_launch_lines,
    parse_launch,
    render,
    render_sbatch,
    run_as_node,
    script_task,
    shell_join,
)
from tests.helpers import add_job, local, logged, slurm

SECTIONS = {"setup": 600.0, "step": 180.0, "checkpointing": 420.0}


def docker(**kw):
    return run.DockerExecutor(container_image="nvcr.io/nvidia/nemo:dev", num_gpus=0, ntasks_per_node=2, **kw)


def dgxcloud(nodes=2, **kw):
    return run.DGXCloudExecutor(
        base_url="https://dgxc.invalid/api/v1",
        kube_apiserver_url="https://k8s.invalid",
        client_id="id",
        client_secret="secret",
        project_name="proj",
        container_image="nvcr.io/nvidia/nemo:dev",
        pvc_nemo_run_dir="/pvc/nemo_run",
        pvcs=[{"name": "pvc", "path": "/pvc", "claimName": "c"}],
        nodes=nodes,
        gpus_per_node=8,
        nprocs_per_node=8,
        packager=run.Packager(),
        **kw,
    )


def lepton(nodes=1, **kw):
    return run.LeptonExecutor(
        container_image="nvcr.io/nvidia/nemo:dev",
        nemo_run_dir="/lepton/nemo_run",
        nodes=nodes,
        gpus_per_node=8,
        nprocs_per_node=8,
        node_group="ng",
        mounts=[{"path": "/lepton", "mount_path": "/lepton"}],
        packager=run.Packager(),
        **kw,
    )


def assert_sections_reach_the_rank_monitor(view, restarts=3):
    cfg = view.config
    assert cfg.rank_section_timeouts == SECTIONS
    assert cfg.rank_out_of_section_timeout == 300.0
    assert cfg.initial_rank_heartbeat_timeout is None and cfg.rank_heartbeat_timeout is None
    assert view.args.max_restarts == restarts


# ------------------------------------------------------------------------------------------------ Docker


def docker_launch(job, tmp_path, monkeypatch):
    container = job.request.containers[0]
    env = {**job.executor.env_vars, **container.extra_env}
    seen = run_as_node(tmp_path, shell_join(container.command), env)
    return parse_launch(seen, "/nemo_run", job.job_dir, monkeypatch)


def test_docker_job_gives_ft_launcher_the_sections(tmp_path, monkeypatch):
    job = render(docker(), [FaultTolerancePlugin()])
    view = docker_launch(job, tmp_path, monkeypatch)
    assert_sections_reach_the_rank_monitor(view)
    assert view.local_cfg_path == os.path.join(job.job_dir, "configs", "train_executor.yaml")
    assert view.env["GROUP_RANK"] == "0"  # one container, one node
    assert view.env["TASK_VAR"] == "t"  # Docker passes run.Script(env=...) on
    assert isinstance(job.executor.launcher, FaultToleranceWithSections)


@pytest.fixture
def notes():
    with logged("nemo_resiliency_plugins.core.executor_config", logging.INFO) as log:
        yield log.messages


def test_docker_never_gets_retries_and_notes_the_default(notes):
    job = render(docker(), [FaultTolerancePlugin()])
    assert job.executor.retries == 0  # > 0 makes Docker refuse to create the container
    assert any("num_job_retries_on_failure=2 not applied" in line for line in notes), notes


def test_docker_job_state_race_is_stated_where_the_user_reads_it(notes):
    """NeMo-Run's wait can lose its race with the container's auto-removal (docs/races.md): the set-up says where
    the real outcome is (the Docker smoke test proves doctor reads it from a real container)."""
    render(docker(), [FaultTolerancePlugin()])
    (line,) = [line for line in notes if "No such container" in line]
    assert "status_<container>.out" in line and "nemo-resiliency doctor" in line, line


def test_docker_explicit_retries_are_refused():
    with pytest.raises(ResiliencyConfigError, match=r"num_job_retries_on_failure = 5.*cannot create its container"):
        render(docker(), [FaultTolerancePlugin(num_job_retries_on_failure=5)])


def test_docker_executor_with_retries_is_refused():
    with pytest.raises(ResiliencyConfigError, match=r"executor\.retries = 2 is not allowed: expected 0 on Docker"):
        render(docker(retries=2), [FaultTolerancePlugin(num_job_retries_on_failure=0)])


def test_docker_zero_restarts_reach_ft_launcher(tmp_path, monkeypatch):
    job = render(docker(), [FaultTolerancePlugin(num_in_job_restarts=0)])
    view = docker_launch(job, tmp_path, monkeypatch)
    assert "--max-restarts" not in view.argv  # NeMo-Run drops a falsy max_restarts ...
    assert view.env["PET_MAX_RESTARTS"] == "0" and view.args.max_restarts == 0  # ... the env carries it


# -------------------------------------------------------------------------------------------- DGX Cloud


def dgx_node_launch(job, tmp_path, monkeypatch, hostname):
    with open(os.path.join(job.experiment_dir, "torchrun_job.sh")) as handle:  # DGXCloudRequest.materialize()
        script = handle.read()
    seen = run_as_node(tmp_path, env_and_launch_lines(script), {"HOSTNAME": hostname})
    return parse_launch(seen, job.executor.pvc_job_dir, job.job_dir, monkeypatch)


def test_dgxcloud_job_gives_ft_launcher_sections_and_restarts(tmp_path, monkeypatch):
    job = render(dgxcloud(), [FaultTolerancePlugin()])
    views = [dgx_node_launch(job, tmp_path, monkeypatch, f"train-worker-{i}") for i in (0, 1)]
    for view in views:
        # NeMo-Run drops --max-restarts on DGX Cloud; PET_MAX_RESTARTS carries it.
        assert_sections_reach_the_rank_monitor(view)
        assert "--max-restarts" not in view.argv and view.env["PET_MAX_RESTARTS"] == "3"
    assert [v.env["GROUP_RANK"] for v in views] == ["0", "1"]  # the template's per-node rank, not the plugin's
    assert "GROUP_RANK" not in job.executor.env_vars
    assert job.executor.retries == 0


def test_dgxcloud_zero_restarts(tmp_path, monkeypatch):
    job = render(dgxcloud(nodes=1), [FaultTolerancePlugin(num_in_job_restarts=0, num_job_retries_on_failure=0)])
    assert dgx_node_launch(job, tmp_path, monkeypatch, "w-0").args.max_restarts == 0


def test_dgxcloud_explicit_retries_are_refused():
    with pytest.raises(ResiliencyConfigError, match="nothing resubmits a failed workload"):
        render(dgxcloud(), [FaultTolerancePlugin(num_job_retries_on_failure=1)])


def test_dgxcloud_env_values_must_be_shell_words():
    """torchrun_job.sh exports env vars unquoted: a job directory bash would split is refused, naming it."""
    plugin = FaultTolerancePlugin(num_job_retries_on_failure=0)
    with pytest.raises(ResiliencyConfigError, match="export PET_FT_CFG_PATH=<value>' into the DGXCloudExecutor"):
        render(dgxcloud(), [plugin], title="a b")


# ----------------------------------------------------------------------------------------------- Lepton


def test_lepton_one_node_gives_ft_launcher_the_sections(tmp_path, monkeypatch):
    job = render(lepton(), [FaultTolerancePlugin()])
    # LeptonExecutor.launch puts " ".join(cmd) into launch_script.sh after 'cd /nemo_run/code'; the job spec's
    # env is executor.env_vars only (run.Script(env=...) is dropped).
    seen = run_as_node(tmp_path, shell_join(job.request.cmd), dict(job.executor.env_vars))
    view = parse_launch(seen, job.executor.lepton_job_dir, job.job_dir, monkeypatch)
    assert_sections_reach_the_rank_monitor(view)
    assert view.env["GROUP_RANK"] == "0"
    assert job.executor.retries == 0


def test_lepton_several_nodes_are_refused():
    with pytest.raises(ResiliencyConfigError, match=r"executor\.nodes = 2 .*bash substitutes its PID"):
        render(lepton(nodes=2), [FaultTolerancePlugin(num_job_retries_on_failure=0)])


def test_lepton_task_env_that_would_be_dropped_is_an_error():
    """A variable a plugin reads, set only in run.Script(env=...), never reaches a Lepton job: say so."""
    from nemo_resiliency_plugins import InProcessRestartPlugin

    task = run.Script(path="/workspace/train.py", entrypoint="python", env={"TORCH_CPP_LOG_LEVEL": "fatal"})
    with pytest.raises(ResiliencyConfigError, match="LeptonExecutor drops run.Script"):
        render(lepton(), [InProcessRestartPlugin()], task=task)


# ------------------------------------------------------------------------------ Megatron Bridge semantics


@pytest.mark.parametrize("make", [docker, dgxcloud, lepton], ids=["docker", "dgxcloud", "lepton"])
def test_megatron_bridge_plugin_semantics_hold(make, tmp_path):
    """What Megatron Bridge's FaultTolerancePlugin promises: the launcher is ft_launcher with the restarts,
    and retries where the executor honours them (none of these does: 0, with a note)."""
    job = render(make(), [FaultTolerancePlugin(num_in_job_restarts=4)])
    role_cmd = job.request.containers[0].command if hasattr(job.request, "containers") else job.request.cmd
    assert role_cmd[0] == "ft_launcher"
    assert job.executor.env_vars["PET_MAX_RESTARTS"] == "4"
    assert job.executor.launcher.max_restarts == 4
    assert job.executor.retries == 0
    assert not for_executor(job.executor).honours_retries


def test_section_mapping_sits_in_the_executor_yaml_nvrx_reads(tmp_path):
    """NVRx takes the first fault_tolerance mapping at any depth: the executor YAML has exactly one."""
    job = render(docker(), [FaultTolerancePlugin()])
    text = open(os.path.join(job.job_dir, "configs", "train_executor.yaml")).read()
    assert len(re.findall(r"^\s*fault_tolerance:", text, flags=re.M)) == 1


# ------------------------------------------------------------------------ other plugins on these executors


def _ft_state(directory, step, checkpointing):
    """Megatron Bridge's ft_state.json with computed section timeouts (observed time x NVRx's factor 5)."""
    import json

    directory.mkdir(parents=True, exist_ok=True)
    section = {"section": {"setup": 600.0, "step": step, "checkpointing": checkpointing}, "out_of_section": 300.0}
    (directory / "ft_state.json").write_text(json.dumps({"current_timeouts": {"section": section}}))


def test_preemption_off_slurm_checks_the_platform_grace_period(tmp_path):
    """Docker gives a stopped container 10 s before SIGKILL; one step + one save of 100 s would be lost."""
    import warnings

    from nemo_resiliency_plugins import PreemptionPlugin
    from nemo_resiliency_plugins.preemption import PreemptionTimeWarning

    ck = tmp_path / "ck"
    _ft_state(ck, step=100.0, checkpointing=400.0)  # observed: 20 s + 80 s
    task = run.Script(path="/workspace/train.py", entrypoint="python", args=[f"checkpoint.save={ck}"])
    with pytest.warns(PreemptionTimeWarning, match=r"10 s between SIGTERM and SIGKILL.*up to 100 s.*stop_timeout"):
        job = render(docker(), [PreemptionPlugin()], task=task)
    assert job.executor.retries == 0 and "signal" not in vars(job.executor)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PreemptionTimeWarning)
        render(docker(additional_kwargs={"stop_timeout": 300}), [PreemptionPlugin()], task=task)


def test_timeout_chain_has_the_platform_grace_link():
    from nemo_resiliency_plugins import PreemptionPlugin
    from nemo_resiliency_plugins.tools.timeout_chain import timeout_chain

    links = {link.name: link for link in timeout_chain([PreemptionPlugin()], docker(), step_time_s=5, save_time_s=30)}
    grace = links["platform SIGTERM->SIGKILL grace > one step + one save"]
    assert grace.ok is False and grace.detail == "10 s vs 35 s"
    dgx = timeout_chain([PreemptionPlugin()], dgxcloud(), step_time_s=5, save_time_s=20)
    assert [link.ok for link in dgx if link.name.startswith("platform")] == [True]  # 30 s vs 25 s


@pytest.mark.parametrize("make", [docker, dgxcloud, lepton], ids=["docker", "dgxcloud", "lepton"])
def test_task_side_plugins_reach_the_job_through_the_executor_env(make):
    """In-process restart, straggler detection and the rerun state machine act inside the ranks: their Hydra
    overrides go on the task, and the env in-process restart needs goes to executor.env_vars, which every
    executor passes to the job (Lepton and Kubeflow drop run.Script(env=...))."""
    from nemo_resiliency_plugins import InProcessRestartPlugin, RerunStateMachinePlugin, StragglerDetectionPlugin

    # Straggler detection and in-process restart are checked in separate jobs: together they are refused on
    # Megatron Bridge 0.6.2 (Megatron-Bridge#5761, nemo_resiliency_plugins/core/known_bugs.py).
    job = render(make(), [InProcessRestartPlugin(), FaultTolerancePlugin(num_job_retries_on_failure=0)])
    env = job.executor.env_vars
    assert env["TORCH_NCCL_RETHROW_CUDA_ERRORS"] == "0" and env["NCCL_NVLS_ENABLE"] == "0"
    assert env["TORCH_CPP_LOG_LEVEL"] == "error"
    args = " ".join(job.task.args)
    for section in ("++inprocess_restart.enabled=true", "++ft.enable_ft_package=true"):
        assert section in args
    assert isinstance(job.executor.launcher, FaultToleranceWithSections)
    job = render(
        make(),
        [FaultTolerancePlugin(num_job_retries_on_failure=0), StragglerDetectionPlugin(), RerunStateMachinePlugin()],
    )
    args = " ".join(job.task.args)
    for section in ("++nvrx_straggler.enabled=true", "++ft.enable_ft_package=true", "rerun_state_machine.rerun_mode="):
        assert section in args
    assert isinstance(job.executor.launcher, FaultToleranceWithSections)


# ------------------------------------------------------------------------------- infrastructure ranks


def slurm_nodes(tmp, nodes):
    executor = slurm(tmp)
    executor.nodes = nodes
    return executor


@pytest.mark.parametrize(
    ("make", "group_rank"),
    [
        (lambda tmp: local(), "0"),
        (lambda tmp: slurm_nodes(tmp, 1), None),
        (lambda tmp: slurm_nodes(tmp, 3), None),
        (lambda tmp: docker(), "0"),
        (lambda tmp: dgxcloud(nodes=1), None),
        (lambda tmp: dgxcloud(nodes=4), None),
        (lambda tmp: lepton(nodes=1), "0"),
    ],
    ids=["local", "slurm-1", "slurm-3", "docker", "dgxcloud-1", "dgxcloud-4", "lepton-1"],
)
def test_group_rank_only_where_one_value_is_right(make, group_rank, tmp_path):
    """NVRx refuses two nodes with one infrastructure rank: GROUP_RANK=0 only on one node, never where the
    executor sets a rank itself (Slurm's SLURM_PROCID, DGX Cloud's per-node GROUP_RANK export)."""
    job = add_job(script_task(), make(tmp_path), [FaultTolerancePlugin(num_job_retries_on_failure=0)])
    assert job.executor.env_vars.get("GROUP_RANK") == group_rank


def test_doctor_infrastructure_rank_verdicts(tmp_path):
    from nemo_resiliency_plugins.tools.doctor import _infra_rank_check

    assert _infra_rank_check(dgxcloud(nodes=2)).verdict == "pass"  # DGX Cloud's script exports one per node
    assert _infra_rank_check(slurm_nodes(tmp_path, 2)).verdict == "n/a"  # SLURM_PROCID
    shared = docker(env_vars={"GROUP_RANK": "0"})
    assert _infra_rank_check(shared).verdict == "pass"  # one node: one value is right


# --------------------------------------------------------------------- the stop signal in a container


CHILD = (
    "import signal, sys, time\n"
    "signal.signal(signal.SIGTERM, lambda *a: (print('RANK GOT SIGTERM', flush=True), sys.exit(0)))\n"
    "time.sleep(4)\n"
    "print('RANK NEVER SIGNALLED', flush=True)\n"
)


def test_sigterm_to_a_bash_launch_script_as_container_init_never_reaches_the_job(tmp_path):
    """What PreemptionSignalWarning says, measured: a container's first process is NeMo-Run's bash launch
    script (Docker: ``bash -c "... | tee ..."``; DGX Cloud, Lepton, Kubeflow: ``/bin/bash launch_script.sh``).
    The platform signals that process only, from outside its PID namespace; an init with no SIGTERM handler
    never gets it, so the job inside runs on (until the platform's SIGKILL)."""
    import signal
    import subprocess
    import sys
    import time

    child = tmp_path / "rank.py"
    child.write_text(CHILD)
    command = f"{sys.executable} {child} 2>&1 | tee -a {tmp_path}/log.out; echo launch-script-done"
    outer = subprocess.Popen(
        ["unshare", "--pid", "--fork", "--mount-proc", "bash", "-c", command],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    init = None
    for _ in range(50):  # the namespace's init: unshare's only child
        time.sleep(0.1)
        found = subprocess.run(["pgrep", "-P", str(outer.pid)], capture_output=True, text=True).stdout.split()
        if found:
            init = int(found[0])
            break
    assert init is not None, "unshare started no namespace init"
    time.sleep(0.5)
    os.kill(init, signal.SIGTERM)  # what docker stop / the kubelet does to the container's first process
    out, _ = outer.communicate(timeout=30)
    assert "RANK NEVER SIGNALLED" in out and "RANK GOT SIGTERM" not in out, out
    assert "launch-script-done" in out


def test_every_executor_whose_first_process_is_the_launch_script_has_a_route_for_the_entry():
    """PreemptionSignalWarning (the platform's SIGTERM lost in front of NeMo-Run's launch script) is kept for an
    executor without a route; none of this NeMo-Run's has one missing."""
    from nemo_resiliency_plugins.core.executors import RULES_BY_NAME

    launch_script_first = [name for name, rules in RULES_BY_NAME.items() if rules.pid1_launch_script is True]
    assert {"DockerExecutor", "DGXCloudExecutor", "LeptonExecutor"} <= set(launch_script_first)
    assert all(RULES_BY_NAME[name].entry_route for name in launch_script_first)
    assert RULES_BY_NAME["KubeflowExecutor"].entry_route  # its first process depends on workdir_pvc (a property)


@pytest.mark.parametrize(
    ("make", "where"),
    [
        (docker, lambda ex: "/nemo_run"),  # job_dir's bind mount
        (dgxcloud, lambda ex: ex.pvc_job_dir),  # where move_data copies job_dir
        (lepton, lambda ex: ex.lepton_job_dir),  # likewise
    ],
    ids=["docker", "dgxcloud", "lepton"],
)
def test_diagnostics_dumps_land_in_the_job_directory_the_job_sees(make, where):
    """diagnostics=True: the flight recorder writes into the job directory as the container sees it (the mount or
    the storage NeMo-Run copies the job directory to), never into a path of the launching host."""
    job = render(make(), [FaultTolerancePlugin(num_job_retries_on_failure=0, diagnostics=True)])
    env = job.executor.env_vars
    prefix = env["TORCH_FR_DUMP_TEMP_FILE"]
    assert prefix == f"{where(job.executor)}/flight_recorder_rank_" and prefix.startswith("/"), prefix
    assert not prefix.startswith(job.job_dir)  # the launching host's path
    assert env["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"] == prefix and env["PYTHONFAULTHANDLER"] == "1"


# --------------------------------------------------------------------- the rendezvous store of a multi-node job


def _rdzv_endpoint(executor, tmp_path) -> str:
    script = render_sbatch(executor, [FaultTolerancePlugin(num_job_retries_on_failure=0)], script_task(), tmp_path)
    (endpoint,) = re.findall(r"--rdzv-endpoint (\S+)", script)
    return endpoint


def test_each_multi_node_slurm_job_gets_a_rendezvous_port_of_its_own(tmp_path):
    """NeMo-Run's sbatch script gives every multi-node job $head_node_ip:29500: two jobs whose first node is one host
    would share one rendezvous store, and one job's end would break the other's next in-job restart. The plugin
    gives each job its own port (from its directory), outside the kernel's ephemeral range; a port the user chose
    and the one-node launch (localhost:0, a free port) are left alone."""
    first, second = (_rdzv_endpoint(slurm_nodes(tmp_path / name, 2), tmp_path) for name in ("a", "b"))
    ports = [int(endpoint.removeprefix("$head_node_ip:")) for endpoint in (first, second)]
    assert all(20000 <= port < 29000 for port in ports) and ports[0] != ports[1], (first, second)
    chosen = slurm_nodes(tmp_path / "c", 2)
    chosen.launcher = run.FaultTolerance(rdzv_port=31337)
    assert _rdzv_endpoint(chosen, tmp_path) == "$head_node_ip:31337"
    assert _rdzv_endpoint(slurm_nodes(tmp_path / "d", 1), tmp_path) == "localhost:0"
