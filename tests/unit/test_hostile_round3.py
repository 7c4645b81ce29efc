"""Issue 47 (hostile and careless input, round 3): one test per class this file's branch fixed (items 1, 2, 3, 5, 6,
11, 13), each on the real code path (real NeMo-Run experiments and dry runs, the installed NVRx, a saved experiment
NeMo-Run wrote)."""

from __future__ import annotations

import dataclasses
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
    StragglerDetectionPlugin,
)
from nemo_resiliency_plugins.tools.cli import main
from nemo_resiliency_plugins.tools.report_plan import saved_plugins
from nemo_resiliency_plugins.tools.saved_plugins import saved_jobs

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
