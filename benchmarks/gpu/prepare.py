"""Run here, before the device call: what the plugins give each GPU-proof job, from the plugins' own code.

The GPU machine has no nemo-run, so the plugins cannot run there. This script calls each plugin's ``setup``
on a ``run.Script`` task (``entrypoint="python"``, the workload entry) and a ``run.LocalExecutor``, exactly as
``run.run(..., plugins=[...])`` does, and records what the job would get: the task's Hydra overrides, the
executor's environment (``PET_FT_CFG_PATH``, ``PET_MAX_RESTARTS``, ``GROUP_RANK``, ...), the ft_launcher
fields and the NVRx YAML the FaultTolerancePlugin wrote. ``gpu_proof.py`` replays that on the GPU.

Usage: ``.venv/bin/python benchmarks/gpu/prepare.py DIR`` (writes ``DIR/plugin_settings.json`` and
``DIR/ft_launcher.yaml``).
"""

from __future__ import annotations

import json
import os
import shutil
import sys

import nemo_run as run

from nemo_resiliency_plugins import FaultTolerancePlugin
from nemo_resiliency_plugins.async_checkpoint import AsyncCheckpointPlugin
from nemo_resiliency_plugins.inprocess_restart import InProcessRestartPlugin
from nemo_resiliency_plugins.local_checkpoint import LocalCheckpointPlugin
from nemo_resiliency_plugins.preemption import PreemptionPlugin
from nemo_resiliency_plugins.rerun import RerunStateMachinePlugin
from nemo_resiliency_plugins.straggler import StragglerDetectionPlugin
from nemo_resiliency_plugins.testing.inprocess_loop import LONG_SAVE_TIMEOUTS, SHORT_TIMEOUTS

ENTRY = "benchmarks/gpu/workload_entry.py"

# The GPU proof's settings: short timeouts so that a hang is detected in seconds, not minutes.
FT = dict(
    num_in_job_restarts=2,
    calc_ft_timeouts=False,
    section_timeouts={"setup": 120, "step": 10, "checkpointing": 60},
    out_of_section_timeout=60,
    workload_check_interval=1,
)
STRAGGLER = dict(
    report_time_interval=4.0,
    gpu_relative_perf_threshold=0.7,
    gpu_individual_perf_threshold=0.7,
    num_gpu_perf_scores_to_print=1,
)
# The real-pretrain proof (pretrain_proof.py) also uses these: FT with Megatron Bridge's computed timeouts (the
# second run loads ft_state.json), the preemption settings, the re-run state machine with error injection
# (Megatron Core injects a transient error into about one validated loss in ``error_injection_rate``).
FT_CALC = dict(FT, calc_ft_timeouts=True)
PREEMPTION = dict(preempt_time=60)
RERUN = dict(rerun_mode="validate_results", check_for_nan_in_loss=True, error_injection_rate=8)
# Issue 20's checkpoint plugins on the real loop: async saves (NVRx's persistent worker) and node-local
# checkpoints every 2 steps against persistent ones every 10 (pretrain_entry.py's save_interval).
ASYNC = dict()
LOCAL = dict(non_persistent_local_ckpt_dir="/tmp/pretrain_proof/local_ckpt", non_persistent_save_interval=2)
# PreemptionPlugin and the checkpoint plugins check the save settings they build on (a run that resumes needs
# checkpoint.save = checkpoint.load), so their task shows them as a user's script would; pretrain_proof.py then
# points save and load at each job's own directory.
CHECKPOINT_ARGS = ["checkpoint.save=/tmp/pretrain_proof/ckpt", "checkpoint.save_interval=10"]
INPROCESS = SHORT_TIMEOUTS
# Issue 32 item 6: the same, with timeouts the timeout chain accepts against the longest save (testing/inprocess_loop).
INPROCESS_LONG = LONG_SAVE_TIMEOUTS


def _apply(plugin: run.Plugin, args: list[str] | None = None) -> dict:
    task = run.Script(path=ENTRY, entrypoint="python", args=list(args or []))
    executor = run.LocalExecutor(ntasks_per_node=1)
    plugin.setup(task, executor)
    launcher = executor.launcher
    fields = {}
    if launcher is not None and not isinstance(launcher, str):
        for name in (
            "max_restarts",
            "workload_check_interval",
            "rank_termination_signal",
            "log_level",
            "initial_rank_heartbeat_timeout",
            "rank_heartbeat_timeout",
        ):
            if hasattr(launcher, name):
                fields[name] = getattr(launcher, name)
    return {
        "plugin": repr(plugin),
        # a program of ours the plugin runs in front of the task's own (LocalCheckpointPlugin's guard), or None
        "program_first": task.path if task.path != ENTRY else None,
        "args": [str(a) for a in task.args],
        "env": {k: str(v) for k, v in executor.env_vars.items()},
        "launcher": type(launcher).__name__ if launcher is not None else None,
        "launcher_fields": fields,
    }


def main(out_dir: str) -> None:
    os.makedirs(out_dir, exist_ok=True)
    ft = _apply(FaultTolerancePlugin(**FT))
    # On LocalExecutor the plugin writes its NVRx YAML content-addressed under $NEMORUN_HOME/resiliency/.
    with open(ft["env"]["PET_FT_CFG_PATH"]) as f:
        yaml_text = f.read()
    settings = {
        "fault_tolerance": ft,
        "straggler": _apply(StragglerDetectionPlugin(**STRAGGLER)),
        "inprocess_restart": _apply(InProcessRestartPlugin(**INPROCESS)),
        "inprocess_restart_long": _apply(InProcessRestartPlugin(**INPROCESS_LONG)),
        "fault_tolerance_calc": _apply(FaultTolerancePlugin(**FT_CALC)),
        "preemption": _apply(PreemptionPlugin(**PREEMPTION), CHECKPOINT_ARGS),
        "rerun": _apply(RerunStateMachinePlugin(**RERUN)),
        "async_checkpoint": _apply(AsyncCheckpointPlugin(**ASYNC), CHECKPOINT_ARGS),
        "local_checkpoint": _apply(LocalCheckpointPlugin(**LOCAL), CHECKPOINT_ARGS),
    }
    with open(os.path.join(out_dir, "ft_launcher.yaml"), "w") as f:
        f.write(yaml_text)
    for entry in settings.values():  # the program travels with the settings, by its file name
        if entry["program_first"]:
            shutil.copy(entry["program_first"], os.path.join(out_dir, os.path.basename(entry["program_first"])))
            entry["program_first"] = os.path.basename(entry["program_first"])
    with open(os.path.join(out_dir, "plugin_settings.json"), "w") as f:
        json.dump(settings, f, indent=2, sort_keys=True)
    print(yaml_text)
    print(json.dumps(settings, indent=2, sort_keys=True))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".whl/plugin")
