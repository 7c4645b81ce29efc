"""``nemo-resiliency doctor``: why does training hang, why did fault tolerance not trigger?

Each check looks at what a job will really get - the task and executor after the plugins ran (from an
experiment directory NeMo-Run saved, or from a recipe applied to a representative task) - and gives a
verdict: ``pass``, ``warn``, ``FAIL`` or ``n/a``. Any FAIL makes the command exit non-zero.
"""

from __future__ import annotations

import copy
import os
import re
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import nemo_run as run
from nemo_run.core.execution.launcher import FaultTolerance, Torchrun

from nemo_resiliency_plugins.core import executor_config, front_program, known_bugs, nvrx_launcher
from nemo_resiliency_plugins.core.hydra_overrides import OverrideSyntaxError, find_overrides
from nemo_resiliency_plugins.core.task_config import read_config_field
from nemo_resiliency_plugins.errors import ResiliencyConfigError
from nemo_resiliency_plugins.fault_tolerance import MEGATRON_BRIDGE_SECTIONS
from nemo_resiliency_plugins.inprocess_restart import STORE_PORTS_NOTE
from nemo_resiliency_plugins.inprocess_restart import env_problems as inprocess_env_problems

# Re-exported: tests and tools import these from doctor.
from nemo_resiliency_plugins.tools.check_result import Check
from nemo_resiliency_plugins.tools.check_result import check as _check
from nemo_resiliency_plugins.tools.doctor_checkpoints import (
    TIGHT_TIMEOUT_S,
    _checkpoint_checks,
    _ft_state_checks,
    _resume_check,
)
from nemo_resiliency_plugins.tools.timeout_chain import timeout_chain

__all__ = ["CHECKS", "TIGHT_TIMEOUT_S", "Check", "check_job", "jobs_from_experiment_dir", "summarize"]


def _task_ft_enabled(task: Any) -> bool | None:
    """Does the task switch Megatron Bridge's FT package on? None when it says nothing."""
    return read_config_field(task, "ft", "enable_ft_package", plugin="doctor")


def _checkpoint_dir(task: Any) -> str | None:
    value = read_config_field(task, "checkpoint", "save", plugin="doctor")
    return str(value) if value else None


def _ft_cfg(executor: Any) -> tuple[str | None, dict | None, str | None]:
    path = executor.env_vars.get(nvrx_launcher.CONFIG_PATH_ENV)
    if not path:
        return None, None, None
    carried = getattr(executor.launcher, "fault_tolerance", None)
    if isinstance(carried, dict) and carried:
        # Off Local and Slurm the mapping rides in the launcher, and NeMo-Run writes it to the file ft_launcher
        # reads (<job_dir>/configs/<job>_executor.yaml): what the launcher carries is what NVRx gets.
        return path, carried, None
    from nemo_resiliency_plugins.tools.saved_plugins import read_regular

    if not os.path.lexists(path):
        return path, None, "not on this machine (it is written by the sbatch script on the cluster)"
    # The path comes from a saved job: a FIFO or a device there must not block or fill doctor (read_regular).
    raw = read_regular(Path(path))
    if raw is None:
        return path, None, "unreadable: not a regular file of a size NVRx's config could have"
    try:
        import yaml

        data = yaml.safe_load(raw) or {}
        return path, data.get("fault_tolerance") or {}, None
    except Exception as err:  # a broken file is a finding, not a crash
        return path, None, f"unreadable: {err}"


@dataclass
class _Job:
    """One job as the checks see it: the task and executor after the plugins ran, and what the user told us."""

    task: Any
    executor: Any
    plugins: list[Any]
    checkpoint_dir: str | None
    step_time_s: float | None
    save_time_s: float | None

    def __post_init__(self) -> None:
        launcher = self.executor.launcher
        self.is_ft = isinstance(launcher, FaultTolerance) or launcher == "ft"
        if launcher == "torchrun":
            launcher = Torchrun()
        elif launcher == "ft":
            launcher = FaultTolerance()
        self.launcher = launcher
        self.slurm = isinstance(self.executor, run.SlurmExecutor)
        self.ft_on = _task_ft_enabled(self.task)

    def plugin(self, name: str) -> Any:
        return next((p for p in self.plugins if type(p).__name__ == name), None)


