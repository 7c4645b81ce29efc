"""Issue 47 (hostile and careless input, round 3): one test per class this file's branch fixed (items 1, 2, 3, 5, 6,
11, 13), each on the real code path (real NeMo-Run experiments and dry runs, the installed NVRx, a saved experiment
NeMo-Run wrote)."""

from __future__ import annotations

import dataclasses
import itertools
import json
import shutil
import subprocess
import tarfile
from pathlib import Path

import fiddle as fdl
import nemo_run as run
import pytest
from nemo_run.core.serialization.zlib_json import ZlibJSONSerializer
from nemo_run.run.job import Job

from nemo_resiliency_plugins import (
    FaultTolerancePlugin,
    LocalCheckpointPlugin,
    PreemptionPlugin,
    ResiliencyConfigError,
    StragglerDetectionPlugin,
)
from nemo_resiliency_plugins.core import container_entry
from nemo_resiliency_plugins.tools.cli import main
from nemo_resiliency_plugins.tools.report.plan import saved_plugins
from nemo_resiliency_plugins.tools.saved_plugins import saved_jobs
from tests.helpers import TRAIN, slurm

JOB_LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "job-logs"


# ----------------------------------------------------------------- 1: the report runs no code from the directory


def saved_experiment(tmp_path: Path) -> Path:
    """The experiment directory NeMo-Run saved for the local-smoke job (one FaultTolerancePlugin, step timeout 5 s)."""
    with tarfile.open(JOB_LOGS / "experiment-ft-kill-then-hang.tar.gz") as tar:
        tar.extractall(tmp_path, filter="data")
    (exp,) = (tmp_path / "experiment-ft-kill-then-hang" / "experiments" / "ft-kill-hang").iterdir()
    return exp


def marker_call(marker: Path) -> fdl.Config:
    """What a crafted file would have NeMo-Run's loader build: a call that leaves ``marker`` behind."""
    return fdl.Config(subprocess.call, ["touch", str(marker)])


def crafted_config(exp: Path, marker: Path) -> None:
    """The experiment's own ``_CONFIG`` with one argument replaced by a call: a loader that builds the saved
    experiment builds that argument first (fiddle builds from the leaves up), and the call runs."""
    serializer = ZlibJSONSerializer()
    config = serializer.deserialize((exp / "_CONFIG").read_text())
    config.log_level = marker_call(marker)
    (exp / "_CONFIG").write_text(serializer.serialize(config))


def crafted_job(marker: Path, *, plugins: list) -> str:
    """One serialized job (NeMo-Run's format in ``_TASKS``) whose plugins are ``plugins``."""
    job = fdl.Config(Job, id="ft-kill-hang", task=None, executor=run.Config(run.LocalExecutor), plugins=plugins)
    return ZlibJSONSerializer().serialize(job)


def report_out(exp: Path, capsys) -> str:
    with pytest.raises(SystemExit) as done:
        main(["report", str(exp)])
    out = capsys.readouterr().out
    assert done.value.code == 0, out
    return out


def test_a_crafted_config_is_never_built_and_the_real_plugins_are_still_read(tmp_path, capsys):
    exp = saved_experiment(tmp_path)
    marker = tmp_path / "ran"
    crafted_config(exp, marker)
    out = report_out(exp, capsys)
    assert not marker.exists()
    # The plan comparison still has the job's plugin, from its saved fields.
    assert "each fault: plan's model" in out and "no saved experiment" not in out
    (ft,) = saved_plugins(exp / "ft-kill-hang")
    assert (type(ft), ft.section_timeouts["step"], ft.workload_check_interval) == (FaultTolerancePlugin, 5, 1)


@pytest.mark.parametrize(
    "plugins",
    [
        pytest.param(lambda m: [marker_call(m)], id="a-callable-as-plugin"),
        pytest.param(lambda m: [fdl.Config(FaultTolerancePlugin, section_timeouts=marker_call(m))], id="in-a-field"),
        pytest.param(lambda m: [fdl.Config(FaultTolerancePlugin, log_level=fdl.Config(Path, str(m)))], id="a-class"),
    ],
)
def test_a_crafted_tasks_file_is_never_built(tmp_path, capsys, plugins):
    exp = saved_experiment(tmp_path)
    marker = tmp_path / "ran"
    real = json.loads((exp / "_TASKS").read_text())
    (exp / "_TASKS").write_text(json.dumps([[crafted_job(marker, plugins=plugins(marker)), real[0][1]]]))
    out = report_out(exp, capsys)
    assert not marker.exists()
    assert "plan comparison: no saved experiment with the job's plugins" in out  # unknown, never a partial list
    assert saved_plugins(exp / "ft-kill-hang") is None


