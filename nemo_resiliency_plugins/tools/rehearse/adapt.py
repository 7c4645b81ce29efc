"""The rehearsal's fixed parameters, and how a user's plugin set is adapted to act on one machine.

Kept apart from :mod:`.run` (which runs and judges the rehearsal): a cluster's timeouts
are minutes, the toy's step a fraction of a second, so FT section timeouts are scaled (ratios kept, floors for the
local start-up), in-process timeouts likewise, node-local checkpoint directories are redirected into the rehearsal's
work directory, and every change is listed in the report: a rehearsal that silently changed the user's numbers would
prove something else.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from nemo_resiliency_plugins.errors import ResiliencyConfigError

FAULTS = ("kill", "hang", "raise", "sigterm")
DEFAULT_FAULTS = ("kill", "hang")
STEPS = 20
SAVE_INTERVAL = 5
FAULT_STEP = 13  # two steps past the checkpoint at step 10: a correct resume must redo steps 11-13
STEP_TIME_S = 0.15
TARGET_STEP_TIMEOUT_S = 5.0
# Local start-up (each rank imports Megatron Bridge for ~13 s, more on a loaded machine) and toy saves need
# these at least, whatever the scaling gives; the CI machines this runs on are small and shared.
FLOORS_S = {"setup": 60.0, "checkpointing": 15.0, "out_of_section": 30.0, "check_interval": 0.5}
# Seconds a detection may take beyond the timeout that should fire (check interval, a loaded machine).
DETECTION_SLACK_S = 15.0
RUN_CAP_S = 300.0  # any single run longer than this is stopped: a rehearsal must end
POLL_S = 0.2


def plugin_name(plugin: Any) -> str:
    return type(plugin).__name__


def _scale(value: float | None, factor: float, floor: float | None = None) -> float | None:
    if value is None:
        return None
    scaled = value * factor
    return max(scaled, floor) if floor is not None else scaled


def rehearsal_plugins(plugins: list[Any]) -> tuple[list[Any], list[str], list[str]]:
    """The plugins as the rehearsal runs them, what was scaled, and what cannot be exercised locally."""
    out: list[Any] = []
    scaled: list[str] = []
    missing: list[str] = []
    for plugin in plugins:
        name = plugin_name(plugin)
        if name == "AsyncCheckpointPlugin":
            missing.append(
                "AsyncCheckpointPlugin: not rehearsed (left out of the run): the reference workload writes its "
                "persistent checkpoints itself, and the async writers (NVRx's persistent worker, Megatron Core's "
                "torch_dist writer) need CUDA"
            )
            continue
        if name == "FaultTolerancePlugin":
            plugin, notes = _scale_ft(plugin)
            scaled += notes
            if plugin.num_job_retries_on_failure:
                missing.append(
                    f"FaultTolerancePlugin.num_job_retries_on_failure={plugin.num_job_retries_on_failure}: "
                    "job retries are Slurm requeues; a LocalExecutor job is not requeued"
                )
            missing.append(
                "FaultTolerancePlugin on Slurm: the sbatch requeue guard and the config file written by the sbatch "
                "script are Slurm-only (test them with tests/slurm on a local Slurm)"
            )
            if plugin.calc_ft_timeouts:
                missing.append(
                    "FaultTolerancePlugin.calc_ft_timeouts=True: Megatron Bridge computes timeouts from the toy's "
                    "step and save times here (ft_state.json in the rehearsal's save directory), not your cluster's"
                )
        elif name == "InProcessRestartPlugin":
            plugin, notes = _scale_inprocess(plugin)
            scaled += notes
        elif name == "PreemptionPlugin":
            missing.append(
                f"PreemptionPlugin.preempt_time={plugin.preempt_time}: Slurm's --signal=B:TERM@{plugin.preempt_time} "
                "needs a Slurm time limit; the rehearsal's 'sigterm' fault sends the signal to a rank directly"
            )
        elif name == "LocalCheckpointPlugin":
            plugin, notes, gaps = _rehearsal_local(plugin)
            scaled += notes
            missing += gaps
        elif name == "StragglerDetectionPlugin":
            if plugin.report_time_interval > STEPS * STEP_TIME_S:
                missing.append(
                    f"StragglerDetectionPlugin.report_time_interval={plugin.report_time_interval:g} s: longer than a "
                    f"rehearsal run's training ({STEPS * STEP_TIME_S:g} s), so no straggler report is produced here"
                )
        out.append(plugin)
    return out, scaled, missing


def _rehearsal_local(plugin: Any) -> tuple[Any, list[str], list[str]]:
    """Local checkpoints on this machine: more often than the rehearsal's persistent interval, no replication."""
    notes: list[str] = []
    gaps = [
        "LocalCheckpointPlugin.non_persistent_local_ckpt_dir: the rehearsal writes under its own work directory, "
        "not your nodes' local disk (capacity and speed are not checked)"
    ]
    changes: dict[str, Any] = {}
    if plugin.non_persistent_save_interval >= SAVE_INTERVAL:
        changes["non_persistent_save_interval"] = max(1, SAVE_INTERVAL // 2)
        notes.append(
            f"LocalCheckpointPlugin.non_persistent_save_interval: {plugin.non_persistent_save_interval} -> "
            f"{changes['non_persistent_save_interval']} (below the rehearsal's persistent interval {SAVE_INTERVAL})"
        )
    if plugin.non_persistent_local_ckpt_algo == "fully_parallel":
        changes["non_persistent_local_ckpt_algo"] = "atomic"
        notes.append(
            "LocalCheckpointPlugin.non_persistent_local_ckpt_algo: 'fully_parallel' -> 'atomic' (Megatron Core's "
            "fully-parallel load exchanges shards through CUDA; the rehearsal's ranks run on CPU)"
        )
    if plugin.replication:
        changes.update(replication=False, replication_jump=None, replication_factor=2)
        gaps.append(
            "LocalCheckpointPlugin.replication: replicas on other nodes need several nodes; the rehearsal runs on "
            "one (tests/smoke/test_checkpoint_local.py recovers a lost rank directory from a replica instead)"
        )
    return (dataclasses.replace(plugin, **changes) if changes else plugin), notes, gaps


def with_local_dir(plugins: list[Any], directory: Path) -> list[Any]:
    """Each rehearsal run gets its own local checkpoint directory (a fresh 'node')."""
    return [
        dataclasses.replace(p, non_persistent_local_ckpt_dir=str(directory))
        if plugin_name(p) == "LocalCheckpointPlugin"
        else p
        for p in plugins
    ]


def _scale_ft(plugin: Any) -> tuple[Any, list[str]]:
    notes: list[str] = []
    changes: dict[str, Any] = {}
    if plugin.simulate_fault:
        changes["simulate_fault"] = False
        notes.append("FaultTolerancePlugin.simulate_fault: True -> False (the rehearsal injects its own faults)")
    if plugin.workload_style == "sections":
        step = plugin.section_timeouts.get("step")
        factor = min(1.0, TARGET_STEP_TIMEOUT_S / step) if step else min(1.0, TARGET_STEP_TIMEOUT_S / 180.0)
        sections = {}
        for section, value in plugin.section_timeouts.items():
            sections[section] = _scale(value, factor, FLOORS_S.get(section))
        oos = _scale(plugin.out_of_section_timeout, factor, FLOORS_S["out_of_section"])
        changes |= {"section_timeouts": sections, "out_of_section_timeout": oos}
        if factor < 1:
            notes.append(
                f"FT section timeouts x{factor:.3g} (step timeout -> {TARGET_STEP_TIMEOUT_S:g} s, ratios kept; "
                f"floors {FLOORS_S['setup']:g} s setup, {FLOORS_S['checkpointing']:g} s checkpointing, "
                f"{FLOORS_S['out_of_section']:g} s out-of-section for local start-up): "
                f"{_fmt(plugin.section_timeouts)} -> {_fmt(sections)}; out-of-section "
                f"{fmt_num(plugin.out_of_section_timeout)} -> {fmt_num(oos)}"
            )
    else:
        hb = plugin.rank_heartbeat_timeout or plugin.initial_rank_heartbeat_timeout
        factor = min(1.0, TARGET_STEP_TIMEOUT_S / hb) if hb else 1.0
        initial = _scale(plugin.initial_rank_heartbeat_timeout, factor)
        subsequent = _scale(plugin.rank_heartbeat_timeout, factor)
        changes |= {"initial_rank_heartbeat_timeout": initial, "rank_heartbeat_timeout": subsequent}
        if factor < 1:
            notes.append(
                f"FT heartbeat timeouts x{factor:.3g}: initial {fmt_num(plugin.initial_rank_heartbeat_timeout)} -> "
                f"{fmt_num(initial)}, subsequent {fmt_num(plugin.rank_heartbeat_timeout)} -> {fmt_num(subsequent)}"
            )
    interval = max(min(plugin.workload_check_interval, plugin.workload_check_interval * factor), 0.0)
    interval = max(interval, min(FLOORS_S["check_interval"], plugin.workload_check_interval))
    if interval != plugin.workload_check_interval:
        changes["workload_check_interval"] = interval
        notes.append(f"FT workload_check_interval {plugin.workload_check_interval:g} -> {interval:g} s")
    return dataclasses.replace(plugin, **changes), notes


def _scale_inprocess(plugin: Any) -> tuple[Any, list[str]]:
    """Uniform scaling keeps NVRx's ordering rules; the monitor intervals (1 s) stay as they are."""
    target = 10.0
    if not plugin.enabled or plugin.soft_timeout <= target:
        return plugin, []
    factor = target / plugin.soft_timeout
    names = ("soft_timeout", "hard_timeout", "heartbeat_interval", "heartbeat_timeout", "barrier_timeout")
    names += ("completion_timeout",)
    changes = {n: getattr(plugin, n) * factor for n in names}
    try:
        scaled = dataclasses.replace(plugin, **changes)
    except ResiliencyConfigError as err:
        return plugin, [f"InProcessRestartPlugin timeouts not scaled ({err}); a hang takes its soft_timeout to see"]
    before = ", ".join(f"{n}={getattr(plugin, n):g}" for n in names)
    after = ", ".join(f"{n}={changes[n]:g}" for n in names)
    return scaled, [f"InProcessRestartPlugin timeouts x{factor:.3g}: {before} -> {after}"]


def fmt_num(value: float | None) -> str:
    return "none" if value is None else f"{value:g}"


def _fmt(sections: dict[str, float | None]) -> str:
    return "{" + ", ".join(f"{k}: {fmt_num(v)}" for k, v in sections.items()) + "}"


# (pattern, event label). The label is what the report and the timeline show.