def check_job(
    task: Any,
    executor: Any,
    plugins: list[Any] | None = None,
    *,
    checkpoint_dir: str | None = None,
    step_time_s: float | None = None,
    save_time_s: float | None = None,
) -> list[Check]:
    """All checks for one job (task + executor after plugins), in the order of :data:`CHECKS`.

    A task whose overrides Hydra cannot parse gets one FAIL saying so (the job would fail on it at start):
    the other checks read those overrides.
    """
    if isinstance(task, run.Script):
        try:
            find_overrides(task.args)
        except OverrideSyntaxError as err:
            return [Check("task.args parse with Hydra's override parser", "FAIL", str(err))]
    job = _Job(task, executor, list(plugins or []), checkpoint_dir, step_time_s, save_time_s)
    return [check for step in CHECKS for check in step(job)]


def _check_launcher(job: _Job) -> list[Check]:
    """The launcher must be NVRx's ft_launcher when the task enables Megatron Bridge's FT package."""
    launcher, is_ft = job.launcher, job.is_ft
    name = "launcher is ft_launcher"
    if job.ft_on:
        kind = type(launcher).__name__ if not isinstance(launcher, str) else repr(launcher)
        detail = (
            "ft_launcher"
            if is_ft
            else (
                f"launcher is {kind}: ft.enable_ft_package=true under torchrun raises RankMonitorClientError at start "
                "(no rank monitor)"
            )
        )
        checks = [_check(name, is_ft, detail)]
    else:
        detail = "ft_launcher" if is_ft else "the task does not enable Megatron Bridge's FT package"
        checks = [Check(name, "pass" if is_ft else "n/a", detail)]
    if isinstance(launcher, Torchrun) and not is_ft:
        checks.append(Check("hang detection", "warn", "torchrun restarts crashed ranks but never detects a hang"))
    return checks


#: Plugins whose restarts need the job to resume from what it saved.
_RESTARTING = ("PreemptionPlugin", "InProcessRestartPlugin", "FaultTolerancePlugin")


def _check_resume(job: _Job) -> list[Check]:
    if job.is_ft or any(job.plugin(name) is not None for name in _RESTARTING):
        return [_resume_check(job.task)]
    return []


def _check_ft_sections(job: _Job) -> list[Check]:
    """Sections declared (Megatron Bridge's own names), heartbeats kept away from a section-based job."""
    if not job.is_ft:
        return []
    path, cfg, problem = _ft_cfg(job.executor)
    hb = [getattr(job.launcher, n, None) for n in ("initial_rank_heartbeat_timeout", "rank_heartbeat_timeout")]
    name = "section timeouts declared"
    if path is None:
        checks = [
            Check(
                name,
                "FAIL",
                f"no {nvrx_launcher.CONFIG_PATH_ENV} and NeMo-Run cannot pass section flags: NVRx "
                "monitors no section of a Megatron Bridge job (hangs are never caught)",
            )
        ]
    elif cfg is None:
        in_script = job.slurm and path.split("/")[-1] in (job.executor.setup_lines or "")
        detail = f"{path}: {problem}" + ("; the sbatch script writes it" if in_script else "")
        checks = [Check(name, "pass" if in_script else "FAIL", detail)]
    else:
        sections = cfg.get("rank_section_timeouts") or {}
        missing = [s for s in MEGATRON_BRIDGE_SECTIONS if s not in sections]
        checks = [_check(name, not missing, f"{sections}" + (f"; missing {missing}" if missing else ""))]
    name = "no heartbeat timeouts on a section-based job"
    if job.ft_on is not False and any(v is not None for v in hb):
        detail = (
            f"launcher passes heartbeat timeouts {hb}: Megatron Bridge sends no heartbeats, so NVRx kills a "
            "healthy job once initial_rank_heartbeat_timeout passes"
        )
        checks.append(Check(name, "FAIL", detail))
    else:
        checks.append(Check(name, "pass", "none passed"))
    return checks


