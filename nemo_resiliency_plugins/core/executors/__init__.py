"""Per-executor rules, looked up by executor type: adding an executor is adding one class to ``RULES``.

    from nemo_resiliency_plugins.core.executors import for_executor
    rules = for_executor(executor)          # e.g. DockerRules(executor=...)
    rules.honours_retries, rules.group_rank(), rules.deliver_ft_config(content, plugin=...)

An executor type not in the map (KubeRay, or one this package has not been checked against) is refused by
name: a plugin must not guess how settings reach a job it has never seen.
"""

from __future__ import annotations

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

#: Executor type -> its rules. A subclass of a listed executor gets its parent's rules.
RULES: dict[type, type[ExecutorRules]] = {
    run.LocalExecutor: LocalRules,
    run.SlurmExecutor: SlurmRules,
    run.DockerExecutor: DockerRules,
    run.DGXCloudExecutor: DGXCloudRules,
    run.LeptonExecutor: LeptonRules,
    run.SkypilotExecutor: SkypilotRules,
    run.SkypilotJobsExecutor: SkypilotJobsRules,
    run.KubeflowExecutor: KubeflowRules,
}

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
SUPPORTED = ", ".join(f"run.{cls.__name__}" for cls in RULES)


def for_executor(executor: Any, *, plugin: str = "nemo-resiliency") -> ExecutorRules:
    """The rules object for ``executor``; a ``ResiliencyConfigError`` naming it when it has none."""
    for cls in type(executor).__mro__:
        rules = RULES.get(cls)
        if rules is not None:
            return rules(executor=executor)
    name = type(executor).__name__
    reason = REFUSED.get(name) or (
        f"{name} is not an executor this package has been checked against (how env, files and retries reach its "
        f"job); supported: {SUPPORTED}"
    )
    raise ResiliencyConfigError(plugin, "executor", name, detail=reason)


__all__ = ["REFUSED", "RULES", "SUPPORTED", "ExecutorRules", "FaultToleranceWithSections", "for_executor", "node_count"]
