"""``nemo-resiliency doctor``'s checkpoint checks: where a job saves and resumes, what its async and local saves
need, and whether NVRx's computed timeouts in ``ft_state.json`` would survive a real save.

Each asks the plugin or the shared mechanism that owns the rule (``async_checkpoint``, ``local_checkpoint``,
``core/autoresume``), never a copy of it; :mod:`nemo_resiliency_plugins.tools.doctor` runs them.
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

from nemo_resiliency_plugins.core import autoresume
from nemo_resiliency_plugins.core.task_config import read_config_field
from nemo_resiliency_plugins.errors import ResiliencyConfigError
from nemo_resiliency_plugins.tools.check_result import Check, check

# A computed section timeout below this is almost certainly measured on a toy run (NVRx multiplies the
# longest observed time by 5): one slow save or step on a loaded node would be killed as a hang.
TIGHT_TIMEOUT_S = 1.0


def _checkpoint_checks(task: Any, executor: Any) -> list[Check]:
    """The rules of AsyncCheckpointPlugin / LocalCheckpointPlugin, applied to what the task will run with."""
    from nemo_resiliency_plugins.async_checkpoint import ASYNC_FORMATS
    from nemo_resiliency_plugins.local_checkpoint import check_durable_schedule, check_exit_saves_persistent

    def read(field: str) -> Any:
        return read_config_field(task, "checkpoint", field, plugin="doctor")

    checks: list[Check] = []
    if str(read("async_save")).lower() == "true":
        fmt = read("ckpt_format") or "torch_dist"
        checks.append(_async_save_check(task, fmt, fmt in ASYNC_FORMATS))
    if read("non_persistent_ckpt_type") == "local":
        problem = None
        interval = read("non_persistent_save_interval")
        try:
            if read("non_persistent_local_ckpt_dir") is None:
                problem = "checkpoint.non_persistent_local_ckpt_dir is not set"
            else:
                check_durable_schedule(task, int(interval or 0), plugin="doctor")
                check_exit_saves_persistent(task, executor, plugin="doctor")
        except (ResiliencyConfigError, TypeError, ValueError) as err:
            problem = str(err)
        checks.append(
            check(
                "local checkpoints: persistent save/load schedule beside them",
                problem is None,
                problem or f"local every {interval} steps, persistent every {read('save_interval')}",
            )
        )
        checks.append(_local_guard_check(executor, read("non_persistent_local_ckpt_dir")))
    return checks


def _local_guard_check(executor: Any, local_dir: Any) -> Check:
    """Whether each rank checks its local checkpoint files before Megatron Bridge loads them."""
    from nemo_resiliency_plugins.job.local_checkpoint_guard import DIR_ENV

    name = "local checkpoints: a damaged file falls back to a replica or the persistent checkpoint"
    guarded = getattr(executor, "env_vars", {}).get(DIR_ENV)
    if guarded is not None and str(guarded) == str(local_dir):
        return Check(name, "pass", f"each rank CRC-checks {local_dir}/<rank> first (local_checkpoint_guard.py)")
    return Check(
        name,
        "warn",
        "no check before the load: Megatron Bridge 0.6.2 fails every restart on an unreadable local checkpoint "
        "(and loads one with damaged tensor bytes) until <dir>/<rank> is removed by hand; "
        "LocalCheckpointPlugin(fallback_on_unreadable) sets such files aside (a Python run.Script on "
        "LocalExecutor or SlurmExecutor)",
    )


def _async_save_check(task: Any, fmt: str, format_ok: bool) -> Check:
    """AsyncCheckpointPlugin's checkpoint.save rule, asked of core/autoresume (the one rule, no copy here)."""
    from nemo_resiliency_plugins.async_checkpoint import SAVE_DIR_WHY

    name = "async save: format and checkpoint.save"
    if not format_ok:
        return Check(name, "FAIL", f"ckpt_format={fmt}: async_save needs one of the async formats")
    try:
        save = autoresume.shown_checkpoint_save(copy.deepcopy(task), plugin="doctor", why=SAVE_DIR_WHY)
    except ResiliencyConfigError as err:
        return Check(name, "FAIL", str(err))
    if save is None:
        return Check(name, "warn", f"ckpt_format={fmt}; the task does not show checkpoint.save ({SAVE_DIR_WHY})")
    return Check(name, "pass", f"ckpt_format={fmt}, save={save}")


def _resume_check(task: Any) -> Check:
    """Megatron Bridge resumes only from checkpoint.load: the restart plugins' own rule
    (:func:`~nemo_resiliency_plugins.core.autoresume.ensure_autoresume`), applied to a copy of the job's task.

    Where the rule would wire ``checkpoint.load`` (it is unset), the job as built trains from iteration 0.
    """
    name = "restarts resume from the saved checkpoints"
    trial = copy.deepcopy(task)
    try:
        dirs = autoresume.ensure_autoresume(trial, plugin="doctor", why="a restart")
    except ResiliencyConfigError as err:
        return Check(name, "FAIL", str(err))
    except Exception as err:  # an unreadable task is reported by other checks
        return Check(name, "n/a", f"could not read the task: {err}")
    if not dirs.visible:
        return Check(
            name,
            "warn",
            "the task does not show checkpoint.save (a recipe inside the script?): make checkpoint.load the "
            "same directory, or every restart trains from iteration 0",
        )
    if dirs.load_was_set:
        return Check(
            name,
            "FAIL",
            f"checkpoint.save={dirs.save} but checkpoint.load is unset: Megatron Bridge resumes only from "
            "checkpoint.load, so every restart trains from iteration 0",
        )
    return Check(name, "pass", f"checkpoint.load = checkpoint.save = {dirs.save}")


def _ft_state_checks(path: Path, save_time_s: float | None) -> list[Check]:
    if not path.exists():
        return [Check("ft_state.json", "n/a", f"{path} not there (yet): timeouts come from the launcher config")]
    from nemo_resiliency_plugins.tools.saved_plugins import read_regular

    raw = read_regular(path)  # never blocks on a FIFO named like the state file
    try:
        if raw is None:
            raise ValueError("not a regular file")
        state = json.loads(raw)
        section = state["current_timeouts"]["section"]
    except Exception as err:
        return [Check("ft_state.json", "FAIL", f"{path} is not parseable ({err}): the next run fails to load it")]
    checks = [Check("ft_state.json", "pass", f"{path}")]
    timeouts = dict(section.get("section") or {})
    if section.get("out_of_section") is not None:
        timeouts["out_of_section"] = section["out_of_section"]
    for name, seconds in sorted(timeouts.items()):
        if seconds is None or not isinstance(seconds, (int, float)) or math.isnan(seconds):
            continue
        too_tight = seconds < TIGHT_TIMEOUT_S or (name == "checkpointing" and save_time_s and seconds < save_time_s)
        checks.append(
            check(
                f"computed {name} timeout",
                not too_tight,
                f"{seconds:.3g} s"
                + (" - below a real save" if name == "checkpointing" and save_time_s and seconds < save_time_s else "")
                + (
                    f" - under {TIGHT_TIMEOUT_S:g} s: measured on a toy run? a slow step/save will be killed as a hang"
                    if seconds < TIGHT_TIMEOUT_S
                    else ""
                ),
            )
        )
    return checks
