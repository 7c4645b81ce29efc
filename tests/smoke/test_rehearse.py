"""``rehearse`` as a user drives it: a good recipe survives every fault, and each planted bad setting is
reported as the failure it is. Real runs (NeMo-Run LocalExecutor, ft_launcher, gloo ranks, Megatron Bridge's
hooks); one fault-free baseline of the good recipe is reused by the cases that change no launcher setting the
baseline would exercise differently.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from nemo_resiliency_plugins import FaultTolerancePlugin, PreemptionPlugin
from nemo_resiliency_plugins.recipes import get_recipe
from nemo_resiliency_plugins.testing.pytest_plugin import assert_rehearsal_ok, rehearsal  # noqa: F401
from nemo_resiliency_plugins.tools.rehearse import FAULT_STEP, SAVE_INTERVAL, TARGET_STEP_TIMEOUT_S, rehearse
from nemo_resiliency_plugins.tools.rehearse.adapt import POLL_S, STEPS
from nemo_resiliency_plugins.tools.report import report_job
from tests.helpers import assert_ended_by_kill

TEE_POLL_S = 0.1  # torchx.schedulers.streams.Tee sleeps this long when no stream has new bytes

RESUME_STEP = FAULT_STEP // SAVE_INTERVAL * SAVE_INTERVAL


def cli(*args: str, cwd) -> subprocess.CompletedProcess:
    exe = os.path.join(os.path.dirname(sys.executable), "nemo-resiliency")
    env = dict(os.environ, COLUMNS="200")
    return subprocess.run([exe, "rehearse", *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=900)


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    """The local-smoke recipe with the default faults (kill, hang): baseline + two faulty runs."""
    return rehearse("local-smoke", workdir=tmp_path_factory.mktemp("rehearse-good"))


def test_good_recipe_recovers_from_kill_and_hang_with_nothing_lost(good, record_property):
    record_property("rehearsal_wall_s_default_faults", good.wall_s)
    assert good.ok, good.reasons
    assert good.baseline.state == "SUCCEEDED"
    kill, hang = good.faults
    assert (kill.fault, hang.fault) == ("kill", "hang")
    assert kill.detected_by.startswith("dead rank"), kill.detected_by
    assert hang.detected_by.startswith("section timeout 'step'"), hang.detected_by
    # Scaled: local-smoke's 10 s step timeout became TARGET_STEP_TIMEOUT_S, and the report says so.
    assert any(f"step timeout -> {TARGET_STEP_TIMEOUT_S:g} s" in line for line in good.scaled), good.scaled
    # NVRx's own figure, from its own clock, has no measurement error: the step section was open for the timeout.
    open_s = float(re.search(r"open ([0-9.]+) s", hang.detected_by).group(1))
    assert TARGET_STEP_TIMEOUT_S <= open_s <= hang.deadline_s, hang.detected_by
    # detect_s is the gap between two log lines as the rehearsal's watch saw them (tools/rehearse/watch.py): each
    # is stamped when a poll (every POLL_S) finds it in combined.log, which torchx's Tee fills from the ranks'
    # pipes every TEE_POLL_S. The injection line, printed just after the section opened, can be stamped late by a
    # poll plus a Tee pass while the detection line is stamped at once, so the gap reads short by up to
    # POLL_S + TEE_POLL_S; one more POLL_S covers a poll that a loaded machine runs late (the watch shares the GIL
    # with NeMo-Run's threads). Seen in CI: 4.84 s for a 5 s timeout (NVRx: "open 5.04 s").
    margin_s = 2 * POLL_S + TEE_POLL_S
    assert TARGET_STEP_TIMEOUT_S - margin_s <= hang.detect_s <= hang.deadline_s, (hang.detect_s, hang.detected_by)
    assert 0 <= kill.detect_s <= kill.deadline_s
    for fault in (kill, hang):
        assert fault.final_state == "SUCCEEDED"
        assert fault.resumed_from == RESUME_STEP
        assert fault.params_equal is True
        assert fault.recover_s >= fault.detect_s
    assert not [link for link in good.chain if link["verdict"] == "FAIL"]
    assert any("calc_ft_timeouts" in line for line in good.not_exercised)


def test_report_of_each_rehearsal_run(good):
    """`nemo-resiliency report` (issue 36) on the rehearsal's own runs (NeMo-Run experiments under its workdir): the
    baseline's one cycle to the end; each fault's cycle ended by what the rehearsal saw detect it, then the resume
    from the checkpoint before the fault and the finish."""
    (base,) = report_job(good.baseline.job_dir).rows
    assert (base.injected, base.detected_by, base.finished_step) == ([], None, STEPS)
    kill, hang = good.faults
    for fault in (kill, hang):
        job = report_job(fault.run.job_dir)
        assert (job.restarts, job.finished) == (1, True), fault.fault
        faulty, resumed = job.rows
        assert faulty.injected == [f"{fault.fault} at step {FAULT_STEP} on rank 1"]  # the last of 2 ranks
        if fault is kill:
            assert_ended_by_kill(faulty, rank=1)
        else:
            assert faulty.detected_by.startswith("section 'step' timeout"), faulty.detected_by
        assert (resumed.resumed_from, resumed.finished_step) == (RESUME_STEP, STEPS)
        assert job.iterations() == (STEPS, FAULT_STEP - RESUME_STEP)  # a fault at step N strikes after iteration N
    # NVRx's own figure, as the rehearsal read it and as the report reads it
    open_s = float(re.search(r"open ([0-9.]+) s", hang.detected_by).group(1))
    assert report_job(hang.run.job_dir).rows[0].open_s == open_s


def test_heartbeat_timeouts_on_a_section_workload_kill_the_healthy_baseline(tmp_path):
    """Through the CLI, as CI would run it: the healthy baseline is killed, so the command fails."""
    done = cli(
        "local-smoke",
        "--faults",
        "kill",
        "--set",
        "FaultTolerancePlugin.workload_style=heartbeats",
        "--set",
        "FaultTolerancePlugin.initial_rank_heartbeat_timeout=1",
        "--set",
        "FaultTolerancePlugin.rank_heartbeat_timeout=1",
        "--set",
        "FaultTolerancePlugin.calc_ft_timeouts=false",
        "--workdir",
        str(tmp_path / "work"),
        "--json",
        cwd=tmp_path,
    )
    assert done.returncode == 1, done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert report["ok"] is False
    killed = [r for r in report["reasons"] if "healthy fault-free baseline was killed" in r]
    assert killed and "heartbeat timeout" in killed[0], report["reasons"]
    assert any("sends no heartbeats" in r for r in report["reasons"])
    assert report["faults"][0]["final_state"] == "not run"


def test_undeclared_step_section_leaves_a_hang_undetected(good, rehearsal):  # noqa: F811
    plugins = [
        FaultTolerancePlugin(
            section_timeouts={"setup": 120, "checkpointing": 60},
            calc_ft_timeouts=False,
            workload_check_interval=1,
            num_in_job_restarts=1,
            num_job_retries_on_failure=0,
        )
    ]
    report = rehearsal(plugins, faults=("hang",), baseline_from=good)
    assert not report.ok
    (hang,) = report.faults
    assert hang.injected and not hang.detected, hang.detected_by
    assert hang.run.stopped_by_rehearsal, "the rehearsal must end an undetected hang at its deadline"
    assert hang.final_state != "SUCCEEDED"
    assert any("not detected within" in r for r in report.reasons), report.reasons
    assert any("no 'step' section timeout is declared" in r for r in report.reasons), report.reasons
    # `nemo-resiliency report` (issue 36) on the run the rehearsal stopped: the hang injected, the job unfinished.
    job = report_job(hang.run.job_dir)
    assert job.rows[0].injected == [f"hang at step {FAULT_STEP} on rank 1"], job.rows
    assert not job.finished, job.rows


def test_inprocess_timeouts_in_the_wrong_order_are_refused_before_anything_runs(tmp_path):
    """A --set the plugin refuses is a bad argument: one line naming it, exit 2, no run (tests/cli/test_cli_errors.py
    holds every other bad argument; this one goes through the installed command and a recipe with two plugins)."""
    done = cli(
        "inprocess-restart",
        "--set",
        "InProcessRestartPlugin.soft_timeout=120",
        "--set",
        "InProcessRestartPlugin.hard_timeout=60",
        "--json",
        cwd=tmp_path,
    )
    assert done.returncode == 2, done.stdout[-3000:] + done.stderr[-3000:]
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("nemo-resiliency rehearse: error: "), line
    assert "InProcessRestartPlugin.soft_timeout" in line and "hard_timeout" in line, line
    assert "baseline" not in done.stdout + done.stderr and "Traceback" not in done.stderr


def test_preempt_time_shorter_than_a_save_fails_the_timeout_chain(good):
    plugins = [PreemptionPlugin(preempt_time=30), *get_recipe("local-smoke")]
    # 45 s: the checkpoint save time measured on the user's cluster (a toy save here takes milliseconds). It fits
    # in local-smoke's 60 s checkpointing timeout, not in a 30 s preemption warning.
    report = rehearse(plugins, faults=(), save_time_s=45, baseline_from=good)
    assert not report.ok
    failed = [link for link in report.chain if link["verdict"] == "FAIL"]
    assert [link["name"] for link in failed] == ["preempt_time > one step + one save"], report.chain
    assert any(r.startswith("timeout chain FAIL: preempt_time") for r in report.reasons), report.reasons
    assert any("--signal=B:TERM@30" in line for line in report.not_exercised)


def test_assert_rehearsal_ok_fails_with_the_reasons_and_passes_a_good_set(good):
    from nemo_resiliency_plugins.inprocess_restart import InProcessRestartPlugin

    with pytest.raises(AssertionError, match="soft_timeout"):
        assert_rehearsal_ok(lambda: [InProcessRestartPlugin(soft_timeout=120, hard_timeout=60)])
    report = assert_rehearsal_ok("local-smoke", faults=(), save_time_s=10, baseline_from=good)
    assert report.ok and report.save_time_s == 10
