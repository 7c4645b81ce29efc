"""`nemo-resiliency plan`'s formulas, each against a value computed by hand (the arithmetic is in the comments)."""

from __future__ import annotations

import dataclasses
import math

import pytest

from nemo_resiliency_plugins import FaultTolerancePlugin, PreemptionPlugin
from nemo_resiliency_plugins.errors import ResiliencyConfigError
from nemo_resiliency_plugins.recipes import get_recipe
from nemo_resiliency_plugins.tools.planning import failures as fm
from nemo_resiliency_plugins.tools.planning.mechanisms import from_plugins, megatron_bridge_defaults, our_defaults
from nemo_resiliency_plugins.tools.planning.optimum import (
    daly_interval,
    reserve_nodes,
    restart_budget,
    section_timeouts,
    young_interval,
)
from nemo_resiliency_plugins.tools.planning.plan import flags
from nemo_resiliency_plugins.tools.planning.recovery import (
    MechanismSet,
    RunParams,
    attempt_cycle_goodput,
    fault_costs,
    goodput_closed_form,
    hang_detect_s,
    training_rate,
)


def one_class(rate_per_s: float, cls: str = "dead_process") -> fm.FailureModel:
    """One GPU with ``rate_per_s`` faults of one class per second (per GPU-hour = rate x 3600)."""
    return fm.FailureModel(name="one", per_gpu_hour={cls: rate_per_s * 3600.0}, source="test")


def test_young_and_daly():
    assert young_interval(60, 10_000) == pytest.approx(1095.445, abs=1e-3)  # sqrt(2 x 60 x 10,000)
    assert daly_interval(60, 10_000) == pytest.approx(1035.445, abs=1e-3)  # sqrt(1.2e6) - 60
    assert daly_interval(500, 200) == 200  # saving costs more than 2 MTBF: once per MTBF
    with pytest.raises(ResiliencyConfigError, match="MTBF"):
        young_interval(60, 0)


def test_section_timeouts_are_five_times_the_healthy_time_with_a_floor():
    t = section_timeouts(step_s=2, save_s=60, startup_s=360)
    assert (t.step, t.checkpointing, t.setup, t.out_of_section) == (10, 300, 1800, 60)
    assert t.check_interval == 2  # step timeout / 5
    t = section_timeouts(step_s=0.5, save_s=10, startup_s=100)
    assert t.step == 10 and t.check_interval == 2  # 5 x 0.5 = 2.5 -> floor 10 s
    assert section_timeouts(step_s=60, save_s=10, startup_s=100).check_interval == 5  # capped at NVRx's 5 s


def test_restart_budget_and_reserve():
    assert restart_budget(419, job_retries=2) == 139  # ceil(419 / 3) - 1: the pool 140 x 3 = 420 >= 419
    assert restart_budget(0) == 3  # never below Megatron Bridge's 3
    assert restart_budget(20, job_retries=4) == 3  # ceil(20 / 5) - 1 = 3
    assert restart_budget(30, job_retries=4) == 5  # ceil(30 / 5) - 1 = 5
    # Poisson(1): P(<=3) = 0.981, P(<=4) = 0.996 -> 4 spare nodes cover 99 %.
    assert reserve_nodes(1.0 / 86400.0, repair_s=86400.0) == 4
    assert reserve_nodes(0.0) == 0
    # Above a mean of 50 the normal approximation: 100 + 2.326 x 10 = 123.26 -> 124 (terms would underflow).
    assert reserve_nodes(100 / 86400.0, repair_s=86400.0) == 124
    assert reserve_nodes(1e6 / 86400.0, repair_s=86400.0) == 1_002_326