def _check_ft_launch(job: _Job) -> list[Check]:
    """One infrastructure rank per node, flags NVRx accepts, progress tracking, ft_launcher on PATH here."""
    if not job.is_ft:
        return []
    path, cfg, _ = _ft_cfg(job.executor)
    checks = [_infra_rank_check(job.executor)]
    checks.extend(_flag_checks(job.task, job.executor))
    checks.extend(_launcher_args_checks(job))
    checks.extend(_progress_checks(job.executor, path, cfg, job.slurm))
    try:
        fix = "install nvidia-resiliency-ext where the job runs"
        executor_config.require_program(job.task, job.executor, "ft_launcher", plugin="doctor", fix=fix)
    except ResiliencyConfigError as err:
        checks.append(Check("ft_launcher resolvable", "FAIL", err.detail or str(err)))
    else:
        if _runs_here(job.executor):
            checks.append(Check("ft_launcher resolvable", "pass", "on the PATH the local job will see"))
    return checks


def _launcher_args_checks(job: _Job) -> list[Check]:
    """FaultTolerancePlugin.launcher_args, judged by the plugin (its words) and the core (the Slurm block)."""
    from nemo_resiliency_plugins.core import launcher_args

    plugin = job.plugin("FaultTolerancePlugin")
    words_of = getattr(plugin, "launcher_words", None)
    if not callable(words_of) or not getattr(plugin, "launcher_args", None):
        return []
    try:
        words = words_of()
    except ResiliencyConfigError as err:
        return [Check("launcher_args", "FAIL", str(err))]
    line = f"{launcher_args.ARRAY_NAME}=({' '.join(words)})"
    on_line = job.slurm and line in (getattr(job.executor, "setup_lines", None) or "")
    return [
        _check(
            "launcher_args reach ft_launcher",
            on_line,
            f"{' '.join(words)} (NVRx {launcher_args.nvrx_version()}'s parser accepts them; the sbatch block adds "
            "them after ft_launcher)"
            if on_line
            else f"{' '.join(words)} are not in the job's sbatch script",
        )
    ]


def _check_ft_state(job: _Job) -> list[Check]:
    # A plugin's checkpoint_dir declares the directory of a task that does not show checkpoint.save.
    declared = next((p.checkpoint_dir for p in job.plugins if getattr(p, "checkpoint_dir", None)), None)
    ckpt = job.checkpoint_dir or _checkpoint_dir(job.task) or declared
    return _ft_state_checks(Path(ckpt) / "ft_state.json", job.save_time_s) if ckpt else []


def _check_inprocess_env(job: _Job) -> list[Check]:
    """The environment InProcessRestartPlugin requires, judged by the plugin's own rule."""
    if job.plugin("InProcessRestartPlugin") is None:
        return []
    wrong = inprocess_env_problems(job.task, job.executor)
    detail = f"wrong or missing: {wrong}" if wrong else "as InProcessRestartPlugin requires"
    return [_check("in-process env vars", not wrong, detail), Check("in-process store ports", "warn", STORE_PORTS_NOTE)]


def _check_timeout_chain(job: _Job) -> list[Check]:
    nccl = _nccl_timeout_s(job.task)
    links = timeout_chain(
        job.plugins, job.executor, step_time_s=job.step_time_s, save_time_s=job.save_time_s, nccl_timeout_s=nccl
    )
    verdicts = {True: "pass", False: "FAIL", None: "n/a"}
    return [Check(f"timeouts: {link.name}", verdicts[link.ok], link.detail) for link in links]


