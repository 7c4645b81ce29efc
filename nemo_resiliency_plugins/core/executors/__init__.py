"""Per-executor rules, looked up by executor type: adding an executor is adding one class to ``RULES``.

    from nemo_resiliency_plugins.core.executors import for_executor
    rules = for_executor(executor)          # e.g. DockerRules(executor=...)
    rules.honours_retries, rules.group_rank(), rules.deliver_ft_config(content, plugin=...)

An executor type not in the map (KubeRay, or one this package has not been checked against) is refused by
name: a plugin must not guess how settings reach a job it has never seen.

The map names NeMo-Run's classes and looks them up on ``nemo_run`` when an executor is checked, not when this
module is imported: a class a NeMo-Run release renames or drops refuses that one executor (naming the class and
the NeMo-Run version installed), and every other executor and plugin keeps working (issue 29).
"""

from __future__ import annotations

import importlib.metadata
from typing import Any

import nemo_run as run

from nemo_resiliency_plugins.core.executors.base import ExecutorRules, FaultToleranceWithSections, node_count
from nemo_resiliency_plugins.core.executors.dgxcloud import DGXCloudRules
from nemo_resiliency_plugins.core.executors.docker import DockerRules
from nemo_resiliency_plugins.core.executors.kubeflow import KubeflowRules
from nemo_resiliency_plugins.core.executors.lepton import LeptonRules
from nemo_resiliency_plugins.core.executors.local import LocalRules
from nemo_resiliency_plugins.core.executors.skypilot import SkypilotJobsRules, SkypilotRules
from nemo_resiliency_plugins.core.executors.slurm import SlurmRules
from nemo_resiliency_plugins.errors import ResiliencyConfigError

#: NeMo-Run executor class (by its name on the ``nemo_run`` module) -> its rules. A subclass of a listed executor
#: gets its parent's rules. Checked against NeMo-Run 0.11.1 (tests/contract/test_version_coupling.py).
RULES_BY_NAME: dict[str, type[ExecutorRules]] = {
    "LocalExecutor": LocalRules,
    "SlurmExecutor": SlurmRules,
    "DockerExecutor": DockerRules,
    "DGXCloudExecutor": DGXCloudRules,
    "LeptonExecutor": LeptonRules,
    "SkypilotExecutor": SkypilotRules,
    "SkypilotJobsExecutor": SkypilotJobsRules,
    "KubeflowExecutor": KubeflowRules,
}


def nemo_run_version() -> str:
    try:
        return importlib.metadata.version("nemo-run")
    except importlib.metadata.PackageNotFoundError:  # a source checkout of NeMo-Run
        return "(version unknown)"


def executor_classes() -> dict[type, type[ExecutorRules]]:
    """The NeMo-Run classes this NeMo-Run has, each with its rules; a name it lacks (or cannot import) is left out."""
    found: dict[type, type[ExecutorRules]] = {}
    for name, rules in RULES_BY_NAME.items():
        try:
            cls = getattr(run, name, None)
        except Exception:  # noqa: BLE001 - a lazily imported class whose module fails: that executor only
            cls = None
        if isinstance(cls, type):
            found[cls] = rules
    return found


def missing_executor_classes() -> list[str]:
    """Names of the map that this NeMo-Run does not have (renamed or removed): those executors are refused."""
    present = {cls.__name__ for cls in executor_classes()}
    return [name for name in RULES_BY_NAME if name not in present]


#: Executors refused by class name, with the reason and the alternative.
REFUSED: dict[str, str] = {
    "KubeRayExecutor": (
        "KubeRayExecutor runs Ray clusters and Ray jobs (run.ray.RayCluster / RayJob, which take a command), "
        "not NeMo-Run tasks: Experiment.add refuses it (no assign()), and there is no launcher to make "
        "ft_launcher. For fault tolerance on Kubernetes use run.KubeflowExecutor (with workdir_pvc) or "
        "run.DGXCloudExecutor"
    ),
}

#: The executor names this package supports, for messages.
SUPPORTED = ", ".join(f"run.{name}" for name in RULES_BY_NAME)


def for_executor(executor: Any, *, plugin: str = "nemo-resiliency") -> ExecutorRules:
    """The rules object for ``executor``; a ``ResiliencyConfigError`` naming it when it has none."""
    classes = executor_classes()
    for cls in type(executor).__mro__:
        rules = classes.get(cls)
        if rules is not None:
            return rules(executor=executor)
    name = type(executor).__name__
    if name in RULES_BY_NAME and getattr(run, name, None) is not type(executor):
        # The class is not the one NeMo-Run exports under that name (NeMo-Run renamed or moved it): its rules were
        # checked against NeMo-Run 0.11.1's class, not this one.
        reason = (
            f"NeMo-Run {nemo_run_version()} does not export run.{name} as the class this package was checked against "
            "(NeMo-Run 0.11.1); the plugins refuse this executor rather than guess how settings reach its job. "
            "Install a NeMo-Run in the tested range (nemo-run>=0.11.1,<0.12)"
        )
    else:
        reason = REFUSED.get(name) or (
            f"{name} is not an executor this package has been checked against (how env, files and retries reach its "
            f"job); supported: {SUPPORTED}"
        )
        gone = missing_executor_classes()
        if gone:
            reason += f" (NeMo-Run {nemo_run_version()} lacks {', '.join(gone)})"
    raise ResiliencyConfigError(plugin, "executor", name, detail=reason)


__all__ = [
    "REFUSED",
    "RULES_BY_NAME",
    "SUPPORTED",
    "ExecutorRules",
    "FaultToleranceWithSections",
    "executor_classes",
    "for_executor",
    "missing_executor_classes",
    "nemo_run_version",
    "node_count",
]
