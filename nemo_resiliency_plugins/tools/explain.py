"""Dry-run a plugin set: what each plugin changed on the task and executor, and the final launch command.

Everything goes through NeMo-Run's own code paths: plugins are applied by ``Experiment.add`` (which clones
the task and executor first), and the command comes from ``Experiment.dryrun`` (for Slurm, the sbatch
script). A thin recording wrapper snapshots the task and executor around each plugin's ``setup``.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import tempfile
from dataclasses import dataclass, field
from typing import Any

import fiddle as fdl
import nemo_run as run

from nemo_resiliency_plugins.core import known_bugs, slurm_script

EXECUTOR_KINDS = ("local", "slurm", "docker", "dgx-cloud", "lepton", "skypilot", "skypilot-jobs", "kubeflow")
#: Kinds NeMo-Run can build only with its extras installed (``nemo_run[skypilot]``, ``nemo_run[kubeflow]``).
EXTRA_EXECUTOR_KINDS = ("skypilot", "skypilot-jobs", "kubeflow")


@dataclass
class PluginEffect:
    plugin: str
    task_changes: list[str] = field(default_factory=list)
    executor_changes: list[str] = field(default_factory=list)
    error: str | None = None


@dataclass
class Explanation:
    executor_kind: str
    task_kind: str
    effects: list[PluginEffect]
    command: str
    env: dict[str, str]
    launcher: str
    #: the warnings plugins logged while setting the job up (what they could not check or wire)
    notes: list[str] = field(default_factory=list)
    known_bugs: list[str] = field(default_factory=list)  # one line per known Megatron Bridge bug on the path

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(kw_only=True)
class _Recorder(run.Plugin):
    """Applies ``inner`` and records the difference it made (a tool of explain, not a test double)."""

    inner: Any
    effects: list = field(default_factory=list)

    def setup(self, task, executor):
        before_task, before_exec = _task_snapshot(task), _executor_snapshot(executor)
        effect = PluginEffect(type(self.inner).__name__)
        self.effects.append(effect)
        self.inner.setup(task, executor)
        effect.task_changes = _diff(before_task, _task_snapshot(task))
        effect.executor_changes = _diff(before_exec, _executor_snapshot(executor))


def make_executor(
    kind: str, *, nodes: int = 1, ntasks_per_node: int = 2, time: str = "04:00:00", job_dir: str | None = None
) -> Any:
    """A representative executor of ``kind`` for dry runs (nothing is launched)."""
    if kind == "local":
        return run.LocalExecutor(ntasks_per_node=ntasks_per_node)
    if kind == "slurm":
        return run.SlurmExecutor(
            account="your_account",
            partition="your_partition",
            nodes=nodes,
            ntasks_per_node=ntasks_per_node,
            time=time,
            tunnel=run.LocalTunnel(job_dir=job_dir or tempfile.mkdtemp(prefix="nrp-explain-")),
            packager=run.Packager(),
        )
    if kind == "docker":
        return run.DockerExecutor(container_image="nvcr.io/nvidia/nemo:latest", num_gpus=ntasks_per_node)
    image = "nvcr.io/nvidia/nemo:latest"
    if kind == "dgx-cloud":
        return run.DGXCloudExecutor(
            base_url="https://your-dgx-cloud/api/v1",
            kube_apiserver_url="https://your-kube-apiserver",
            client_id="your_client_id",
            client_secret="your_client_secret",
            project_name="your_project",
            container_image=image,
            pvc_nemo_run_dir="/your-pvc/nemo_run",
            pvcs=[{"name": "workspace", "path": "/your-pvc", "claimName": "your-pvc"}],
            nodes=nodes,
            gpus_per_node=ntasks_per_node,
            nprocs_per_node=ntasks_per_node,
            packager=run.Packager(),
        )
    if kind == "lepton":
        return run.LeptonExecutor(
            container_image=image,
            nemo_run_dir="/your-storage/nemo_run",
            nodes=nodes,
            gpus_per_node=ntasks_per_node,
            nprocs_per_node=ntasks_per_node,
            node_group="your_node_group",
            mounts=[{"path": "/your-storage", "mount_path": "/your-storage"}],
            packager=run.Packager(),
        )
    if kind in ("skypilot", "skypilot-jobs", "kubeflow"):
        return _optional_executor(kind, nodes=nodes, ntasks_per_node=ntasks_per_node, image=image)
    raise ValueError(f"executor kind {kind!r}: expected one of {', '.join(EXECUTOR_KINDS)}")


def _optional_executor(kind: str, *, nodes: int, ntasks_per_node: int, image: str) -> Any:
    """SkyPilot and Kubeflow executors need NeMo-Run's extras (and Kubeflow a kubeconfig) to be built at all."""
    from nemo_resiliency_plugins.errors import ResiliencyConfigError

    extra = "kubeflow" if kind == "kubeflow" else "skypilot"
    try:
        if kind == "kubeflow":
            return run.KubeflowExecutor(
                image=image,
                num_nodes=nodes,
                gpus_per_node=ntasks_per_node,
                workdir_pvc="your-workdir-pvc",
                packager=run.Packager(),
            )
        cls = run.SkypilotExecutor if kind == "skypilot" else run.SkypilotJobsExecutor
        return cls(gpus="H100", gpus_per_node=ntasks_per_node, num_nodes=nodes)
    except (ImportError, AssertionError) as err:
        # A missing optional piece, not a bad argument (exit 3: tools/requirements.py).
        from nemo_resiliency_plugins.tools.requirements import MissingModule

        raise MissingModule(
            f"--executor {kind}: NeMo-Run cannot build this executor here ({err}); pip install 'nemo_run[{extra}]'"
        ) from None
    except Exception as err:  # Kubeflow: no kubeconfig on this machine
        raise ResiliencyConfigError(
            "nemo-resiliency",
            "--executor",
            kind,
            detail=f"NeMo-Run's KubeflowExecutor loads a kubeconfig when it is built and failed: {err}",
        ) from None