def _check_known_bugs(job: _Job) -> list[Check]:
    """Known Megatron Bridge / NVRx bugs on this job's path, judged from the code installed here; and NVRx's
    deprecation of in-process restart where the job uses it (the plugin's own notice)."""
    checks = [Check(f"known bug {f.bug.ref}", f.verdict, f.line) for f in known_bugs.findings(job.task)]
    if known_bugs.uses_inprocess_restart(job.task):
        from nemo_resiliency_plugins.inprocess_restart import deprecation_notice

        checks.append(Check("in-process restart: deprecated upstream", "warn", deprecation_notice()))
    return checks


def _check_checkpoints(job: _Job) -> list[Check]:
    return _checkpoint_checks(job.task, job.executor)


def _check_image_needs(job: _Job) -> list[Check]:
    """What the job's image needs of this package: nothing where the plugins ship their programs as files; the
    rank keeper as a module elsewhere. A warning: the image may well have it."""
    return [Check("the job's image has this package", "warn", line) for line in front_program.image_needs(job.task)]


def _check_container(job: _Job) -> list[Check]:
    """A launched Docker job: how its container really ended (NeMo-Run's own state can miss it)."""
    return [_container_exit_check(job.executor)] if isinstance(job.executor, run.DockerExecutor) else []


def _container_exit_check(executor: Any) -> Check:
    """The exit status the container's command line wrote into the job directory (tools/job_outcome.py says
    why NeMo-Run's state may still read SUBMITTED for a job that finished)."""
    from nemo_resiliency_plugins.tools.job_outcome import container_exit_codes

    name = "container exit status"
    job_dir = getattr(executor, "job_dir", "") or ""
    if not job_dir or not os.path.isdir(job_dir):
        return Check(name, "n/a", "the job was not launched (no job directory)")
    codes = container_exit_codes(job_dir)
    if not codes:
        return Check(
            name,
            "n/a",
            f"no status_*.out in {job_dir}: not launched yet, still running, or killed before the container's "
            "command line could write one",
        )
    failed = {c: v for c, v in codes.items() if v != 0}
    where = f"(from {job_dir}/status_<container>.out, written by the container itself)"
    if failed:
        return Check(name, "FAIL", f"{failed} {where}")
    return Check(
        name,
        "pass",
        f"every container exited 0 {where}; if NeMo-Run still shows SUBMITTED or UNKNOWN, its wait lost the race "
        "with the container's auto-removal (docs/races.md): the job did finish",
    )


def _progress_checks(executor: Any, path: str | None, cfg: dict | None, slurm: bool) -> list[Check]:
    """NVRx's progress tracker needs the iteration file; on Slurm the guard must not requeue its stop."""
    setup_lines = getattr(executor, "setup_lines", None) or ""  # only a SlurmExecutor has them
    text = "\n".join(f"{k}: {v}" for k, v in cfg.items()) if cfg is not None else setup_lines
    cycles = re.search(r"max_no_progress_cycles: (-?\d+)", text)
    iteration = re.search(r"checkpoint_iteration_file: (.+)", text)
    checks = []
    if cycles is None:
        checks.append(Check("progress tracking (max_no_progress_cycles)", "n/a", "no NVRx config file to read"))
    elif int(cycles.group(1)) <= 0:
        checks.append(Check("progress tracking (max_no_progress_cycles)", "n/a", "off (max_no_progress_cycles <= 0)"))
    else:
        checks.append(
            Check(
                "progress tracking (max_no_progress_cycles)",
                "pass" if iteration else "warn",
                f"reads {iteration.group(1).strip()}"
                if iteration
                else "no checkpoint_iteration_file: NVRx counts no progress, so a crash that repeats every cycle uses "
                "up every restart and retry (set FaultTolerancePlugin.checkpoint_dir)",
            )
        )
    if slurm:
        env = executor.env_vars
        checks.append(
            _check(
                "NVRx's no-restart exit is not requeued",
                bool(env.get("NRP_NO_RESTART_EXIT_CODE")) and "nrp_exclude_failed_node" in setup_lines,
                f"exit code {env.get('NRP_NO_RESTART_EXIT_CODE')} ends the job FAILED"
                if env.get("NRP_NO_RESTART_EXIT_CODE")
                else "the requeue guard does not know NVRx's no-restart code: the job is requeued after NVRx said stop",
            )
        )
        nodes = getattr(executor, "nodes", 1) or 1
        on = env.get("NRP_EXCLUDE_FAILED_NODES") == "1"
        checks.append(
            Check(
                "failed node excluded on requeue",
                "pass" if on else ("n/a" if nodes == 1 else "warn"),
                "the node that failed first is excluded from the requeued job"
                if on
                else ("one-node job" if nodes == 1 else "off: a requeue can land on the node that just failed"),
            )
        )
    return checks