def test_llama3_profile_reproduces_the_published_counts():
    model = fm.llama3()
    gpu_hours = 16_384 * 54 * 24
    counts = {c: r * gpu_hours for c, r in model.per_gpu_hour.items()}
    assert sum(counts.values()) == pytest.approx(466)
    assert counts["preemption"] == pytest.approx(47)
    assert counts["node_loss"] == pytest.approx(419 * (0.301 + 0.172))
    assert counts["hang"] == pytest.approx(419 * 0.084)
    assert model.cluster_rates(16_384)["hang"] == pytest.approx(419 * 0.084 / (54 * 86400))
    assert "arXiv:2407.21783" in model.source


def test_hang_detection_and_fault_costs():
    params = RunParams(gpus=8, step_time_s=2, save_time_s=60, restart_s=300, requeue_s=900)
    mech = MechanismSet(name="t", step_timeout_s=30, check_interval_s=5, preemption_handled=True)
    assert hang_detect_s(mech) == 32.5  # 30 + 5 / 2
    assert hang_detect_s(dataclasses.replace(mech, step_timeout_s=None)) == 600  # NCCL watchdog, 10 minutes
    costs = fault_costs(params, mech)
    assert costs["dead_process"].restart_s == 360  # restart 300 + load (= save) 60
    assert costs["node_loss"].restart_s == 1260  # no spare node: requeue 900 + 360
    # a spare node: the measured replacement (1.17 in-place restarts) instead of the requeue
    spare = fault_costs(params, dataclasses.replace(mech, warm_reserve_nodes=1))["node_loss"]
    assert spare.restart_s == pytest.approx(1.17 * 360)
    assert costs["preemption"].redo_from == "none" and not costs["preemption"].uses_budget


def test_closed_form_goodput_by_hand():
    # One GPU, dead processes at 1e-4/s. Save 10 s every 100 s: r = 1 / 1.1. Cost of a fault: detect 0
    # (check interval 0) + restart 90 + load 10 + redo 50 = 150; no person (human 0).
    params = RunParams(gpus=1, step_time_s=1, save_time_s=10, restart_s=90, human_s=0)
    mech = MechanismSet(name="t", step_timeout_s=10, check_interval_s=0)
    assert training_rate(params, 100, None) == pytest.approx(1 / 1.1)
    expected = (1 / 1.1) / (1 + 1e-4 * 150)  # 0.895656
    assert goodput_closed_form(params, mech, one_class(1e-4), 100) == pytest.approx(expected, rel=1e-9)
    assert expected == pytest.approx(0.895656, abs=1e-6)
    # Async: the save blocks one step (1 s) but is usable 10 s later: r = 1 / 1.01, redo 50 + 10.
    params = dataclasses.replace(params, async_save=True)
    expected = (1 / 1.01) / (1 + 1e-4 * 160)
    assert goodput_closed_form(params, mech, one_class(1e-4), 100) == pytest.approx(expected, rel=1e-9)
    # A warm reserve is paid for in GPUs held: 8 GPUs + 1 spare node of 8 halves it.
    reserve = dataclasses.replace(mech, warm_reserve_nodes=1)
    params8 = RunParams(gpus=8, step_time_s=1, save_time_s=10, restart_s=90, human_s=0)
    no_faults = one_class(0.0)
    assert goodput_closed_form(params8, reserve, no_faults, 100) == pytest.approx(0.5 / 1.1)


def test_megatron_bridge_crash_loop_by_hand():
    mb = megatron_bridge_defaults()
    params = RunParams(gpus=1, step_time_s=1, save_time_s=60, restart_s=300, human_s=3600)
    no_faults = one_class(0.0)
    # Attempt: restart 300 + load 60 + 600 of training + the save 60 = 1020 s <= 1800; pool (3+1)(2+1) = 12,
    # so a person's hour adds 300 s per attempt: 600 / 1320.
    assert attempt_cycle_goodput(params, mb, 600, no_faults) == pytest.approx(600 / 1320)
    # 1500 s of training: 1920 s > the 1800 s heartbeat kill, no save ever completes.
    assert goodput_closed_form(params, mb, no_faults, 1500) == 0.0
    # With faults at 1e-4/s: survive exp(-0.102); cycle (1 - s) / lambda + (1 - s) x extra + 300, extra = the
    # dead process's detection 2.5 s (check interval 5 / 2) + its restart 360 - 360.
    s = math.exp(-1e-4 * 1020)
    expected = 600 * s / ((1 - s) / 1e-4 + (1 - s) * 2.5 + 300)
    assert attempt_cycle_goodput(params, mb, 600, one_class(1e-4)) == pytest.approx(expected)


