"""One contract test per place this package reads an upstream's internals (issue 29, item 4): each coupling is
checked where it acts, against the NeMo-Run / NVRx installed here, and what happens when it breaks is shown with
the real code (the upstream object the coupling reads is taken away in a child process, nothing is mocked).

* NeMo-Run's executor classes (core/executors/__init__.py), looked up when an executor is checked;
* NeMo-Run's ft_launcher sbatch template names the Slurm requeue guard relies on (core/slurm_script.py);
* NVRx's no-restart exit code (core/nvrx_launcher.py), read from the installed NVRx.
"""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import nemo_run as run
import pytest
from packaging.requirements import Requirement

from nemo_resiliency_plugins import AsyncCheckpointPlugin, FaultTolerancePlugin, PreemptionPlugin
from nemo_resiliency_plugins.core import nvrx_launcher, slurm_script
from nemo_resiliency_plugins.core.executors import RULES_BY_NAME, executor_classes, missing_executor_classes
from tests.contract.executor_jobs import render_sbatch

pytestmark = pytest.mark.contract


def _declared(name: str) -> Requirement:
    for text in importlib.metadata.requires("nemo-resiliency-plugins") or []:
        req = Requirement(text)
        if req.name == name:
            return req
    raise AssertionError(f"{name} is not a declared dependency")


def test_the_installed_nemo_run_is_in_the_declared_range_and_has_every_executor_class_the_rules_name():
    assert importlib.metadata.version("nemo-run") in _declared("nemo-run").specifier
    assert missing_executor_classes() == []
    assert {cls.__name__: rules for cls, rules in executor_classes().items()} == RULES_BY_NAME