def make_task(script: str | None = None, partial: bool = False) -> Any:
    """The task to explain: the user's script, the reference workload as a Partial, or as a Script."""
    if partial:
        from nemo_resiliency_plugins.testing import workload

        config = workload.reference_config_buildable("/checkpoints")
        config.checkpoint.load, config.checkpoint.save_interval = "/checkpoints", 1000
        return run.Partial(workload.pretrain, config=config)
    if script:
        return run.Script(path=script, entrypoint="python")
    return run.Script(
        path="nemo_resiliency_plugins.testing.workload",
        m=True,
        entrypoint="python",
        args=["checkpoint.save=/checkpoints", "checkpoint.load=/checkpoints", "checkpoint.save_interval=1000"],
    )


def explain(plugins: list[Any], task: Any, executor: Any, *, executor_kind: str, name: str = "train") -> Explanation:
    """Apply ``plugins`` through a real Experiment and dry-run it."""
    recorders = [_Recorder(inner=p) for p in plugins]
    notes = _Notes()
    package_logger = logging.getLogger("nemo_resiliency_plugins")
    package_logger.addHandler(notes)
    try:
        result = _explain(recorders, plugins, task, executor, executor_kind=executor_kind, name=name)
    finally:
        package_logger.removeHandler(notes)
    result.notes = list(dict.fromkeys(notes.messages))  # once each, in order
    # The rendered sbatch script still has what the Slurm requeue guard relies on in NeMo-Run's template (issue 29;
    # set-up checked the template source already, this checks what NeMo-Run actually rendered).
    problem = slurm_script.rendered_script_problem(result.command or "")
    if problem is not None:
        result.notes.append(problem)
    return result