def test_failure_rate_parsing():
    model = fm.parse_failure_rate("hang=1e-6,dead_process=2e-6")
    assert model.per_gpu_hour["hang"] == 1e-6 and model.per_gpu_hour["node_loss"] == 0
    split = fm.parse_failure_rate("2e-5")
    assert split.total_per_gpu_hour() == pytest.approx(2e-5)
    assert split.shares() == pytest.approx(fm.llama3().shares())
    for bad in ("bogus", "hang=1e-6,hang=2e-6", "hang=-1", "nope=1", "0", "-3", "inf", "hang=0", "hang=1e-6;x"):
        with pytest.raises(ResiliencyConfigError, match="--failure-rate|fault class|hang"):
            fm.parse_failure_rate(bad)


def test_bad_run_params_name_the_field():
    for field, value in (("gpus", 0), ("step_time_s", float("nan")), ("save_time_s", -1), ("days", 0)):
        with pytest.raises(ResiliencyConfigError, match=field):
            RunParams(**{"gpus": 8, "step_time_s": 1, "save_time_s": 1} | {field: value})
    with pytest.raises(ResiliencyConfigError, match="in_job_restarts"):
        MechanismSet(name="t", step_timeout_s=1, in_job_restarts=-1)


def test_our_defaults_match_the_recipe_read_through_the_plugins():
    """`plan` without --plugins does not import NeMo-Run: its description must equal the real recipe's."""
    for save in (60.0, 500.0):
        params = RunParams(gpus=64, step_time_s=3, save_time_s=save)
        real = from_plugins(get_recipe("slurm-pretraining"), params, name="x")
        mine = our_defaults(params)
        assert dataclasses.replace(mine, name="x", notes=()) == dataclasses.replace(real, notes=())


def test_a_180_s_step_timeout_on_a_2_s_step_is_flagged_as_90_steps_a_hang():
    params = RunParams(gpus=16_384, step_time_s=2, save_time_s=60, days=54)
    plugins = [FaultTolerancePlugin(calc_ft_timeouts=False), PreemptionPlugin()]
    yours = from_plugins(plugins, params)
    assert yours.step_timeout_s == 180 and yours.preemption_handled
    from nemo_resiliency_plugins.tools.planning.mechanisms import recommended

    rec, details = recommended(params, fm.llama3(), 600, None)
    found = {f.setting: f for f in flags(params, fm.llama3(), yours, rec, details, None, None)}
    assert "each hang costs 91 steps" in found["section_timeouts['step']"].why  # (180 + 5 / 2) / 2 = 91.25
    assert found["section_timeouts['step']"].recommended == "10 s"
    assert "PreemptionPlugin" not in found
    # Computed timeouts (the recipe's calc_ft_timeouts=True) bring it to 5 x 2 s: not flagged.
    computed = from_plugins([FaultTolerancePlugin(), PreemptionPlugin()], params)
    assert "section_timeouts['step']" not in {
        f.setting for f in flags(params, fm.llama3(), computed, rec, details, None, None)
    }


def test_a_checkpointing_timeout_shorter_than_the_save_means_nothing_is_kept():
    params = RunParams(gpus=8, step_time_s=2, save_time_s=600)
    mech = from_plugins([FaultTolerancePlugin()], params)  # checkpointing timeout 420 s < 600 s
    assert not mech.saves_complete
    assert goodput_closed_form(params, mech, fm.llama3(), 1000) == 0.0