def test_an_executor_class_missing_from_nemo_run_refuses_that_executor_only(tmp_path):
    """As if a NeMo-Run release renamed run.DockerExecutor: importing the plugins and a LocalExecutor job still
    work; a DockerExecutor is refused by name with the installed NeMo-Run's version."""
    code = textwrap.dedent(
        """
        import nemo_run as run
        Docker = run.DockerExecutor
        del run.DockerExecutor  # what a NeMo-Run without that name looks like to this package
        from nemo_resiliency_plugins import FaultTolerancePlugin, ResiliencyConfigError
        from nemo_resiliency_plugins.core.executors import for_executor
        local = run.LocalExecutor(ntasks_per_node=2)
        with run.Experiment("coupling", executor=local) as exp:
            exp.add(run.Script(path="/tmp/t.py", entrypoint="python"), plugins=[FaultTolerancePlugin()], name="t")
        print("local ok:", type(exp.jobs[0].executor.launcher).__name__)
        try:
            for_executor(Docker(container_image="x", num_gpus=0), plugin="FaultTolerancePlugin")
        except ResiliencyConfigError as err:
            print("docker refused:", err)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=os.environ | {"NEMORUN_HOME": str(tmp_path / "home")},
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "local ok: FaultTolerance" in out.stdout
    refused = next(line for line in out.stdout.splitlines() if line.startswith("docker refused:"))
    assert f"NeMo-Run {importlib.metadata.version('nemo-run')} does not export run.DockerExecutor" in refused


def _slurm_script(tmp_path: Path) -> str:
    executor = run.SlurmExecutor(
        account="acct",
        partition="debug",
        nodes=2,
        ntasks_per_node=2,
        time="01:00:00",
        tunnel=run.LocalTunnel(job_dir=str(tmp_path / "jobs")),
        packager=run.Packager(),
    )
    task = run.Script(path="/tmp/nrp-train.py", entrypoint="python", args=["checkpoint.save=/ckpt"])
    return render_sbatch(executor, [FaultTolerancePlugin(), PreemptionPlugin()], task, tmp_path)


def test_the_requeue_guard_finds_nemo_runs_template_names_in_the_rendered_script_and_names_a_missing_one(tmp_path):
    assert slurm_script.template_problem() is None  # the set-up check, on the templates' source
    script = _slurm_script(tmp_path)
    assert "nemo-resiliency-plugins: requeue guard" in script
    assert slurm_script.rendered_script_problem(script) is None
    # Each name the guard relies on, renamed in NeMo-Run's part of the script, is named in the error with the
    # installed NeMo-Run's version.
    version = importlib.metadata.version("nemo-run")
    renames = {
        "TORCHX_MAX_RETRIES": ("export TORCHX_MAX_RETRIES=", "export TORCHX_RETRIES="),
        "exitcode": ("exitcode=$?", "exit_code=$?"),
        "scontrol requeue": ('scontrol requeue "$SLURM_JOB_ID"', 'scontrol requeue_hold "$SLURM_JOB_ID"'),
    }
    for name, (old, new) in renames.items():
        assert old in script, old
        problem = slurm_script.rendered_script_problem(script.replace(old, new))
        assert problem is not None and name in problem and f"NeMo-Run {version}" in problem, (name, problem)


def test_the_no_restart_exit_code_is_the_installed_nvrx_s_and_reaches_the_slurm_job(tmp_path):
    from nvidia_resiliency_ext.fault_tolerance.utils import DEFAULT_NO_RESTART_EXIT_CODE

    code, source = nvrx_launcher.no_restart_exit_code()
    assert code == DEFAULT_NO_RESTART_EXIT_CODE and "fault_tolerance/utils.py" in source
    script = _slurm_script(tmp_path)
    assert f"export NRP_NO_RESTART_EXIT_CODE={DEFAULT_NO_RESTART_EXIT_CODE}" in script


# ------------------------------------------------ Megatron Bridge's CheckpointConfig fields (issue 49, item 3)


def test_the_checkpoint_field_set_is_read_from_the_installed_class_without_importing_it(megatron_bridge):
    import dataclasses

    from nemo_resiliency_plugins.core import config_fields

    read = config_fields.class_fields(config_fields.MB_CONFIG_MODULE, "CheckpointConfig")
    assert read == {f.name for f in dataclasses.fields(megatron_bridge.CheckpointConfig)}
    assert "async_strategy" in read  # Megatron Bridge 0.6.2 (and Megatron Core 0.19.2 under it) has it
    task = run.Script(path="/tmp/t.py", entrypoint="python", args=["checkpoint.save=/c"])
    AsyncCheckpointPlugin().setup(task, run.LocalExecutor(ntasks_per_node=2))
    assert "checkpoint.async_strategy=nvrx" in task.args


# A CheckpointConfig reduced as Megatron Bridge's newest config.py has it (src/megatron/bridge/training/config.py
# @ 003e863 in the code index: no async_strategy; MLM #7052 removed Megatron Core's own async saver). Not a copy of
# that file: the fields the plugin writes, less async_strategy, as a plain dataclass.
_REDUCED_CONFIG = """
from dataclasses import dataclass
from typing import Optional

@dataclass
class CheckpointConfig:
    save: Optional[str] = None
    ckpt_format: str = "torch_dist"
    async_save: bool = False
    use_persistent_ckpt_worker: bool = True
    async_ckpt_cpu_priority: int = 10
    async_ckpt_io_priority: Optional[int] = 3
    async_ckpt_use_cpu_shm: bool = False
    async_write_results_mp_mode: str = "fork"
    dist_ckpt_workers: int = 1
    ckpt_assume_constant_structure: bool = False
"""


def test_without_async_strategy_in_the_config_class_the_plugin_neither_emits_nor_accepts_mcore(monkeypatch):
    from nemo_resiliency_plugins import ResiliencyConfigError
    from nemo_resiliency_plugins.core import config_fields

    reduced = config_fields.class_fields("reduced_config", "CheckpointConfig", source=_REDUCED_CONFIG)
    assert reduced is not None and "async_strategy" not in reduced and "async_save" in reduced
    monkeypatch.setattr(config_fields, "megatron_bridge_fields", lambda cls: reduced)
    task = run.Script(path="/tmp/t.py", entrypoint="python", args=["checkpoint.save=/c"])
    AsyncCheckpointPlugin().setup(task, run.LocalExecutor(ntasks_per_node=2))
    assert "checkpoint.async_save=true" in task.args
    assert not [a for a in task.args if "async_strategy" in a]
    with pytest.raises(ResiliencyConfigError) as info:
        AsyncCheckpointPlugin(async_strategy="mcore")
    assert "AsyncCheckpointPlugin.async_strategy = 'mcore'" in str(info.value) and "no async_strategy" in str(
        info.value
    )
