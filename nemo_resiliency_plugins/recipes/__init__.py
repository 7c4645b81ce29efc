"""The recipe catalog: named, documented, validated plugin sets, attached in one line.

    from nemo_resiliency_plugins.recipes import get_recipe
    run.run(task, executor=executor, plugins=get_recipe("slurm-pretraining"))
    run.run(task, executor=executor, plugins=get_recipe("slurm-pretraining",
            FaultTolerancePlugin={"num_in_job_restarts": 5}))

Overrides are given per plugin class name, field by field; an unknown plugin or field is a
``ResiliencyConfigError`` (a typo must not silently leave a default in place). This folder ships in the
wheel as ``nemo_resiliency_plugins.recipes``; next to the catalog are example experiment scripts to copy
(``local_fault_tolerance.py`` is the main example job).
"""

from __future__ import annotations

import copy
import dataclasses
import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from nemo_resiliency_plugins.errors import ResiliencyConfigError

# Plugin class name -> module, imported only when a recipe is built.
PLUGIN_MODULES = {
    "FaultTolerancePlugin": "nemo_resiliency_plugins.fault_tolerance",
    "StragglerDetectionPlugin": "nemo_resiliency_plugins.straggler",
    "PreemptionPlugin": "nemo_resiliency_plugins.preemption",
    "RerunStateMachinePlugin": "nemo_resiliency_plugins.rerun",
    "InProcessRestartPlugin": "nemo_resiliency_plugins.inprocess_restart",
    "AsyncCheckpointPlugin": "nemo_resiliency_plugins.async_checkpoint",
    "LocalCheckpointPlugin": "nemo_resiliency_plugins.local_checkpoint",
}


@dataclass(frozen=True)
class Recipe:
    """A named plugin set: ``plugins`` maps plugin class names to their settings, in application order."""

    name: str
    summary: str
    description: str
    executors: tuple[str, ...]
    plugins: Mapping[str, Mapping[str, Any]]
    example: str | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    def build(self, **overrides: Mapping[str, Any]) -> list[Any]:
        """Fresh plugin instances. The catalog's settings are deep-copied into each, so changing a built
        plugin (or a dict it holds, such as ``section_timeouts``) never changes the catalog or a later build."""
        for class_name, extra in overrides.items():
            if not isinstance(extra, Mapping):
                raise ResiliencyConfigError(
                    f"recipe {self.name!r}",
                    class_name,
                    extra,
                    "a mapping of field name -> value, e.g. {'num_in_job_restarts': 5}",
                )
        unknown = set(overrides) - set(self.plugins)
        if unknown:
            raise ResiliencyConfigError(
                f"recipe {self.name!r}",
                sorted(unknown)[0],
                overrides[sorted(unknown)[0]],
                "one of " + ", ".join(self.plugins),
                detail="overrides are keyed by the plugin class names of the recipe",
            )
        built = []
        for class_name, settings in self.plugins.items():
            cls = plugin_class(class_name)
            extra = copy.deepcopy(dict(overrides.get(class_name, {})))
            names = {f.name for f in dataclasses.fields(cls) if f.init}
            for key in extra:
                if key not in names:
                    raise ResiliencyConfigError(
                        class_name, key, extra[key], "a field of " + class_name, detail=f"in recipe {self.name!r}"
                    )
            built.append(cls(**{**copy.deepcopy(dict(settings)), **extra}))
        return built


def plugin_class(name: str) -> type:
    module = PLUGIN_MODULES.get(name)
    if module is None:
        raise ResiliencyConfigError("recipes", "plugin", name, "one of " + ", ".join(PLUGIN_MODULES))
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as err:
        raise ResiliencyConfigError(
            "recipes", "plugin", name, detail=f"{name} is not available in this version ({err})"
        ) from err


_SLURM_FT = {
    # Megatron Bridge's plugin defaults, with the section timeouts its docs recommend.
    "num_in_job_restarts": 3,
    "num_job_retries_on_failure": 2,
    "calc_ft_timeouts": True,
}
# slurm-pretraining's plugins; slurm-pretraining-local-checkpoints adds one (Recipe.build deep-copies the settings).
_SLURM_PRETRAINING = {
    "FaultTolerancePlugin": _SLURM_FT,
    "PreemptionPlugin": {"preempt_time": 60},
    "StragglerDetectionPlugin": {"gpu_relative_perf_threshold": 0.7, "report_time_interval": 300.0},
    "AsyncCheckpointPlugin": {},
}

