"""doctor and the plugins state each shared rule once: doctor asks the plugin (or core/), so they cannot drift.

Each test runs the same inputs through the plugin and through doctor and asserts the two verdicts match. The
drift these catch happened before: doctor flagged TORCH_CPP_LOG_LEVEL=fatal, which InProcessRestartPlugin
accepts, and doctor kept its own copy of the checkpoint.save/load rule.
"""

from __future__ import annotations

import nemo_run as run
import pytest

from nemo_resiliency_plugins import FaultTolerancePlugin, ResiliencyConfigError
from nemo_resiliency_plugins.inprocess_restart import REQUIRED_ENV, InProcessRestartPlugin
from nemo_resiliency_plugins.tools import doctor
from tests.helpers import TRAIN, add_job, local


def _verdict(checks: list[doctor.Check], name: str) -> str:
    found = [c.verdict for c in checks if c.name == name]
    assert len(found) == 1, [c.name for c in checks]
    return found[0]


ENVS = [
    {},
    {"TORCH_CPP_LOG_LEVEL": "fatal", "TORCH_NCCL_RETHROW_CUDA_ERRORS": "0", "NCCL_NVLS_ENABLE": "0"},
    {"TORCH_CPP_LOG_LEVEL": "error", "TORCH_NCCL_RETHROW_CUDA_ERRORS": "0", "NCCL_NVLS_ENABLE": "0"},
    {"TORCH_CPP_LOG_LEVEL": "error", "TORCH_NCCL_RETHROW_CUDA_ERRORS": "0"},
    {"TORCH_CPP_LOG_LEVEL": "INFO", "TORCH_NCCL_RETHROW_CUDA_ERRORS": "0", "NCCL_NVLS_ENABLE": "0"},
    {"TORCH_CPP_LOG_LEVEL": "fatal", "TORCH_NCCL_RETHROW_CUDA_ERRORS": "1", "NCCL_NVLS_ENABLE": "0"},
]


@pytest.mark.parametrize("env", ENVS, ids=lambda e: ",".join(f"{k}={v}" for k, v in e.items()) or "none")
def test_inprocess_env_rule_is_the_plugins(env):
    """doctor passes the environment as the user gave it exactly when the plugin finds nothing to set or refuse."""
    task = run.Script(path=TRAIN, entrypoint="python")
    raw = doctor.check_job(task, local(env_vars=dict(env)), [InProcessRestartPlugin()])  # built by hand
    try:
        job = add_job(
            run.Script(path=TRAIN, entrypoint="python"), local(env_vars=dict(env)), [InProcessRestartPlugin()]
        )
    except ResiliencyConfigError:
        assert _verdict(raw, "in-process env vars") == "FAIL", "the plugin refuses an environment doctor passes"
        return
    watched = {"TORCH_CPP_LOG_LEVEL", *REQUIRED_ENV}
    plugin_set = {k for k in watched if job.executor.env_vars.get(k) != env.get(k)}
    assert _verdict(raw, "in-process env vars") == ("FAIL" if plugin_set else "pass"), (env, plugin_set)
    after = doctor.check_job(job.task, job.executor, [InProcessRestartPlugin()])
    assert _verdict(after, "in-process env vars") == "pass", "doctor fails what the plugin built"


SAVE_LOAD = [
    [],
    ["checkpoint.save=/ckpt"],
    ["checkpoint.save=/ckpt", "checkpoint.load=/ckpt"],
    ["checkpoint.save=/ckpt", "checkpoint.load=/ckpt/"],
    ["checkpoint.save=/ckpt", "checkpoint.load=/other"],
    ["checkpoint.save=/ckpt", "~checkpoint.load"],
    ["checkpoint.save=null"],
    ["checkpoint.save=/ckpt", "checkpoint.save_interval=0"],
]


@pytest.mark.parametrize("args", SAVE_LOAD, ids=lambda a: " ".join(a) or "nothing")
def test_resume_rule_is_the_plugins(args):
    def task() -> run.Script:
        return run.Script(path=TRAIN, entrypoint="python", args=list(args))

    verdict = _verdict(
        doctor.check_job(task(), local(), [FaultTolerancePlugin()]), "restarts resume from the saved checkpoints"
    )
    try:
        job = add_job(task(), local(), [FaultTolerancePlugin()])
    except ResiliencyConfigError:
        assert verdict == "FAIL", "the plugin refuses a task doctor does not fail"
        return
    wired = any(a.startswith("checkpoint.load=") for a in job.task.args) and not any(
        a.startswith("checkpoint.load=") for a in args
    )
    if wired:  # the plugin had to set checkpoint.load: the task as the user built it trains from scratch
        assert verdict == "FAIL"
    elif not any(a.startswith("checkpoint.save=") for a in args):
        assert verdict == "warn"  # neither can see the directory: both say so instead of refusing
    else:
        assert verdict == "pass"
    after = doctor.check_job(job.task, job.executor, [FaultTolerancePlugin()])
    assert _verdict(after, "restarts resume from the saved checkpoints") == ("warn" if verdict == "warn" else "pass")


def test_section_names_are_the_plugins():
    from nemo_resiliency_plugins.fault_tolerance import MEGATRON_BRIDGE_SECTIONS

    job = add_job(
        run.Script(path=TRAIN, entrypoint="python", args=["checkpoint.save=/c"]), local(), [FaultTolerancePlugin()]
    )
    checks = doctor.check_job(job.task, job.executor, [FaultTolerancePlugin()])
    detail = next(c.detail for c in checks if c.name == "section timeouts declared")
    assert all(name in detail for name in MEGATRON_BRIDGE_SECTIONS), detail
