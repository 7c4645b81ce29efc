"""The reference workload's fault specs: single faults as before, and chains (several recoveries in one launch).

The injector is exercised for real on its bookkeeping (marker files, order); the faults themselves (SIGKILL, a
hung step) are proven by the launching tests that use chains (tests/smoke, tests/testing).
"""

from __future__ import annotations

import pytest

from nemo_resiliency_plugins.testing.faults import FAULT_MARKER, FaultInjector, FaultSpec, marker_name


def test_a_single_fault_reads_as_before():
    spec = FaultSpec.from_env({"NRP_FAULT": "kill", "NRP_FAULT_STEP": "13", "NRP_FAULT_RANK": "0"})
    assert (spec.kind, spec.step, spec.rank, spec.then) == ("kill", 13, 0, ())
    assert spec.chain == (("kill", 13),)
    assert FaultSpec.from_env({}).chain == ()


def test_a_chain_lists_every_fault_in_order():
    spec = FaultSpec.from_env({"NRP_FAULT": " kill@13, hang@17 ", "NRP_FAULT_STEP": "99"})
    assert (spec.kind, spec.step) == ("kill", 13)  # the first fault; NRP_FAULT_STEP does not apply to a chain
    assert spec.chain == (("kill", 13), ("hang", 17))


@pytest.mark.parametrize("value", ["kill@", "kill@13,,hang@17", "slow@3,kill@5", "nan@2", "kill@13;hang@17", "kill@-1"])
def test_a_malformed_chain_is_refused_with_the_rule(value):
    with pytest.raises(ValueError, match="kind@step items separated by commas"):
        FaultSpec.from_env({"NRP_FAULT": value})


def test_a_chain_needs_the_save_directory_for_its_markers():
    with pytest.raises(ValueError, match="needs checkpoint.save"):
        FaultInjector(FaultSpec.from_env({"NRP_FAULT": "raise@1,raise@2"}), rank=1, world=2, save_dir=None)


def test_faults_of_a_chain_are_injected_once_each_and_in_order(tmp_path):
    spec = FaultSpec.from_env({"NRP_FAULT": "raise@3,raise@5"})
    injector = FaultInjector(spec, rank=1, world=2, save_dir=str(tmp_path))
    for step in (0, 1, 2, 4, 5):  # step 5 is not due before the step-3 fault happened
        injector.maybe_inject(step)
    with pytest.raises(RuntimeError, match="step 3"):
        injector.maybe_inject(3)
    assert (tmp_path / FAULT_MARKER).exists() and not (tmp_path / marker_name(1)).exists()
    # A restarted attempt resumes before step 3: the first fault is not injected again, the second one is.
    again = FaultInjector(spec, rank=1, world=2, save_dir=str(tmp_path))
    again.maybe_inject(3)
    with pytest.raises(RuntimeError, match="step 5"):
        again.maybe_inject(5)
    assert (tmp_path / marker_name(1)).read_text().startswith("kind=raise step=5 rank=1 ")
    third = FaultInjector(spec, rank=1, world=2, save_dir=str(tmp_path))
    for step in range(10):
        third.maybe_inject(step)  # every fault of the chain happened: nothing more


def test_other_ranks_never_inject(tmp_path):
    injector = FaultInjector(FaultSpec.from_env({"NRP_FAULT": "raise@1"}), rank=0, world=2, save_dir=str(tmp_path))
    injector.maybe_inject(1)
    assert not (tmp_path / FAULT_MARKER).exists()


def test_a_repeated_fault_hits_the_same_step_in_every_attempt(tmp_path):
    spec = FaultSpec.from_env({"NRP_FAULT": "raise", "NRP_FAULT_STEP": "13", "NRP_FAULT_REPEAT": "same"})
    for first in (0, 10, 10):  # cycle 0 starts at 0, every later one resumes from 10
        injector = FaultInjector(spec, rank=1, world=2, save_dir=str(tmp_path))
        for step in range(first, 13):
            injector.maybe_inject(step)
        with pytest.raises(RuntimeError, match="step 13"):
            injector.maybe_inject(13)
    assert not (tmp_path / FAULT_MARKER).exists()


def test_a_fault_after_resume_moves_with_the_resumed_step(tmp_path):
    spec = FaultSpec.from_env({"NRP_FAULT": "raise", "NRP_FAULT_STEP": "8", "NRP_FAULT_REPEAT": "after_resume"})
    for first in (0, 5, 10):
        injector = FaultInjector(spec, rank=1, world=2, save_dir=str(tmp_path))
        for step in range(first, first + 8):
            injector.maybe_inject(step)
        with pytest.raises(RuntimeError, match=f"step {first + 8}"):
            injector.maybe_inject(first + 8)


@pytest.mark.parametrize(
    "env",
    [
        {"NRP_FAULT": "kill", "NRP_FAULT_REPEAT": "always"},
        {"NRP_FAULT": "slow", "NRP_FAULT_REPEAT": "same"},
        {"NRP_FAULT": "kill@3,hang@5", "NRP_FAULT_REPEAT": "same"},
    ],
)
def test_a_repeat_mode_is_checked(env):
    with pytest.raises(ValueError, match="NRP_FAULT_REPEAT"):
        FaultSpec.from_env(env)
