"""What the plugins do about the known Megatron Bridge bugs (known_bugs.py) at set-up, through NeMo-Run's real
``Experiment.add``, and what ``doctor`` / ``explain`` show. The installed Megatron Bridge here is 0.6.2, which has
all four bugs (pinned in tests/contract/test_known_bugs.py)."""

from __future__ import annotations

import shutil

import nemo_run as run
import pytest

from nemo_resiliency_plugins import (
    FaultTolerancePlugin,
    InProcessRestartPlugin,
    ResiliencyConfigError,
    StragglerDetectionPlugin,
)
from nemo_resiliency_plugins.core import known_bugs
from nemo_resiliency_plugins.tools.doctor import check_job
from nemo_resiliency_plugins.tools.explain import explain
from tests.helpers import TRAIN, add_job, local, logged

LOGGER = "nemo_resiliency_plugins.core.known_bugs"


def script(*args):
    return run.Script(path=TRAIN, entrypoint="python", args=["checkpoint.save=/tmp/nrp-ck", *args])


def partial_task():
    from nemo_resiliency_plugins.testing.te_compat import ensure_megatron_bridge_importable

    ensure_megatron_bridge_importable()
    from nemo_resiliency_plugins.testing import workload

    return run.Partial(workload.pretrain, config=workload.reference_config_buildable("/tmp/nrp-ck"))


@pytest.fixture
def bug_log():
    with logged(LOGGER) as log:
        yield log


def bug_warnings(bug_log, number: int) -> list[str]:
    return [r.getMessage() for r in bug_log.records if f"Megatron-Bridge#{number}" in r.getMessage()]


# ------------------------------------------------------------------------------- #5711: warn (FT, computed timeouts)


@pytest.mark.parametrize("make_task", [script, partial_task], ids=["script", "partial"])
def test_5711_computed_timeouts_warn_once_with_the_workaround(make_task, bug_log):
    add_job(make_task(), local(), [FaultTolerancePlugin(), InProcessRestartPlugin()])
    (message,) = bug_warnings(bug_log, 5711)  # once per job, though two plugins ran the guard
    assert message.startswith("FaultTolerancePlugin: known Megatron Bridge bug Megatron-Bridge#5711")
    assert "Not enough data to compute timeouts" in message
    assert "Workaround: FaultTolerancePlugin(calc_ft_timeouts=False)" in message
    assert "megatron/bridge/training/fault_tolerance.py: shutdown()" in message


def test_5711_no_warning_without_computed_timeouts(bug_log):
    add_job(script(), local(), [FaultTolerancePlugin(calc_ft_timeouts=False)])
    assert bug_warnings(bug_log, 5711) == []


# --------------------------------------------------------------------- #5761: refuse (straggler + in-process)


@pytest.mark.parametrize("make_task", [script, partial_task], ids=["script", "partial"])
@pytest.mark.parametrize("order", ["straggler-first", "inprocess-first"])
def test_5761_straggler_with_inprocess_restart_is_refused_in_either_order(make_task, order):
    plugins = [StragglerDetectionPlugin(), InProcessRestartPlugin()]
    if order == "inprocess-first":
        plugins.reverse()
    with pytest.raises(ResiliencyConfigError) as err:
        add_job(make_task(), local(), plugins)
    assert err.value.plugin == type(plugins[1]).__name__  # the second plugin is the one that sees both
    text = str(err.value)
    assert "Megatron-Bridge#5761" in text
    assert "straggler reports or stop_if_detected" in text
    assert "Workaround: drop InProcessRestartPlugin and rely on FaultTolerancePlugin's launcher restarts" in text


def test_5761_in_process_restart_the_task_sets_itself_is_seen():
    task = script("++inprocess_restart.enabled=true")
    with pytest.raises(ResiliencyConfigError, match="Megatron-Bridge#5761"):
        add_job(task, local(), [StragglerDetectionPlugin()])


@pytest.mark.parametrize(
    "plugins",
    [
        [StragglerDetectionPlugin(), InProcessRestartPlugin(enabled=False)],
        [StragglerDetectionPlugin(enabled=False), InProcessRestartPlugin()],
        [StragglerDetectionPlugin(), FaultTolerancePlugin()],
    ],
    ids=["inprocess-off", "straggler-off", "straggler-with-launcher-restarts"],
)
def test_5761_only_the_combination_is_refused(plugins):
    job = add_job(script(), local(), plugins)
    assert job.task.args  # set up, not refused


