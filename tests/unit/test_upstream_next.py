"""Issue 49, items 1-2: NVRx's deprecation of in-process restart where a user meets it, and the guards for
Megatron-Bridge#5842 (in-process restart + NVRx async save) and nvidia-resiliency-ext#349 (MXFP8 replicas), through
NeMo-Run's real ``Experiment.add`` and the real ``doctor`` / ``explain``, against the installed Megatron Bridge 0.6.2
and NVRx 0.7.0 (both have both bugs: tests/contract/test_known_bugs.py)."""

from __future__ import annotations

import json

import nemo_run as run
import pytest

from nemo_resiliency_plugins import (
    AsyncCheckpointPlugin,
    InProcessRestartPlugin,
    LocalCheckpointPlugin,
    ResiliencyConfigError,
)
from nemo_resiliency_plugins import inprocess_restart as inprocess_module
from nemo_resiliency_plugins.tools.doctor import check_job
from nemo_resiliency_plugins.tools.explain import explain
from tests.cli.test_cli import cli
from tests.helpers import TRAIN, add_job, local, logged
from tests.unit.test_checkpoint_plugins import slurm


def script(*args):
    return run.Script(
        path=TRAIN, entrypoint="python", args=["checkpoint.save=/tmp/nrp-ck", "checkpoint.save_interval=100", *args]
    )


# ------------------------------------------------------------------------ item 1: the deprecation, said once


def test_in_process_restart_warns_at_set_up_naming_nvrxs_notice_and_the_alternative():
    with logged("nemo_resiliency_plugins.inprocess_restart") as log:
        add_job(script(), local(), [InProcessRestartPlugin()])
    lines = [r.getMessage() for r in log.records if "deprecates in-process restart" in r.getMessage()]
    assert len(lines) == 1
    assert "release notes, v0.6 and v0.7" in lines[0]
    assert "FaultTolerancePlugin's in-job restart" in lines[0] and "spare_nodes" in lines[0]


def test_the_plugin_still_works_and_doctor_and_explain_print_the_plugins_own_notice():
    job = add_job(script(), local(), [InProcessRestartPlugin()])
    assert "++inprocess_restart.enabled=true" in job.task.args
    checks = {c.name: c for c in check_job(job.task, job.executor, [InProcessRestartPlugin()])}
    line = checks["in-process restart: deprecated upstream"]
    assert line.verdict == "warn" and line.detail == inprocess_module.deprecation_notice()
    result = explain([InProcessRestartPlugin()], script(), local(), executor_kind="local")
    assert f"deprecated: {inprocess_module.deprecation_notice()}" in result.known_bugs
    # Not said where in-process restart is off.
    job = add_job(script(), local(), [InProcessRestartPlugin(enabled=False)])
    assert "in-process restart: deprecated upstream" not in {c.name for c in check_job(job.task, job.executor, [])}


# ---------------------------------------------------------------- item 2: Megatron-Bridge#5842, refused


@pytest.mark.parametrize("order", ["inprocess-first", "async-first"])
def test_5842_in_process_restart_with_nvrx_async_save_is_refused_in_either_order(order):
    plugins = [InProcessRestartPlugin(), AsyncCheckpointPlugin()]
    with pytest.raises(ResiliencyConfigError) as info:
        add_job(script(), local(), plugins if order == "inprocess-first" else plugins[::-1])
    text = str(info.value)
    assert "Megatron-Bridge#5842" in text and "is present in the installed code" in text
    assert "AsyncCheckpointPlugin(async_strategy='mcore')" in text  # the workaround that keeps both


def test_5842_the_workaround_is_set_up_and_doctor_reports_the_bug_as_avoided():
    plugins = [InProcessRestartPlugin(), AsyncCheckpointPlugin(async_strategy="mcore")]
    job = add_job(script(), local(), plugins)
    assert "checkpoint.async_strategy=mcore" in job.task.args
    check = {c.name: c for c in check_job(job.task, job.executor, plugins)}["known bug Megatron-Bridge#5842"]
    assert check.verdict == "pass" and "avoided: checkpoint.async_strategy='mcore'" in check.detail
    assert "is present in megatron/bridge/training/inprocess_restart.py" in check.detail


def test_doctor_on_the_in_process_async_recipe_reports_5842():
    out = cli("doctor", "inprocess-async", "--executor", "local", "--json")
    checks = {c["name"]: c for c in json.loads(out.stdout)["checks"]}
    assert "known bug Megatron-Bridge#5842" in checks, sorted(checks)
    assert "avoided" in checks["known bug Megatron-Bridge#5842"]["detail"]


def test_5842_a_task_that_sets_the_combination_itself_gets_a_doctor_fail():
    job = add_job(
        script("inprocess_restart.enabled=true", "checkpoint.async_save=true", "checkpoint.async_strategy=nvrx"),
        local(),
        [],
    )
    check = {c.name: c for c in check_job(job.task, job.executor, [])}["known bug Megatron-Bridge#5842"]
    assert check.verdict == "FAIL" and "refuses the job" in check.detail


# ------------------------------------------------------------- item 2: nvidia-resiliency-ext#349, refused


def _lcp(**kw):
    return LocalCheckpointPlugin(
        non_persistent_local_ckpt_dir="/local/ckpt",
        non_persistent_save_interval=10,
        replication=True,
        replication_jump=8,
        **kw,
    )


@pytest.mark.parametrize("recipe_arg", ["model.fp8_recipe=mxfp8", "mixed_precision=bf16_with_mxfp8_mixed"])
def test_349_replication_with_an_mxfp8_recipe_is_refused(recipe_arg, tmp_path):
    with pytest.raises(ResiliencyConfigError) as info:
        add_job(script(recipe_arg), slurm(tmp_path), [_lcp()])
    text = str(info.value)
    assert "nvidia-resiliency-ext#349" in text and "known NVRx bug" in text
    assert "LocalCheckpointPlugin(replication=False)" in text


def test_349_replication_without_mxfp8_and_mxfp8_without_replication_are_set_up(tmp_path):
    add_job(script(), slurm(tmp_path), [_lcp()])
    job = add_job(
        script("model.fp8_recipe=mxfp8"),
        slurm(tmp_path),
        [LocalCheckpointPlugin(non_persistent_local_ckpt_dir="/local/ckpt", non_persistent_save_interval=10)],
    )
    assert not [c for c in check_job(job.task, job.executor, []) if "#349" in c.name]