RECIPES: dict[str, Recipe] = {
    r.name: r
    for r in (
        Recipe(
            name="slurm-pretraining",
            summary="Production pretraining on Slurm: FT, computed timeouts, restarts, retries, preemption, stragglers",
            description=(
                "NVRx fault tolerance under ft_launcher with section timeouts (600/180/420 s, out-of-section 300 s) "
                "and timeouts computed from the first run (ft_state.json), 3 in-job restarts and 2 job retries "
                "(Slurm requeues); SIGTERM 60 s before the time limit with Megatron Bridge's exit handler saving a "
                "checkpoint; NVRx straggler detection with threshold 0.7 and a report every 300 seconds; "
                "checkpoints saved asynchronously (NVRx's writer, torch_dist), so a save does not stall training."
            ),
            executors=("slurm",),
            plugins=_SLURM_PRETRAINING,
            notes=("AsyncCheckpointPlugin needs checkpoint.save on the task (a torch_dist or fsdp_dtensor format).",),
        ),
        Recipe(
            name="slurm-pretraining-local-checkpoints",
            summary="slurm-pretraining plus node-local checkpoints every 20 steps: less work lost per failure",
            description=(
                "Everything in slurm-pretraining, plus NVRx local checkpoints (Megatron Bridge "
                "non_persistent_ckpt_type='local') to /local/scratch/ckpt every 20 steps beside the persistent "
                "schedule: an in-job restart on the same nodes resumes from the newest local checkpoint, a requeue "
                "onto other nodes from the newest persistent one (the preemption exit always writes one)."
            ),
            executors=("slurm",),
            plugins={
                **_SLURM_PRETRAINING,
                "LocalCheckpointPlugin": {
                    "non_persistent_local_ckpt_dir": "/local/scratch/ckpt",
                    "non_persistent_save_interval": 20,
                },
            },
            notes=(
                "The task must set checkpoint.save, checkpoint.load and checkpoint.save_interval (> 20).",
                "Set LocalCheckpointPlugin.non_persistent_local_ckpt_dir to your nodes' local disk; with 2+ nodes "
                "add replication: LocalCheckpointPlugin={'replication': True, 'replication_jump': <ranks per node>}.",
            ),
        ),
        Recipe(
            name="kubernetes",
            summary="Kubernetes (Kubeflow, DGX Cloud, Lepton): FT, restarts, preemption save, stragglers, NaN checks",
            description=(
                "NVRx fault tolerance under ft_launcher with section timeouts (600/180/420 s, out-of-section 300 s) "
                "and 3 in-job restarts; the section timeouts ride in NeMo-Run's <job>_executor.yaml (Kubeflow needs "
                "workdir_pvc). No job retries: these executors do not resubmit a failed job. Megatron Bridge's "
                "SIGTERM exit handler saves a checkpoint when a pod is stopped (Kubernetes gives 30 s before SIGKILL "
                "by default), NVRx straggler detection, and the rerun state machine's NaN check."
            ),
            executors=("dgx-cloud", "kubeflow", "lepton"),
            plugins={
                "FaultTolerancePlugin": {"num_in_job_restarts": 3, "num_job_retries_on_failure": 0},
                "PreemptionPlugin": {"preempt_time": 60},
                "StragglerDetectionPlugin": {"gpu_relative_perf_threshold": 0.7, "report_time_interval": 300.0},
                "RerunStateMachinePlugin": {"rerun_mode": "disabled", "check_for_nan_in_loss": True},
            },
            notes=(
                "preempt_time has no effect off Slurm; the pod's SIGTERM -> SIGKILL grace period bounds the save "
                "(Kubeflow: pod_spec_overrides={'terminationGracePeriodSeconds': N}).",
                "The pod's SIGTERM goes to the container's first process: PreemptionPlugin puts this package's "
                "container entry there (DGX Cloud: custom_spec command/args; Lepton: the first pre-launch command; "
                "Kubeflow with workdir_pvc: container_kwargs['command']), which passes it to ft_launcher.",
                "Lepton: one node only (NeMo-Run 0.11.1 renders a multi-node ft_launcher with bash's PID as the "
                "node rank).",
            ),
        ),
        Recipe(
            name="dgx-cloud",
            summary="DGX Cloud (Run:ai): FT with section timeouts and in-job restarts, straggler detection",
            description=(
                "NVRx fault tolerance under ft_launcher with section timeouts (600/180/420 s, out-of-section 300 s) "
                "and timeouts computed from the first run (ft_state.json), 3 in-job restarts (PET_MAX_RESTARTS: "
                "NeMo-Run drops --max-restarts on DGX Cloud); GROUP_RANK comes from DGX Cloud's launch script. No job "
                "retries (DGXCloudExecutor does not resubmit). NVRx straggler detection with threshold 0.7."
            ),
            executors=("dgx-cloud",),
            plugins={
                "FaultTolerancePlugin": {
                    "num_in_job_restarts": 3,
                    "num_job_retries_on_failure": 0,
                    "calc_ft_timeouts": True,
                },
                "StragglerDetectionPlugin": {"gpu_relative_perf_threshold": 0.7, "report_time_interval": 300.0},
            },
        ),
        Recipe(
            name="local-smoke",
            summary="Rehearse on one machine: short timeouts and a fault, what CI runs",
            description=(
                "FaultTolerancePlugin with short section timeouts (setup 120 s, step 10 s, checkpointing 60 s) and "
                "a 1 s rank-monitor check, so a hang is caught within seconds; used with the reference workload "
                "and an injected fault (python -m nemo_resiliency_plugins.recipes.local_fault_tolerance)."
            ),
            executors=("local", "slurm"),
            plugins={
                "FaultTolerancePlugin": {
                    "num_in_job_restarts": 3,
                    "num_job_retries_on_failure": 0,
                    "section_timeouts": {"setup": 120.0, "step": 10.0, "checkpointing": 60.0},
                    "out_of_section_timeout": 60.0,
                    "workload_check_interval": 1.0,
                },
            },
            example="local_fault_tolerance.py",
        ),
        Recipe(
            name="inprocess-restart",
            summary="In-process restart (experimental), layered with job-level fault tolerance; refuses Slurm",
            description=(
                "NVRx in-process restart (same processes, no relaunch) for exceptions, with FaultTolerancePlugin's "
                "ft_launcher as the fallback for killed or hung ranks, as Megatron Bridge's own CI runs it. "
                "Refuses run.SlurmExecutor (use srun --kill-on-bad-exit=0 with NVRx's wait daemon there)."
            ),
            executors=("local",),
            plugins={
                "InProcessRestartPlugin": {},
                "FaultTolerancePlugin": {"num_in_job_restarts": 3, "num_job_retries_on_failure": 0},
            },
        ),
        Recipe(
            name="inprocess-async",
            summary="In-process restart with asynchronous checkpoints, on Megatron Core's async queue "
            "(Megatron-Bridge#5842's workaround on 0.6.x)",
            description=(
                "inprocess-restart plus AsyncCheckpointPlugin. On Megatron Bridge 0.6.x the in-process abort resets "
                "only Megatron Core's async results queue, so NVRx's writer (async_strategy='nvrx', the default) would "
                "hand the next save a stale result (Megatron-Bridge#5842, refused by the plugins); this recipe takes "
                "async_strategy='mcore', which the abort resets. doctor reports the bug and the workaround."
            ),
            executors=("local",),
            plugins={
                "InProcessRestartPlugin": {},
                "FaultTolerancePlugin": {"num_in_job_restarts": 3, "num_job_retries_on_failure": 0},
                "AsyncCheckpointPlugin": {"async_strategy": "mcore"},
            },
            notes=("AsyncCheckpointPlugin needs checkpoint.save on the task (a torch_dist format).",),
        ),
        Recipe(
            name="inprocess-warm-reserve",
            summary="A killed rank is replaced by a warm reserve rank in the same job (in-process restart, rank "
            "granularity); ft_launcher restarts the group once no reserve is left",
            description=(
                "InProcessRestartPlugin with active_world_size below the executor's ranks: the extra ranks wait "
                "inside NVRx's wrapper, a killed or hung rank's place goes to one of them, the survivors re-enter "
                "training in the same processes and resume from the last checkpoint. Each rank runs under "
                "nemo_resiliency_plugins.job.rank_keeper so that torchrun/ft_launcher do not tear the group down when "
                "one rank dies. FaultTolerancePlugin comes first, with fixed section timeouts above the in-process "
                "barrier (calculated ones would kill the survivors mid-restart), as the fallback once the reserves "
                "are used up. run.Script tasks only; refuses Slurm."
            ),
            executors=("local",),
            plugins={
                "FaultTolerancePlugin": {
                    "num_in_job_restarts": 3,
                    "num_job_retries_on_failure": 0,
                    "calc_ft_timeouts": False,
                    "section_timeouts": {"setup": 600.0, "step": 300.0, "checkpointing": 600.0},
                },
                "InProcessRestartPlugin": {"granularity": "rank", "active_world_size": 1},
            },
            notes=(
                "active_world_size=1 is the 2-rank demonstration (1 training rank + 1 reserve); set it to your "
                "training world size, e.g. InProcessRestartPlugin={'active_world_size': 7} on one 8-GPU node.",
                "Megatron Bridge 0.6 computes data_parallel_size from WORLD_SIZE (reserves included) before NVRx "
                "assigns ranks: global batch sizes must divide by both the full and the active data-parallel size.",
            ),
        ),
        Recipe(
            name="determinism-debugging",
            summary="Find nondeterminism and silent data corruption with the rerun state machine",
            description=(
                "Megatron Core's rerun state machine in validate_results mode: a NaN or spiky loss makes the step "
                "run again to tell a reproducible result (exit 16: a checkpoint is saved; resume on a different GPU "
                "to disambiguate) from a transient fault (exit 17: not reproduced, no checkpoint; resume from the "
                "last one)."
            ),
            executors=("local", "slurm"),
            plugins={
                "RerunStateMachinePlugin": {
                    "rerun_mode": "validate_results",
                    "check_for_nan_in_loss": True,
                    "check_for_spiky_loss": True,
                },
            },
        ),
    )
}


def list_recipes() -> list[Recipe]:
    return list(RECIPES.values())


def get_recipe(name: str, **overrides: Mapping[str, Any]) -> list[Any]:
    """The plugin instances of recipe ``name``, with per-plugin field overrides (new instances each call)."""
    if not isinstance(name, str) or name not in RECIPES:
        raise ResiliencyConfigError("recipes", "name", name, "one of " + ", ".join(RECIPES))
    return RECIPES[name].build(**overrides)


RecipeBuilder = Callable[..., list[Any]]

__all__ = ["RECIPES", "Recipe", "get_recipe", "list_recipes", "plugin_class"]