def test_a_saved_plugin_of_each_class_is_read_back_with_its_fields(tmp_path):
    """Every plugin class of the package, saved by NeMo-Run's own serializer, comes back with the same fields."""
    exp = saved_experiment(tmp_path)
    plugins = [
        FaultTolerancePlugin(section_timeouts={"setup": 60, "step": 9, "checkpointing": 30}, spare_nodes=1),
        StragglerDetectionPlugin(),
        PreemptionPlugin(preempt_time=90),
        LocalCheckpointPlugin(non_persistent_local_ckpt_dir="/tmp/l", non_persistent_save_interval=5),
    ]
    configs = [
        fdl.Config(type(p), **{f.name: getattr(p, f.name) for f in dataclasses.fields(p) if f.init}) for p in plugins
    ]
    (exp / "_TASKS").write_text(json.dumps([[crafted_job(tmp_path / "x", plugins=configs), None]]))
    (job,) = saved_jobs(exp)
    back = job.plugins
    assert [type(p) for p in back] == [type(p) for p in plugins]
    assert [p.__dict__ for p in back] == [p.__dict__ for p in plugins]


@pytest.mark.parametrize("kind", ["fifo", "directory", "huge-number", "not-json"])
def test_a_tasks_file_that_is_not_one_is_no_plugins_never_a_hang(tmp_path, kind):
    import os

    exp = saved_experiment(tmp_path)
    tasks = exp / "_TASKS"
    tasks.unlink()
    if kind == "fifo":
        os.mkfifo(tasks)
    elif kind == "directory":
        tasks.mkdir()
    elif kind == "huge-number":
        tasks.write_text("[" + "9" * 5000 + "]")
    else:
        tasks.write_text("{")
    assert saved_plugins(exp / "ft-kill-hang") is None
    shutil.rmtree(exp)


# ------------------------------------------------------- 2: two of one plugin with different settings on one job


def setup_all(executor, plugins, task=None):
    """Each plugin's setup on one task and executor, in order, as Experiment.add runs them."""
    task = task or run.Script(path=TRAIN, entrypoint="python")
    for plugin in plugins:
        plugin.setup(task, executor)
    return task, executor


@pytest.mark.parametrize("order", ["spares-first", "plain-first"])
def test_two_fault_tolerance_plugins_that_disagree_are_one_error_naming_both(tmp_path, order):
    pair = [FaultTolerancePlugin(spare_nodes=1), FaultTolerancePlugin()]
    with pytest.raises(ResiliencyConfigError, match=r"two FaultTolerancePlugins .*spare_nodes=(1 vs 0|0 vs 1)"):
        setup_all(slurm(tmp_path), pair if order == "spares-first" else pair[::-1])


@pytest.mark.parametrize(
    "make",
    [
        lambda a: StragglerDetectionPlugin(report_time_interval=a),
        lambda a: PreemptionPlugin(preempt_time=int(a)),
        lambda a: LocalCheckpointPlugin(non_persistent_local_ckpt_dir=f"/tmp/l{a}", non_persistent_save_interval=5),
    ],
    ids=["straggler", "preemption", "local-checkpoint"],
)
def test_every_plugin_class_refuses_a_disagreeing_twin_and_accepts_an_identical_one(tmp_path, make):
    task = run.Script(path=TRAIN, entrypoint="python", args=["checkpoint.save=/tmp/c", "checkpoint.save_interval=10"])
    setup_all(slurm(tmp_path), [make(100.0), make(100.0)], task=task)  # the same plugin twice is one
    task = run.Script(path=TRAIN, entrypoint="python", args=["checkpoint.save=/tmp/c", "checkpoint.save_interval=10"])
    with pytest.raises(ResiliencyConfigError, match="two .*Plugins with different settings"):
        setup_all(slurm(tmp_path), [make(100.0), make(200.0)], task=task)


# --------------------------------------------------------- 3: nvrx_config values against NVRx's field types


@pytest.mark.parametrize(
    ("key", "value", "allowed"),
    [
        ("enable_nic_healthcheck", "false", "True or False"),
        ("gpu_memory_tolerance_mb", "abc", "a finite number"),
        ("gpu_memory_tolerance_mb", None, "None is not allowed"),
        pytest.param("segment", 10**5000, "an integer of at most", id="segment-5000-digits"),
        ("segment", True, "an integer"),
        ("storage_healthcheck_path", 3, "a string or None"),
    ],
)
def test_an_nvrx_config_value_of_the_wrong_type_is_refused_with_the_type_of_nvrxs_field(key, value, allowed):
    with pytest.raises(ResiliencyConfigError, match=rf"FaultTolerancePlugin.nvrx_config\['{key}'\] .*{allowed}"):
        FaultTolerancePlugin(nvrx_config={key: value})