def test_5761_the_plugins_follow_the_code_not_the_version(tmp_path, monkeypatch):
    """With a state.py that has the fix, the same Megatron Bridge version is accepted."""
    bug = next(b for b in known_bugs.KNOWN_BUGS if b.number == 5761)
    installed = known_bugs.installed_file(bug.file)
    old = "        self._straggler_timer = None\n        self._nvrx_straggler_manager = None\n"
    new = (  # upstream's fix: shut the manager down before dropping it
        "        self._straggler_timer = None\n"
        "        safe_shutdown_nvrx_straggler_manager(self._nvrx_straggler_manager)\n"
        "        self._nvrx_straggler_manager = None\n"
    )
    text = installed.read_text()
    assert text.count(old) == 1
    fixed = tmp_path / bug.file
    fixed.parent.mkdir(parents=True)
    fixed.write_text(text.replace(old, new))
    for other in known_bugs.KNOWN_BUGS:  # the other files as installed
        if other.file != bug.file:
            (tmp_path / other.package / other.file).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(known_bugs.installed_file(other.file, other.package), tmp_path / other.package / other.file)
    (tmp_path / bug.package / bug.file).parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(fixed, tmp_path / bug.package / bug.file)
    # Where the check finds the upstream files: a copy of the installed trees with the fix applied.
    monkeypatch.setattr(known_bugs, "installed_file", lambda relative, package: tmp_path / package / relative)
    assert bug.detect().status == "fixed"
    job = add_job(script(), local(), [StragglerDetectionPlugin(), InProcessRestartPlugin()])
    assert any("inprocess_restart.enabled=true" in a for a in job.task.args)


# ----------------------------------------------------------------------------- #5187: warn (in-process adapter)


@pytest.mark.parametrize("make_task", [script, partial_task], ids=["script", "partial"])
def test_5187_in_process_restart_warns_what_the_missing_call_wrapper_costs(make_task, bug_log):
    add_job(make_task(), local(), [InProcessRestartPlugin()])
    (message,) = bug_warnings(bug_log, 5187)
    assert message.startswith("InProcessRestartPlugin: known Megatron Bridge bug Megatron-Bridge#5187")
    assert "per-attempt store" in message and "PrefixStore" in message
    assert "Workaround: add FaultTolerancePlugin" in message


def test_5187_no_warning_when_in_process_restart_is_off(bug_log):
    add_job(script(), local(), [InProcessRestartPlugin(enabled=False)])
    assert bug_warnings(bug_log, 5187) == []


# ------------------------------------------------------------------------------------------ doctor / explain


def test_doctor_has_a_line_per_applicable_known_bug():
    job = add_job(script(), local(), [FaultTolerancePlugin(), InProcessRestartPlugin()])
    checks = {c.name: c for c in check_job(job.task, job.executor, [FaultTolerancePlugin(), InProcessRestartPlugin()])}
    assert checks["known bug Megatron-Bridge#5711"].verdict == "warn"
    assert checks["known bug Megatron-Bridge#5187"].verdict == "warn"
    assert "Workaround: FaultTolerancePlugin(calc_ft_timeouts=False)" in checks["known bug Megatron-Bridge#5711"].detail
    assert "known bug Megatron-Bridge#5761" not in checks  # no straggler detection here
    job = add_job(script(), local(), [FaultTolerancePlugin(calc_ft_timeouts=False)])
    assert not [c for c in check_job(job.task, job.executor, []) if c.name.startswith("known bug")]


def test_explain_shows_the_known_bugs_on_the_path():
    result = explain([InProcessRestartPlugin()], script(), local(), executor_kind="local")
    assert len(result.known_bugs) == 2
    assert result.known_bugs[0].startswith("warn: Megatron-Bridge#5187")
    assert result.known_bugs[1].startswith("deprecated: NVRx deprecates in-process restart")
    assert "megatron/bridge/training/inprocess_restart.py" in result.known_bugs[0]
    assert result.to_json()["known_bugs"] == result.known_bugs


# ------------------------------------------------------------- #5922: warn (local saves + a planned exit)


def _local_plugin():
    from nemo_resiliency_plugins import LocalCheckpointPlugin

    return LocalCheckpointPlugin(non_persistent_local_ckpt_dir="/local/ckpt", non_persistent_save_interval=10)


@pytest.mark.parametrize("exit_arg", ["train.exit_interval=50", "train.exit_duration_in_mins=230"])
def test_5922_local_saves_with_a_planned_exit_warn_with_the_cost(exit_arg, bug_log):
    add_job(script("checkpoint.save_interval=100", exit_arg), local(), [_local_plugin()])
    (message,) = bug_warnings(bug_log, 5922)
    assert message.startswith("LocalCheckpointPlugin: known Megatron Bridge bug Megatron-Bridge#5922")
    assert "skip their persistent save" in message and "previous persistent checkpoint" in message
    assert "train.exit_interval a multiple of checkpoint.save_interval" in message


def test_5922_a_straggler_stop_with_local_saves_warns_and_neither_alone_does(bug_log):
    add_job(script("checkpoint.save_interval=100"), local(), [_local_plugin()])
    add_job(script(), local(), [StragglerDetectionPlugin(stop_if_detected=True)])
    assert bug_warnings(bug_log, 5922) == []
    add_job(
        script("checkpoint.save_interval=100"),
        local(),
        [_local_plugin(), StragglerDetectionPlugin(stop_if_detected=True)],
    )
    assert bug_warnings(bug_log, 5922), bug_log.messages
    assert all("NVRx straggler stop skip their persistent save" in m for m in bug_warnings(bug_log, 5922))
