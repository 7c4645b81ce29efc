"""The ft_launcher command our plugin produces, read by NVRx 0.7.0's own argument parser and config code."""

from __future__ import annotations

import nemo_run as run
import pytest

from nemo_resiliency_plugins import FaultTolerancePlugin
from tests.helpers import add_job, launch_command

pytestmark = pytest.mark.contract


def nvrx_config(args: list[str], env: dict[str, str], monkeypatch):
    """Parse the launcher args as ft_launcher does; env fallbacks (PET_*) are read when the parser is built."""
    from nvidia_resiliency_ext.fault_tolerance import launcher
    from nvidia_resiliency_ext.fault_tolerance.config import FaultToleranceConfig

    for name, value in env.items():
        if name.startswith("PET_"):
            monkeypatch.setenv(name, value)
    parsed = launcher.get_args_parser().parse_args(args)
    return parsed, FaultToleranceConfig.from_args(parsed)


@pytest.mark.parametrize("restarts", [0, 3])
def test_sections_reach_the_rank_monitor_and_heartbeats_do_not(restarts, monkeypatch):
    plugin = FaultTolerancePlugin(
        num_in_job_restarts=restarts,
        section_timeouts={"setup": 60, "step": 7.5, "checkpointing": 30},
        out_of_section_timeout=45,
        workload_check_interval=2,
        rank_termination_signal="SIGTERM",
        log_level="DEBUG",
        max_no_progress_cycles=5,
    )
    job = add_job(run.Script(path="/tmp/train.py", entrypoint="python"), run.LocalExecutor(ntasks_per_node=2), [plugin])
    entrypoint, args, env = launch_command(job)
    assert entrypoint == "ft_launcher"
    parsed, cfg = nvrx_config(args, env, monkeypatch)
    assert parsed.max_restarts == restarts
    assert dict(cfg.rank_section_timeouts) == {"setup": 60.0, "step": 7.5, "checkpointing": 30.0}
    assert cfg.rank_out_of_section_timeout == 45.0
    assert cfg.initial_rank_heartbeat_timeout is None and cfg.rank_heartbeat_timeout is None
    assert cfg.workload_check_interval == 2.0
    assert cfg.rank_termination_signal.name == "SIGTERM"
    assert cfg.log_level == 10
    assert cfg.max_no_progress_cycles == 5


def test_heartbeat_style_reaches_nvrx_as_heartbeats(monkeypatch):
    plugin = FaultTolerancePlugin(
        workload_style="heartbeats", initial_rank_heartbeat_timeout=90, rank_heartbeat_timeout=15
    )
    job = add_job(run.Script(path="/tmp/train.py", entrypoint="python"), run.LocalExecutor(ntasks_per_node=2), [plugin])
    _, args, env = launch_command(job)
    _, cfg = nvrx_config(args, env, monkeypatch)
    assert (cfg.initial_rank_heartbeat_timeout, cfg.rank_heartbeat_timeout) == (90.0, 15.0)
    assert dict(cfg.rank_section_timeouts) == {}


def test_nemo_runs_fallback_flag_is_rejected_by_nvrx_so_we_never_emit_it():
    """The trap: NeMo-Run emits --ignore-missing-fault-tol-cfg when no FT field is set; NVRx >= 0.5 rejects it."""
    from nvidia_resiliency_ext.fault_tolerance import launcher

    with pytest.raises(SystemExit):
        launcher.get_args_parser().parse_args(["--ignore-missing-fault-tol-cfg", "train.py"])
