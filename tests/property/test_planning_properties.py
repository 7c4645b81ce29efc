"""Properties every plan must have, over random runs: goodput is a fraction, and it moves the way the world
does (more faults, slower restarts, later detection: never more goodput)."""

from __future__ import annotations

import dataclasses

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from nemo_resiliency_plugins.tools.planning.failures import FAULT_CLASSES, FailureModel
from nemo_resiliency_plugins.tools.planning.mechanisms import megatron_bridge_defaults
from nemo_resiliency_plugins.tools.planning.recovery import MechanismSet, RunParams, goodput_closed_form
from nemo_resiliency_plugins.tools.planning.simulate import simulate

seconds = st.floats(min_value=0.05, max_value=5000, allow_nan=False)
rates = st.floats(min_value=0.0, max_value=1e-3, allow_nan=False)

params_st = st.builds(
    RunParams,
    gpus=st.integers(min_value=1, max_value=100_000),
    step_time_s=seconds,
    save_time_s=seconds,
    days=st.floats(min_value=0.01, max_value=3),
    async_save=st.booleans(),
    local_save_time_s=st.none() | seconds,
    restart_s=seconds,
)
failures_st = st.builds(
    lambda values: FailureModel(name="h", per_gpu_hour=dict(zip(FAULT_CLASSES, values, strict=True)), source="h"),
    st.lists(rates, min_size=len(FAULT_CLASSES), max_size=len(FAULT_CLASSES)),
)
mech_st = st.builds(
    MechanismSet,
    name=st.just("h"),
    step_timeout_s=st.none() | seconds,
    check_interval_s=st.floats(min_value=0, max_value=60),
    in_job_restarts=st.integers(0, 200),
    job_retries=st.integers(0, 5),
    preemption_handled=st.booleans(),
    sdc_check=st.booleans(),
    warm_reserve_nodes=st.integers(0, 4),
    local_checkpoints=st.booleans(),
    launcher_restarts=st.booleans(),
)
interval_st = st.floats(min_value=1, max_value=1e5)


@settings(max_examples=80, deadline=None)
@given(params_st, failures_st, mech_st, interval_st, st.none() | interval_st)
def test_closed_form_goodput_is_a_fraction(params, failures, mech, interval, local):
    for m in (mech, megatron_bridge_defaults()):
        assert 0.0 <= goodput_closed_form(params, m, failures, interval, local) <= 1.0


@settings(max_examples=80, deadline=None)
@given(params_st, failures_st, mech_st, interval_st, st.floats(min_value=1.0, max_value=100.0))
def test_more_failures_never_raise_goodput(params, failures, mech, interval, factor):
    worse = dataclasses.replace(failures, per_gpu_hour={c: r * factor for c, r in failures.per_gpu_hour.items()})
    for m in (mech, megatron_bridge_defaults()):
        # (+1e-12: the same goodput computed along two paths may differ in its last bits)
        assert (
            goodput_closed_form(params, m, worse, interval)
            <= goodput_closed_form(params, m, failures, interval) + 1e-12
        )


@settings(max_examples=80, deadline=None)
@given(params_st, failures_st, mech_st, interval_st, st.floats(min_value=1.0, max_value=100.0))
def test_slower_recovery_never_raises_goodput(params, failures, mech, interval, factor):
    base = goodput_closed_form(params, mech, failures, interval)
    slower_restart = dataclasses.replace(params, restart_s=params.restart_s * factor)
    assert goodput_closed_form(slower_restart, mech, failures, interval) <= base
    if mech.step_timeout_s is not None:
        later = dataclasses.replace(mech, step_timeout_s=mech.step_timeout_s * factor)
        assert goodput_closed_form(params, later, failures, interval) <= base
    slower_save = dataclasses.replace(params, save_time_s=params.save_time_s * factor)
    assert goodput_closed_form(slower_save, mech, failures, interval) <= base + 1e-12
    # More GPUs, more faults (a fixed spare pool is a smaller share of a bigger job: compared without one).
    alone = dataclasses.replace(mech, warm_reserve_nodes=0)
    more_gpus = dataclasses.replace(params, gpus=params.gpus * 2)
    assert goodput_closed_form(more_gpus, alone, failures, interval) <= goodput_closed_form(
        params, alone, failures, interval
    )


@settings(max_examples=10, deadline=None)
@given(params_st, failures_st, mech_st, st.lists(interval_st, min_size=1, max_size=4), st.integers(0, 2**32 - 1))
def test_simulated_goodput_is_a_fraction_and_seeded(params, failures, mech, intervals, seed):
    short = dataclasses.replace(params, days=min(params.days, 0.5))
    first = simulate(short, mech, failures, intervals, replicas=8, seed=seed)
    again = simulate(short, mech, failures, intervals, replicas=8, seed=seed)
    assert np.all((first.goodput >= 0) & (first.goodput <= 1))
    assert np.array_equal(first.goodput, again.goodput)
