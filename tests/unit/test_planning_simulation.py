"""The Monte Carlo of ``plan``: exact where the run is deterministic, in agreement with the closed form where
both apply, reproducible from its seed, and the Llama 3 validation."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from nemo_resiliency_plugins.tools.planning import failures as fm
from nemo_resiliency_plugins.tools.planning.mechanisms import megatron_bridge_defaults, our_defaults, recommended
from nemo_resiliency_plugins.tools.planning.optimum import optimal_local_interval, optimal_persistent_interval
from nemo_resiliency_plugins.tools.planning.plan import plan
from nemo_resiliency_plugins.tools.planning.recovery import (
    RunParams,
    fault_costs,
    goodput_closed_form,
    redo_s,
)
from nemo_resiliency_plugins.tools.planning.simulate import simulate

# "Published-style" parameters for Llama 3 405B's run (the report gives none of these; each is an assumption
# the README states): a 6 s step, 60 s async persistent saves blocking training for one step, 5 minutes from a
# restart to training, a checkpoint load as long as a save.
LLAMA3 = RunParams(gpus=16_384, step_time_s=6, save_time_s=60, days=54, async_save=True, restart_s=300)


def first_order_loss(params, mech, failures, interval, local_s=None):
    """sum_c lambda_c L_c: the closed form's expansion parameter."""
    lam = failures.cluster_rates(params.gpus)
    costs = fault_costs(params, mech)
    return sum(
        lam[c] * (k.detect_s + k.restart_s + redo_s(params, k.redo_from, interval, local_s)) for c, k in costs.items()
    )


def test_without_faults_the_simulation_is_exact():
    params = RunParams(gpus=64, step_time_s=2, save_time_s=30, days=2)
    none = fm.FailureModel(name="none", per_gpu_hour={}, source="test")
    mech, _ = recommended(params, fm.llama3(), 600, None)
    sim = simulate(params, mech, none, [300, 600], replicas=3, seed=1)
    assert sim.goodput == pytest.approx(np.array([[1 / 1.1] * 3, [1 / 1.05] * 3]))  # r = 1 / (1 + 30 / interval)
    # Megatron Bridge's crash loop without faults: attempts of 300 + 30 + 600 + 30 = 960 s, each keeping 600 s,
    # and a person's hour every 12 attempts; the run's last partial attempt makes the difference.
    mb = megatron_bridge_defaults()
    sim = simulate(params, mb, none, [600], replicas=2, seed=1)
    assert sim.goodput == pytest.approx(goodput_closed_form(params, mb, none, 600), abs=0.01)


def test_the_simulation_is_reproducible_from_its_seed():
    mech, _ = recommended(LLAMA3, fm.llama3(), 360, None)
    a = simulate(LLAMA3, mech, fm.llama3(), [360, 1000], replicas=20, seed=7)
    b = simulate(LLAMA3, mech, fm.llama3(), [360, 1000], replicas=20, seed=7)
    c = simulate(LLAMA3, mech, fm.llama3(), [360, 1000], replicas=20, seed=8)
    assert np.array_equal(a.goodput, b.goodput) and not np.array_equal(a.goodput, c.goodput)


