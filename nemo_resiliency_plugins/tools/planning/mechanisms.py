"""The mechanism sets ``plan`` compares: Megatron Bridge's plugin defaults as they behave, the user's plugins,
and the recommended settings, each reduced to a :class:`MechanismSet`."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from nemo_resiliency_plugins.tools.planning.failures import FailureModel
from nemo_resiliency_plugins.tools.planning.optimum import (
    SAFETY_FACTOR,
    expected_faults,
    reserve_pays_off,
    restart_budget,
    section_timeouts,
)
from nemo_resiliency_plugins.tools.planning.recovery import MechanismSet, RunParams

MB_INITIAL_HEARTBEAT_TIMEOUT_S = 1800.0  # megatron.bridge.recipes.run_plugins.FaultTolerancePlugin default
MB_RESTARTS, MB_RETRIES = 3, 2


def megatron_bridge_defaults() -> MechanismSet:
    """``megatron.bridge.recipes.run_plugins.FaultTolerancePlugin()`` as it behaves with NVRx 0.7 (README,
    FaultTolerancePlugin section; research note ft-sections.md): it passes heartbeat timeouts only, so no
    section is monitored; Megatron Bridge never sends a heartbeat, so every attempt is killed 1800 s after it
    starts (``initial_rank_heartbeat_timeout``; ``rank_heartbeat_timeout``, 300 s, applies only after a first
    heartbeat, so never); and ``calc_ft_timeouts=True`` with no declared section raises
    ``KeyError: 'step'`` right after the first checkpoint save (read from the code, not run at scale). A hang
    is therefore ended only by that kill; a preemption signal also reaches NVRx's rank monitors, which stop,
    so the save on SIGTERM is lost (seen on the local Slurm with Megatron Bridge's ``TERM@60``)."""
    return MechanismSet(
        name="megatron-bridge-defaults",
        step_timeout_s=None,
        in_job_restarts=MB_RESTARTS,
        job_retries=MB_RETRIES,
        attempt_cap_s=MB_INITIAL_HEARTBEAT_TIMEOUT_S,
        crash_at_first_save=True,
        notes=(
            "heartbeat timeouts only: every attempt killed 1800 s after start; calc_ft_timeouts crashes after "
            "the first save; hangs end only by that kill",
        ),
    )


def from_plugins(plugins: list[Any], params: RunParams, name: str = "yours") -> MechanismSet:
    """The mechanism set a list of this package's plugins gives a run with these step and save times."""
    by_type = {type(p).__name__: p for p in plugins}
    notes: list[str] = []
    ft = by_type.get("FaultTolerancePlugin")
    if ft is None:
        notes.append(
            "no FaultTolerancePlugin: no ft_launcher, a hang ends at the NCCL timeout, every fault ends the job"
        )
        mech = MechanismSet(name=name, step_timeout_s=None, in_job_restarts=0, job_retries=0, launcher_restarts=False)
    else:
        if ft.workload_style == "heartbeats":
            step = ft.rank_heartbeat_timeout
            notes.append("workload_style='heartbeats': hangs found by rank_heartbeat_timeout")
        else:
            step = (ft.section_timeouts or {}).get("step")
            if step is None:
                notes.append("no 'step' section timeout: a hang ends at the NCCL timeout")
            elif ft.calc_ft_timeouts:
                # NVRx computes 5 x the longest observed step after the first save and keeps it in ft_state.json.
                notes.append(f"calc_ft_timeouts: step timeout {SAFETY_FACTOR:g} x step time after the first save")
                step = SAFETY_FACTOR * params.step_time_s
        checkpointing = (ft.section_timeouts or {}).get("checkpointing")
        saves_complete = not (
            ft.workload_style == "sections" and checkpointing is not None and checkpointing <= params.save_time_s
        )
        if not saves_complete:
            notes.append(_killed(checkpointing))
        mech = MechanismSet(
            name=name,
            step_timeout_s=None if step is None else float(step),
            check_interval_s=float(ft.workload_check_interval),
            in_job_restarts=int(ft.num_in_job_restarts),
            job_retries=int(ft.num_job_retries_on_failure),
            checkpointing_timeout_s=None if checkpointing is None else float(checkpointing),
            saves_complete=saves_complete,
            # NVRx hot spares: a lost node is replaced in the next rendezvous, as fast as an in-place restart
            warm_reserve_nodes=int(getattr(ft, "spare_nodes", 0)),
        )
    pre = by_type.get("PreemptionPlugin")
    rerun = by_type.get("RerunStateMachinePlugin")
    sdc = rerun is not None and rerun.rerun_mode == "validate_results" and rerun.check_for_nan_in_loss
    inproc = by_type.get("InProcessRestartPlugin")
    soft = None
    if inproc is not None:
        notes.append("in-process restart not modelled: costed as a launcher restart")
        soft = float(inproc.soft_timeout)
        if soft <= params.save_time_s:
            # NVRx's progress watchdog sees no progress during a save: every save is interrupted, the re-entry
            # resumes from the last completed checkpoint, and nothing newer is ever kept.
            notes.append(f"in-process soft_timeout {soft:g} s <= save time: every save is interrupted")
            mech = dataclasses.replace(mech, saves_complete=False)
    return dataclasses.replace(
        mech,
        inprocess_soft_timeout_s=soft,
        preemption_handled=pre is not None and pre.enable_exit_handler,
        sdc_check=sdc,
        local_checkpoints=params.local_save_time_s is not None,
        notes=tuple(notes),
    )


def our_defaults(params: RunParams) -> MechanismSet:
    """The ``slurm-pretraining`` recipe (this package's plugins with their defaults) without importing
    NeMo-Run: ``plan`` without ``--plugins`` stays fast. A unit test keeps it equal to
    ``from_plugins(get_recipe("slurm-pretraining"), params)``."""
    checkpointing = 420.0  # FaultTolerancePlugin's default section_timeouts['checkpointing']
    return MechanismSet(
        name="ours (slurm-pretraining)",
        step_timeout_s=SAFETY_FACTOR * params.step_time_s,  # calc_ft_timeouts=True
        check_interval_s=5.0,
        in_job_restarts=MB_RESTARTS,
        job_retries=MB_RETRIES,
        preemption_handled=True,
        sdc_check=False,
        local_checkpoints=params.local_save_time_s is not None,
        checkpointing_timeout_s=checkpointing,
        saves_complete=checkpointing > params.save_time_s,
        notes=(f"calc_ft_timeouts: step timeout {SAFETY_FACTOR:g} x step time after the first save",)
        + (() if checkpointing > params.save_time_s else (_killed(checkpointing),)),
    )


def _killed(timeout: float) -> str:
    return f"checkpointing timeout {timeout:g} s <= save time: every save is killed"


def recommended(
    params: RunParams, failures: FailureModel, interval_s: float, local_s: float | None
) -> tuple[MechanismSet, dict[str, Any]]:
    """The settings this tool recommends, and the figures behind them (for the report)."""
    timeouts = section_timeouts(params.step_time_s, params.save_time_s, params.restart_s + params.load_time_s)
    base = MechanismSet(
        name="recommended",
        step_timeout_s=timeouts.step,
        check_interval_s=timeouts.check_interval,
        in_job_restarts=3,
        job_retries=MB_RETRIES,
        preemption_handled=True,
        sdc_check=True,
        local_checkpoints=params.local_save_time_s is not None,
    )
    faults = expected_faults(params, failures, base)
    mech = dataclasses.replace(base, in_job_restarts=restart_budget(faults, MB_RETRIES))
    pays, nodes, without, with_ = reserve_pays_off(params, failures, mech, interval_s, local_s)
    if pays:
        mech = dataclasses.replace(mech, warm_reserve_nodes=nodes)
    details = {
        "section_timeouts": {
            "setup": timeouts.setup,
            "step": timeouts.step,
            "checkpointing": timeouts.checkpointing,
            "out_of_section": timeouts.out_of_section,
        },
        "workload_check_interval": timeouts.check_interval,
        # The signal comes preempt_time (+ up to 60 s) before the kill; the rest of a step plus one save must fit,
        # twice over for jitter; never below Megatron Bridge's 60 s.
        "preempt_time": max(60, math.ceil(2 * (params.step_time_s + params.save_time_s))),
        "safety_factor": SAFETY_FACTOR,
        "expected_faults": faults,
        "num_in_job_restarts": mech.in_job_restarts,
        "num_job_retries_on_failure": mech.job_retries,
        "warm_reserve": {"pays_off": pays, "nodes": nodes, "goodput_without": without, "goodput_with": with_},
    }
    return mech, details