def test_the_types_come_from_the_installed_nvrx_class():
    from nvidia_resiliency_ext.fault_tolerance.config import FaultToleranceConfig

    from nemo_resiliency_plugins.core.nvrx_launcher import config_key_types

    types = config_key_types()
    fields = {f.name: f for f in dataclasses.fields(FaultToleranceConfig)}
    assert set(types) == set(fields)
    good = {
        "enable_nic_healthcheck": False,
        "gpu_memory_tolerance_mb": 256,
        "segment": None,
        "segment_health_check_dir": None,
    }
    assert FaultTolerancePlugin(nvrx_config=good).nvrx_config == good


# ------------------------------------------------------------- 5: srun_args in every form srun reads


@pytest.mark.parametrize(
    "srun_args",
    [["-K1"], ["-W30"], ["-W", "30"], ["--kill-on-bad-exit=0 --wait=5"], ["--wait", "5"], ["-lK"], ["--kill"]],
)
def test_a_step_flag_in_any_form_srun_takes_is_refused_not_overridden(tmp_path, srun_args):
    with pytest.raises(ResiliencyConfigError, match=r"executor.srun_args has .*remove them"):
        setup_all(slurm(tmp_path, srun_args=list(srun_args)), [FaultTolerancePlugin(spare_nodes=1)])


@pytest.mark.parametrize("srun_args", [["-pK80"], ["--mpi=none", "-l"], ["-N", "1"], ["--wckey=W"]])
def test_other_srun_options_are_kept(tmp_path, srun_args):
    _, executor = setup_all(slurm(tmp_path, srun_args=list(srun_args)), [FaultTolerancePlugin(spare_nodes=1)])
    assert executor.srun_args == [*srun_args, "--kill-on-bad-exit=0", "--wait=0"]


def test_an_srun_argument_the_shell_cannot_split_is_one_error(tmp_path):
    with pytest.raises(ResiliencyConfigError, match=r"executor.srun_args .*shlex cannot split"):
        setup_all(slurm(tmp_path, srun_args=["--comment='x"]), [FaultTolerancePlugin(spare_nodes=1)])


# ------------------------------------------------------------------- 6: NRP_SPARE_* in run.Script(env=...)


@pytest.mark.parametrize(
    ("env", "match"),
    [
        ({"NRP_SPARE_JOIN_TIMEOUT": "abc"}, r"task.env\['NRP_SPARE_JOIN_TIMEOUT'\] = 'abc'.*whole number of seconds"),
        ({"NRP_SPARE_FINISH_GRACE": "30"}, r"task.env\['NRP_SPARE_FINISH_GRACE'\].*executor.env_vars"),
        ({"NRP_SPARE_NODES": "3"}, r"task.env\['NRP_SPARE_NODES'\].*spare_nodes sets it"),
    ],
)
def test_spare_settings_in_the_tasks_env_are_checked_too(tmp_path, env, match):
    task = run.Script(path=TRAIN, entrypoint="python", env=dict(env))
    with pytest.raises(ResiliencyConfigError, match=match):
        setup_all(slurm(tmp_path), [FaultTolerancePlugin(spare_nodes=1)], task=task)


# ------------------------------------------- 11: the replication check counts the training nodes, in any order


def test_the_replication_check_gives_one_answer_whatever_the_plugin_order(tmp_path):
    def lcp(factor):
        return LocalCheckpointPlugin(
            non_persistent_local_ckpt_dir="/tmp/l",
            non_persistent_save_interval=5,
            replication=True,
            replication_jump=2,
            replication_factor=factor,
        )

    args = ["checkpoint.save=/tmp/c", "checkpoint.save_interval=10"]
    for factor, ok in ((2, True), (3, False)):  # 2 training nodes + 1 spare: at most 2 replicas
        answers = set()
        for plugins in itertools.permutations([FaultTolerancePlugin(spare_nodes=1), lcp(factor)]):
            try:
                executor = slurm(tmp_path)
                executor.nodes = 2
                setup_all(executor, list(plugins), task=run.Script(path=TRAIN, entrypoint="python", args=list(args)))
                answers.add("ok")
            except ResiliencyConfigError as err:
                assert "training node count (2" in str(err)
                answers.add("refused")
        assert answers == {"ok" if ok else "refused"}


# ---------------------------------------------------------------------- 13: a Docker entrypoint with a stray quote


def test_a_docker_entrypoint_the_shell_cannot_split_is_one_error():
    executor = run.DockerExecutor(container_image="x", num_gpus=0, additional_kwargs={"entrypoint": "bash -c 'x"})
    with pytest.raises(ResiliencyConfigError, match=r"executor.additional_kwargs\['entrypoint'\] = \"bash -c 'x\""):
        # What PreemptionPlugin calls on Docker to make the container entry the container's first process.
        container_entry.install_container_entry(executor, plugin="PreemptionPlugin")
