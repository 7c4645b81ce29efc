"""The autoresume preconditions every restarting plugin relies on, checked in one place.

A restart (ft_launcher's, a Slurm requeue after a failure or a preemption, an in-process re-entry, a stop by the
straggler detector) only saves work when the next run resumes from the checkpoints this run wrote. Megatron
Bridge 0.6.2 resumes only from ``checkpoint.load`` (``training/setup.py``, ``_should_load_checkpoint``); it never
falls back to ``checkpoint.save``. Its recipes set both to the same directory, but a task that overrides
``checkpoint.save`` alone keeps the recipe's ``load`` (another directory, or none), and every restart then trains
from iteration 0 (or from an old checkpoint) while the job looks healthy.

So, wherever the task shows its checkpoint settings (``task.args`` overrides of a ``run.Script``, the
``ConfigContainer`` of a ``run.Partial``):

* ``checkpoint.save`` unset or null: refused (nothing is saved, nothing can be resumed);
* ``checkpoint.load`` unset: set to ``checkpoint.save``. This is wiring a prerequisite, not overwriting a user's
  value: the field is empty where the task shows it, and it is what Megatron Bridge's own recipes do
  (``recipes/common.py`` sets ``checkpoint.load = checkpoint.save = checkpoint_dir``). For a script whose recipe
  sets ``load`` to its own default directory, the override makes the restart read what this run saves;
* ``checkpoint.load`` set to another directory: refused, naming both (a fine-tune's starting weights belong in
  ``checkpoint.pretrained_checkpoint``, which Megatron Bridge reads only when ``load`` has no checkpoint);
* ``checkpoint.save_interval`` null or below 1: refused (no periodic checkpoint to resume from);
* ``checkpoint.finetune=true`` (the step is reset to 0 after every load) and ``checkpoint.ckpt_step=N`` (every
  load takes iteration N, not the newest): refused, since every restart would train the same steps again.

Where the task does not show ``checkpoint.save`` (a recipe built inside the script), nothing can be checked: a
warning says so, and ``explain`` / ``doctor`` show it.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any

import nemo_run as run

from nemo_resiliency_plugins.core import task_config
from nemo_resiliency_plugins.errors import ResiliencyConfigError

logger = logging.getLogger(__name__)

#: What a plugin's refusal says will happen without the fix.
FROM_SCRATCH = "every restart would train from iteration 0"


@dataclass(frozen=True)
class CheckpointDirs:
    """What the task shows of its checkpoint directories after :func:`ensure_autoresume`."""

    #: the directory the job saves to and resumes from; None when the task does not show it
    save: str | None
    #: True when the plugin set ``checkpoint.load`` to ``save`` (it was unset)
    load_was_set: bool = False

    @property
    def visible(self) -> bool:
        return self.save is not None


def _same_dir(a: str, b: str) -> bool:
    return os.path.normpath(a) == os.path.normpath(b)


def shown_checkpoint_save(
    task: Any,
    *,
    plugin: str,
    why: str,
    require_visible: bool = False,
    declare: str | None = None,
    consequence: str | None = None,
) -> str | None:
    """The one rule every plugin applies to ``checkpoint.save`` (docs/dropin.md, "checkpoint.save: one rule").

    * The task shows it as a directory: returned (an absolute or a relative path, as written: a relative one
      is resolved in the job's working directory by the ranks and by ft_launcher alike).
    * The task shows it as null or empty: refused (what the task shows is wrong: nothing would be saved).
    * The task does not show it (it comes from the script's YAML, its recipe or a flag of its own, such as
      Megatron Bridge's ``--save_dir``): the job may well have it, so a warning says what cannot be checked,
      and how to declare it (``declare``; default: show it as a ``checkpoint.save=<dir>`` override); None is
      returned. ``require_visible`` is kept for callers (``doctor``) that need a yes/no answer.
    """
    task_config.require_container(task, "checkpoint", plugin=plugin)
    seen, save = task_config.config_field_seen(task, "checkpoint", "save", plugin=plugin)
    if seen and (not isinstance(save, str) or not save):
        raise ResiliencyConfigError(
            plugin,
            "checkpoint.save",
            save,
            "a checkpoint directory",
            detail="the task sets no checkpoint directory: the job saves no checkpoint"
            + (f", so {consequence}" if consequence else "")
            + f" ({why})",
        )
    if seen:
        return save
    if require_visible:
        raise ResiliencyConfigError(
            plugin,
            "checkpoint.save",
            None,
            "a checkpoint directory the task shows (a checkpoint.save=<dir> override in task.args, or "
            "checkpoint.save on the run.Partial's ConfigContainer)",
            detail=f"the task does not show checkpoint.save, so {why} cannot be checked",
        )
    how = declare or "show it on the task (a checkpoint.save=<dir> override, or on the run.Partial's ConfigContainer)"
    logger.warning(
        "%s: the task does not show checkpoint.save (it may come from the script's YAML, its recipe or a flag of "
        "its own): the job may have it, but %s cannot be checked. Megatron Bridge resumes only from "
        "checkpoint.load: make it the directory checkpoint.save writes, or %s. To have it checked, %s",
        plugin,
        why,
        FROM_SCRATCH,
        how,
    )
    return None


def ensure_autoresume(
    task: Any,
    *,
    plugin: str,
    why: str,
    require_visible: bool = False,
    converter: Any = None,
    declare: str | None = None,
) -> CheckpointDirs:
    """Check (and where one field is merely unset, wire) that a restarted job resumes from what it saved.

    ``why`` says what restarts the job (e.g. "ft_launcher restarts and Slurm requeues"), for the messages.
    ``converter``: the plugin's ``script_args_converter_fn``; with one, a script's settings cannot be seen.
    ``require_visible``: refuse a task that does not show ``checkpoint.save`` (``doctor``'s yes/no question; no
    plugin refuses that, see :func:`shown_checkpoint_save`). ``declare``: how the plugin takes the directory
    where the task does not show it (``FaultTolerancePlugin(checkpoint_dir=...)``), for the warning.
    """
    if converter is not None and isinstance(task, run.Script):
        # The script takes its own argument style (script_args_converter_fn): its overrides cannot be read or written.
        logger.warning(
            "%s: script_args_converter_fn is set, so the checkpoint settings of the script are not visible: make "
            "sure the job resumes from the directory it saves to after %s, or %s",
            plugin,
            why,
            FROM_SCRATCH,
        )
        return CheckpointDirs(save=None)
    save = shown_checkpoint_save(
        task, plugin=plugin, why=why, require_visible=require_visible, declare=declare, consequence=FROM_SCRATCH
    )
    if save is None:
        return CheckpointDirs(save=None)
    interval_seen, interval = task_config.config_field_seen(task, "checkpoint", "save_interval", plugin=plugin)
    bad_interval = interval is None or isinstance(interval, bool) or not isinstance(interval, int) or interval < 1
    if interval_seen and bad_interval:
        raise ResiliencyConfigError(
            plugin,
            "checkpoint.save_interval",
            interval,
            "a whole number of iterations >= 1",
            detail=f"without a periodic save only the final checkpoint exists, so {FROM_SCRATCH} ({why})",
        )
    _refuse_training_redo(task, plugin=plugin, why=why)
    load_seen, load = task_config.config_field_seen(task, "checkpoint", "load", plugin=plugin)
    if load_seen and isinstance(load, str) and load:
        if not _same_dir(load, save):
            raise ResiliencyConfigError(
                plugin,
                "checkpoint.load",
                load,
                f"the directory checkpoint.save writes ({save!r})",
                detail=(
                    f"Megatron Bridge resumes only from checkpoint.load, so after a restart ({why}) the job would "
                    f"load {load!r}, not the checkpoints it saved in {save!r}: the work since the start would be "
                    "lost on every restart. Set checkpoint.load to the same directory; put a fine-tune's starting "
                    "weights in checkpoint.pretrained_checkpoint"
                ),
            )
        return CheckpointDirs(save=save)
    if (
        load_seen
        and isinstance(task, run.Script)
        and load is None
        and any(o.key == "checkpoint.load" for o in task_config.script_overrides(task, plugin=plugin))
    ):
        raise ResiliencyConfigError(
            plugin,
            "checkpoint.load",
            None,
            f"the directory checkpoint.save writes ({save!r})",
            detail=f"task.args removes checkpoint.load, so {FROM_SCRATCH} ({why})",
        )
    task_config.set_config_fields(task, "checkpoint", {"load": save}, plugin=plugin, fill_none=True)
    return CheckpointDirs(save=save, load_was_set=True)


def _refuse_training_redo(task: Any, *, plugin: str, why: str) -> None:
    """Settings with which every restart loads a checkpoint but trains the same steps again.

    ``checkpoint.finetune=True``: after every load Megatron Bridge 0.6.2 sets the step back to 0
    (``checkpointing.py``, ``if cfg.checkpoint.finetune or release: state.train_state.step = 0``) and skips the
    optimizer and RNG state, so each restart trains the whole schedule again on the saved weights. A fine-tune's
    starting weights belong in ``checkpoint.pretrained_checkpoint``: Megatron Bridge turns ``finetune`` on by
    itself for that first load only, when ``checkpoint.load`` holds no checkpoint yet.
    ``checkpoint.ckpt_step=N``: every load takes iteration N (``_resolve_checkpoint_iteration``), never the newest
    one, so every restart goes back to step N.
    """
    seen, finetune = task_config.config_field_seen(task, "checkpoint", "finetune", plugin=plugin)
    if seen and (finetune is True or (isinstance(finetune, str) and finetune.strip().lower() == "true")):
        raise ResiliencyConfigError(
            plugin,
            "checkpoint.finetune",
            finetune,
            "False (the default) for a job that restarts; a fine-tune's starting weights go in "
            "checkpoint.pretrained_checkpoint, and Megatron Bridge sets finetune itself for that first load only",
            detail=(
                f"with finetune=True Megatron Bridge resets the step to 0 after every checkpoint load (and skips the "
                f"optimizer state), so every restart ({why}) trains the whole schedule again from iteration 0"
            ),
        )
    seen, step = task_config.config_field_seen(task, "checkpoint", "ckpt_step", plugin=plugin)
    if seen and step is not None:
        raise ResiliencyConfigError(
            plugin,
            "checkpoint.ckpt_step",
            step,
            "None (the default: Megatron Bridge loads the newest checkpoint) for a job that restarts",
            detail=(
                f"every checkpoint load takes iteration {step}, not the newest checkpoint, so every restart ({why}) "
                f"goes back to step {step} and trains the steps since then again"
            ),
        )


def declared_checkpoint_dir(dirs: CheckpointDirs, declared: str | None, *, plugin: str) -> str | None:
    """The job's checkpoint directory: the one the task shows, else the plugin's ``checkpoint_dir`` field.

    ``checkpoint_dir`` is for tasks that do not show ``checkpoint.save`` (a recipe built inside the script, a
    script with flags of its own such as Megatron Bridge's ``--save_dir``); one that contradicts the task's own
    ``checkpoint.save`` is refused rather than one of the two silently winning.
    """
    if dirs.visible and declared is not None and not _same_dir(dirs.save, declared):
        raise ResiliencyConfigError(
            plugin,
            "checkpoint_dir",
            declared,
            f"None or the task's checkpoint.save ({dirs.save!r})",
            detail="the task already shows its checkpoint directory; checkpoint_dir is for tasks that do not",
        )
    return dirs.save if dirs.visible else declared


__all__ = ["FROM_SCRATCH", "CheckpointDirs", "declared_checkpoint_dir", "ensure_autoresume", "shown_checkpoint_save"]