@pytest.mark.parametrize(
    ("params", "rate_scale"),
    [
        (LLAMA3, 1.0),  # Llama 3 itself: lambda L ~ 0.1
        (dataclasses.replace(LLAMA3, gpus=2048, days=30), 1.0),  # lambda L ~ 0.01
        (dataclasses.replace(LLAMA3, async_save=False, local_save_time_s=None), 3.0),  # three times the faults
        (dataclasses.replace(LLAMA3, local_save_time_s=5), 1.0),  # local checkpoints too
    ],
)
def test_monte_carlo_agrees_with_the_closed_form_where_both_apply(params, rate_scale):
    """Tolerance: the closed form is first order in the fault rate (Young/Daly): it leaves out a fault during a
    recovery, a fault before the first checkpoint of an attempt, the restarts of the fault clock. Those are
    O((lambda L)^2) of the wall time, with lambda L the fraction of wall time the faults cost; the simulation
    adds its sampling error (4 standard errors: a false alarm once in ~16,000 runs). Both at intervals well
    below the MTBF (the closed form's domain)."""
    failures = fm.llama3()
    failures = dataclasses.replace(failures, per_gpu_hour={c: r * rate_scale for c, r in failures.per_gpu_hour.items()})
    mech, _ = recommended(params, failures, 600, None)
    best = optimal_persistent_interval(params, failures, mech)
    local = optimal_local_interval(params, failures, mech)
    assert (local is not None) == (params.local_save_time_s is not None)
    intervals = [best / 2, best, best * 2]
    sim = simulate(params, mech, failures, intervals, local_s=local, replicas=200, seed=3)
    for interval, mean, err in zip(intervals, sim.mean(), sim.stderr(), strict=True):
        closed = goodput_closed_form(params, mech, failures, interval, local)
        tolerance = first_order_loss(params, mech, failures, interval, local) ** 2 + 4 * err
        assert abs(mean - closed) <= tolerance, (interval, mean, closed, tolerance)


def test_llama3_validation_effective_training_time_in_the_published_range():
    """The Llama 3 report: more than 90 % effective training time over the 54 days. With the profile and the
    published-style parameters above, the recommended set lands in (0.90, 1.0]. Assumptions it needed (README,
    measured with this model): async saves (synchronous 60 s saves: 0.854); a lost node back in training about
    as fast as an in-place restart (1.17 x, measured), from a warm reserve (a 15-minute requeue per node loss
    instead: 0.884); 5 minutes from a restart to training (10 minutes: 0.886)."""
    report = plan(LLAMA3, fm.llama3(), our_defaults(LLAMA3), seed=0)
    rec = report.sets[2]
    assert rec.mechanism.name == "recommended" and rec.mechanism.warm_reserve_nodes > 0
    assert 0.90 < rec.simulated <= 1.0, rec.simulated
    assert 0.90 < rec.closed_form <= 1.0, rec.closed_form
    assert sum(report.faults_expected.values()) == pytest.approx(466)
    # The simulated best interval is within a grid step of Daly's.
    assert math.isclose(report.simulated_best_s, report.daly_s, rel_tol=0.3)
    # Megatron Bridge's defaults as they behave: far below.
    assert report.sets[0].simulated < 0.6
    assert report.sets[1].simulated < rec.simulated
    assert report.wall_s > 0


def test_an_absurd_failure_rate_is_simulated_over_a_bounded_horizon():
    """A fault every 0.2 s on 16,384 GPUs: no attempt ever gets through its start-up. The plan still finishes
    (1,000 renewal cycles per simulated run, not 19 million faults) and says which part of the run it played."""
    params = dataclasses.replace(LLAMA3, async_save=False)
    report = plan(params, fm.parse_failure_rate("1"), our_defaults(params))
    assert all(s.simulated < 1e-4 and s.closed_form < 1e-4 for s in report.sets)  # the first attempt: ~0.2 s
    assert any(note.startswith("simulated the first") for note in report.notes)
    assert sum(report.faults_expected.values()) == pytest.approx(16_384 * 54 * 24)


def test_a_small_run_with_few_faults_keeps_megatron_bridges_restart_floor():
    params = RunParams(gpus=8, step_time_s=0.5, save_time_s=5, days=1, local_save_time_s=1)
    report = plan(params, fm.parse_failure_rate("1e-3"), our_defaults(params), save_interval_s=100)
    assert report.recommendation["num_in_job_restarts"] == 3
    assert report.local_interval_s is not None and report.local_interval_s < report.daly_s
    assert "RerunStateMachinePlugin" not in {f.setting for f in report.flags}  # 0.03 expected: not worth a flag
    assert "checkpoint.save_interval" in {f.setting for f in report.flags}  # 100 s vs ~54 minutes