def _runs_here(executor: Any) -> bool:
    from nemo_resiliency_plugins.core.executors import for_executor

    try:
        return for_executor(executor).runs_here
    except ResiliencyConfigError:
        return False


def _infra_rank_check(executor: Any) -> Check:
    """NVRx takes each node's infrastructure rank from SLURM_PROCID, else GROUP_RANK, else assigns one; two
    nodes with the same rank fail its rendezvous ("Duplicate infrastructure ranks detected")."""
    from nemo_resiliency_plugins.core.executors import for_executor

    name = "GROUP_RANK off Slurm"
    try:
        rules = for_executor(executor)
    except ResiliencyConfigError as err:
        return Check(name, "FAIL", str(err))
    value = executor.env_vars.get("GROUP_RANK")
    if rules.infra_rank_env:
        return Check(name, "n/a", f"{rules.label}: the infrastructure rank is {rules.infra_rank_env}")
    if rules.sets_group_rank:
        return Check(name, "pass", f"{rules.label}'s launch script exports GROUP_RANK per node")
    if rules.nodes() > 1:
        return _check(
            name,
            value is None,
            "unset on several nodes: NVRx assigns each node its own rank"
            if value is None
            else f"GROUP_RANK={value} on every one of {rules.nodes()} nodes: NVRx fails with duplicate ranks",
        )
    return _check(name, value is not None, f"GROUP_RANK={value}", warn_only=True)


def _nccl_timeout_s(task: Any) -> float | None:
    from nemo_resiliency_plugins.core.validation import is_finite_number

    value = read_config_field(task, "dist", "distributed_timeout_minutes", plugin="doctor")
    # null, a string or a non-finite number is "unknown" here; the plugins that need it refuse it themselves.
    return float(value) * 60 if is_finite_number(value) else None


def _flag_checks(task: Any, executor: Any) -> list[Check]:
    try:
        from nemo_run.run.torchx_backend.packaging import package

        # NeMo-Run's packaging writes <name>_executor.yaml into the executor's job directory: on a copy pointed at a
        # scratch directory, so that doctor never adds files to a saved experiment it inspects.
        probe = copy.deepcopy(executor)
        with tempfile.TemporaryDirectory(prefix="nrp-doctor-") as scratch:
            if hasattr(probe, "job_dir"):
                probe.job_dir = scratch
            app = package("doctor", copy.deepcopy(task), probe, serialize_to_file=False)
        args = [str(a) for a in app.roles[0].args]
        env = dict(app.roles[0].env)
    except Exception as err:
        return [Check("launcher flags", "warn", f"could not build the launch command here: {err}")]
    bad = [a for a in args if a.startswith("--ft-param-") or a == "--ignore-missing-fault-tol-cfg"]
    checks = [
        _check(
            "launcher flags accepted by NVRx >= 0.5",
            not bad,
            f"rejected flags: {bad}" if bad else "no --ft-param-*, no --ignore-missing-fault-tol-cfg",
        )
    ]
    try:
        from nvidia_resiliency_ext.fault_tolerance import launcher as nvrx

        nvrx.get_args_parser().parse_args(args)
        checks.append(Check("launcher flags parse with the installed NVRx", "pass", " ".join(args[:12]) + " ..."))
    except SystemExit:
        checks.append(Check("launcher flags parse with the installed NVRx", "FAIL", " ".join(args)))
    except ImportError:
        checks.append(Check("launcher flags parse with the installed NVRx", "n/a", "NVRx is not installed here"))
    restarts = env.get(nvrx_launcher.MAX_RESTARTS_ENV)
    flag = args[args.index("--max-restarts") + 1] if "--max-restarts" in args else None
    checks.append(
        _check(
            "max restarts reach ft_launcher",
            flag is not None or restarts is not None,
            f"--max-restarts {flag}" if flag else f"{nvrx_launcher.MAX_RESTARTS_ENV}={restarts}",
        )
    )
    return checks