class _Notes(logging.Handler):
    """Collects the plugins' warnings during ``exp.add`` (a plugin warns where it cannot check or wire a
    prerequisite: an invisible checkpoint directory, progress tracking that cannot act, ...)."""

    def __init__(self) -> None:
        super().__init__(level=logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def _explain(recorders, plugins, task, executor, *, executor_kind: str, name: str) -> Explanation:
    with run.Experiment(f"explain-{name}", executor=executor, log_level="ERROR") as exp:
        try:
            exp.add(task, executor=executor, plugins=recorders, name=name)
        except Exception as err:  # show which plugin refused, with its own message
            effects = [e for r in recorders for e in r.effects]
            if effects:
                effects[-1].error = f"{type(err).__name__}: {err}"
            return Explanation(executor_kind, _task_kind(task), effects, "", {}, "")
        job = exp.jobs[0]
        job.plugins = list(plugins)  # what gets serialized is the user's plugins, not the recorders
        exp.dryrun(log=False)
        info = getattr(job, "_dryrun_info", None)
        command = _command_text(info)
        launcher = repr(job.executor.get_launcher()) if job.executor.launcher else "none (plain command)"
        env = {k: str(v) for k, v in job.executor.env_vars.items()}
        bugs = [f"{f.verdict}: {f.line}" for f in known_bugs.findings(job.task)]
        if known_bugs.uses_inprocess_restart(job.task):
            from nemo_resiliency_plugins.inprocess_restart import deprecation_notice

            bugs.append(f"deprecated: {deprecation_notice()}")
    effects = [e for r in recorders for e in r.effects]
    return Explanation(executor_kind, _task_kind(task), effects, command, env, launcher, known_bugs=bugs)


def _command_text(info: Any) -> str:
    if info is None:
        return ""
    request = getattr(info, "request", None)
    materialize = getattr(request, "materialize", None)
    if callable(materialize):
        try:
            return str(materialize())
        except Exception:
            pass
    app = getattr(info, "_app", None)
    if app is not None and app.roles:
        role = app.roles[0]
        return " ".join([role.entrypoint, *map(str, role.args)])
    return str(info)


def _task_kind(task: Any) -> str:
    return "run.Script" if isinstance(task, run.Script) else f"run.{type(task).__name__}"


def _task_snapshot(task: Any) -> dict[str, str]:
    if isinstance(task, run.Script):
        snap = {f"args[{a}]": "present" for a in task.args}
        snap.update({f"env.{k}": repr(v) for k, v in (task.env or {}).items()})
        snap["entrypoint"] = repr(task.entrypoint)
        snap["path"], snap["m"] = repr(task.path), repr(task.m)  # a program put in front of the task's own
        return snap
    return _flatten(task, "task")


def _flatten(obj: Any, path: str) -> dict[str, str]:
    out: dict[str, str] = {}
    if isinstance(obj, fdl.Buildable):
        out[path] = f"run.{type(obj).__name__}({getattr(fdl.get_callable(obj), '__name__', '?')})"
        for key, value in obj.__arguments__.items():
            out.update(_flatten(value, f"{path}.{key}"))
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for f in dataclasses.fields(obj):
            out.update(_flatten(getattr(obj, f.name), f"{path}.{f.name}"))
    else:
        out[path] = repr(obj)
    return out


def _executor_snapshot(executor: Any) -> dict[str, str]:
    snap: dict[str, str] = {}
    for f in dataclasses.fields(executor):
        if not f.init or f.name in ("tunnel", "packager"):
            continue
        value = getattr(executor, f.name)
        if f.name == "env_vars":
            snap.update({f"env_vars.{k}": repr(v) for k, v in value.items()})
        elif f.name == "setup_lines":
            snap.update({f"setup_lines[{i}]": line for i, line in enumerate(str(value or "").splitlines())})
        else:
            snap[f.name] = repr(copy.copy(value))
    return snap


def _diff(before: dict[str, str], after: dict[str, str]) -> list[str]:
    changes = []
    for key in after:
        if key not in before:
            changes.append(f"+ {key}" if after[key] == "present" else f"+ {key} = {after[key]}")
        elif before[key] != after[key]:
            changes.append(f"~ {key}: {before[key]} -> {after[key]}")
    for key in before:
        if key not in after:
            changes.append(f"- {key}")
    return changes