#: Every check, in the order doctor prints them.
CHECKS = (
    _check_launcher,
    _check_resume,
    _check_ft_sections,
    _check_ft_launch,
    _check_ft_state,
    _check_inprocess_env,
    _check_checkpoints,
    _check_timeout_chain,
    _check_known_bugs,
    _check_image_needs,
    _check_container,
)


def jobs_from_experiment_dir(exp_dir: str) -> list[tuple[Any, Any, list[Any]]]:
    """(task, executor, plugins) of every job NeMo-Run saved in ``exp_dir`` (already set up by plugins).

    Read as data only (:mod:`~nemo_resiliency_plugins.tools.saved_plugins`): doctor, rehearse and plan may be
    pointed at a directory someone else wrote, and NeMo-Run's own loader imports and calls whatever the saved
    ``_CONFIG``/``_TASKS`` name. Only this package's plugins and NeMo-Run's own executors, launchers and
    ``run.Script`` are rebuilt from plain fields. A directory that is not one NeMo-Run saved, or a job holding
    anything else (a ``run.Partial`` task, a class of the user's), is one :class:`ResiliencyConfigError` naming
    it and what was not rebuilt, never a traceback and never a partial job.
    """
    from nemo_resiliency_plugins.tools.saved_plugins import saved_jobs

    exp_dir = os.path.abspath(exp_dir)
    allowed = "an experiment directory NeMo-Run saved ($NEMORUN_HOME/experiments/<title>/<id>, with a _CONFIG file)"
    if not os.path.isdir(exp_dir):
        raise ResiliencyConfigError("nemo-resiliency", "EXPERIMENT_DIR", exp_dir, allowed, detail="no such directory")
    if not os.path.isfile(os.path.join(exp_dir, run.Experiment._CONFIG_FILE)):
        raise ResiliencyConfigError(
            "nemo-resiliency", "EXPERIMENT_DIR", exp_dir, allowed, detail="this directory is not one"
        )
    jobs = saved_jobs(exp_dir)
    if not jobs:
        detail = "its _TASKS is missing, not a regular file, or not NeMo-Run's list of jobs"
        raise ResiliencyConfigError("nemo-resiliency", "EXPERIMENT_DIR", exp_dir, allowed, detail=detail)
    out = []
    for index, job in enumerate(jobs):
        if job.task is None or job.executor is None or job.plugins is None:
            why = job.problem or "its plugins are not this package's plugin classes of plain fields"
            detail = f"job {index} is read as data only and {why}"
            raise ResiliencyConfigError("nemo-resiliency", "EXPERIMENT_DIR", exp_dir, allowed, detail=detail)
        out.append((job.task, job.executor, list(job.plugins)))
    return out


def summarize(checks: list[Check]) -> dict[str, Any]:
    failed = [c for c in checks if c.verdict == "FAIL"]
    return {"ok": not failed, "failed": len(failed), "checks": [asdict(c) for c in checks]}
