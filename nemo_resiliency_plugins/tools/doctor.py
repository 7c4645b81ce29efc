"""``nemo-resiliency doctor``: why does training hang, why did fault tolerance not trigger?

Each check looks at what a job will really get - the task and executor after the plugins ran (from an
experiment directory NeMo-Run saved, or from a recipe applied to a representative task) - and gives a
verdict: ``pass``, ``warn``, ``FAIL`` or ``n/a``. Any FAIL makes the command exit non-zero.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import nemo_run as run
from nemo_run.core.execution.launcher import FaultTolerance, Torchrun

from nemo_resiliency_plugins.core import known_bugs, nvrx_launcher
from nemo_resiliency_plugins.core.hydra_overrides import OverrideSyntaxError, find_overrides
from nemo_resiliency_plugins.errors import ResiliencyConfigError
from nemo_resiliency_plugins.tools.timeout_chain import timeout_chain

# A computed section timeout below this is almost certainly measured on a toy run (NVRx multiplies the
# longest observed time by 5): one slow save or step on a loaded node would be killed as a hang.
TIGHT_TIMEOUT_S = 1.0


@dataclass
class Check:
    name: str
    verdict: str  # pass | warn | FAIL | n/a
    detail: str


def _check(name: str, ok: bool | None, detail: str, *, warn_only: bool = False) -> Check:
    if ok is None:
        return Check(name, "n/a", detail)
    return Check(name, "pass" if ok else ("warn" if warn_only else "FAIL"), detail)


def _task_ft_enabled(task: Any) -> bool | None:
    """Does the task switch Megatron Bridge's FT package on? None when it says nothing."""
    if isinstance(task, run.Script):
        value = None
        for o in find_overrides(task.args):
            if o.key == "ft.enable_ft_package" and o.prefix != "~":
                value = o.value
            elif o.key == "ft" and isinstance(o.value, dict) and "enable_ft_package" in o.value:
                value = o.value["enable_ft_package"]
        return value
    from nemo_resiliency_plugins.core.task_config import read_config_field

    return read_config_field(task, "ft", "enable_ft_package", plugin="doctor")


def _checkpoint_dir(task: Any) -> str | None:
    if isinstance(task, run.Script):
        for o in find_overrides(task.args):
            if o.key == "checkpoint.save" and isinstance(o.value, str) and o.value:
                return o.value
        return None
    from nemo_resiliency_plugins.core.task_config import read_config_field

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
    try:
        import yaml

        with open(path) as handle:
            data = yaml.safe_load(handle) or {}
        return path, data.get("fault_tolerance") or {}, None
    except FileNotFoundError:
        return path, None, "not on this machine (it is written by the sbatch script on the cluster)"
    except Exception as err:  # a broken file is a finding, not a crash
        return path, None, f"unreadable: {err}"


def check_job(
    task: Any,
    executor: Any,
    plugins: list[Any] | None = None,
    *,
    checkpoint_dir: str | None = None,
    step_time_s: float | None = None,
    save_time_s: float | None = None,
) -> list[Check]:
    """All checks for one job (task + executor after plugins).

    A task whose overrides Hydra cannot parse gets one FAIL saying so (the job would fail on it at start):
    the other checks read those overrides.
    """
    if isinstance(task, run.Script):
        try:
            find_overrides(task.args)
        except OverrideSyntaxError as err:
            return [Check("task.args parse with Hydra's override parser", "FAIL", str(err))]
    plugins = list(plugins or [])
    checks: list[Check] = []
    launcher = executor.launcher
    is_ft = isinstance(launcher, FaultTolerance) or launcher == "ft"
    if launcher == "torchrun":
        launcher = Torchrun()
    elif launcher == "ft":
        launcher = FaultTolerance()
    slurm = isinstance(executor, run.SlurmExecutor)
    ft_on = _task_ft_enabled(task)

    # 1. The launcher must be NVRx's ft_launcher when the task enables Megatron Bridge's FT package.
    if ft_on:
        checks.append(
            _check(
                "launcher is ft_launcher",
                is_ft,
                "ft_launcher"
                if is_ft
                else (
                    f"launcher is {type(launcher).__name__ if not isinstance(launcher, str) else launcher!r}: "
                    "ft.enable_ft_package=true under torchrun raises RankMonitorClientError at start (no rank monitor)"
                ),
            )
        )
    else:
        checks.append(
            Check(
                "launcher is ft_launcher",
                "pass" if is_ft else "n/a",
                "ft_launcher" if is_ft else "the task does not enable Megatron Bridge's FT package",
            )
        )
    if isinstance(launcher, Torchrun) and not is_ft:
        checks.append(Check("hang detection", "warn", "torchrun restarts crashed ranks but never detects a hang"))
    restarting = {"PreemptionPlugin", "InProcessRestartPlugin", "FaultTolerancePlugin"}
    if is_ft or any(type(p).__name__ in restarting for p in plugins):
        checks.append(_resume_check(task))

    # 2. Sections declared, heartbeats kept away from a section-based job.
    if is_ft:
        path, cfg, problem = _ft_cfg(executor)
        hb = [getattr(launcher, n, None) for n in ("initial_rank_heartbeat_timeout", "rank_heartbeat_timeout")]
        if path is None:
            checks.append(
                Check(
                    "section timeouts declared",
                    "FAIL",
                    f"no {nvrx_launcher.CONFIG_PATH_ENV} and NeMo-Run cannot pass section flags: NVRx "
                    "monitors no section of a Megatron Bridge job (hangs are never caught)",
                )
            )
        elif cfg is None:
            in_script = slurm and path.split("/")[-1] in (executor.setup_lines or "")
            checks.append(
                Check(
                    "section timeouts declared",
                    "pass" if in_script else "FAIL",
                    f"{path}: {problem}" + ("; the sbatch script writes it" if in_script else ""),
                )
            )
        else:
            sections = cfg.get("rank_section_timeouts") or {}
            missing = [s for s in ("setup", "step", "checkpointing") if s not in sections]
            checks.append(
                _check(
                    "section timeouts declared",
                    not missing,
                    f"{sections}" + (f"; missing {missing}" if missing else ""),
                )
            )
        if ft_on is not False and any(v is not None for v in hb):
            checks.append(
                Check(
                    "no heartbeat timeouts on a section-based job",
                    "FAIL",
                    f"launcher passes heartbeat timeouts {hb}: Megatron Bridge sends no heartbeats, so "
                    "NVRx kills a healthy job once initial_rank_heartbeat_timeout passes",
                )
            )
        else:
            checks.append(Check("no heartbeat timeouts on a section-based job", "pass", "none passed"))

        # 3. One infrastructure rank per node (NVRx refuses duplicates).
        checks.append(_infra_rank_check(executor))

        # 4. Flag compatibility and the zero-restarts trap.
        checks.extend(_flag_checks(task, executor))
        checks.extend(_progress_checks(executor, path, cfg, slurm))

        # 5. ft_launcher resolvable where the job runs here.
        if _runs_here(executor):
            paths = [str(executor.env_vars.get("PATH", "")), os.environ.get("PATH", "")]
            where = shutil.which("ft_launcher", path=os.pathsep.join(p for p in paths if p))
            checks.append(
                _check(
                    "ft_launcher resolvable",
                    where is not None,
                    where or "not on PATH: install nvidia-resiliency-ext where the job runs",
                )
            )

    # 6. ft_state.json.
    # A plugin's checkpoint_dir declares the directory of a task that does not show checkpoint.save.
    declared = next((p.checkpoint_dir for p in plugins if getattr(p, "checkpoint_dir", None)), None)
    ckpt = checkpoint_dir or _checkpoint_dir(task) or declared
    if ckpt:
        checks.extend(_ft_state_checks(Path(ckpt) / "ft_state.json", save_time_s))

    # 7. In-process restart: env vars and the NCCL watchdog.
    inproc = next((p for p in plugins if type(p).__name__ == "InProcessRestartPlugin"), None)
    if inproc is not None:
        want = {"TORCH_CPP_LOG_LEVEL": "error", "TORCH_NCCL_RETHROW_CUDA_ERRORS": "0", "NCCL_NVLS_ENABLE": "0"}
        wrong = {k: executor.env_vars.get(k) for k, v in want.items() if str(executor.env_vars.get(k)) != v}
        checks.append(_check("in-process env vars", not wrong, f"wrong or missing: {wrong}" if wrong else str(want)))

    # 8. Async and local checkpoints, as the task carries them (plugins or hand-written overrides).
    checks.extend(_checkpoint_checks(task, executor))

    # 9. The timeout chain.
    nccl = _nccl_timeout_s(task)
    for link in timeout_chain(plugins, executor, step_time_s=step_time_s, save_time_s=save_time_s, nccl_timeout_s=nccl):
        checks.append(Check(f"timeouts: {link.name}", {True: "pass", False: "FAIL", None: "n/a"}[link.ok], link.detail))

    # 9. Known Megatron Bridge bugs on this job's path, judged from the Megatron Bridge installed here.
    for finding in known_bugs.findings(task):
        checks.append(Check(f"known bug {finding.bug.ref}", finding.verdict, finding.line))
    return checks


def _checkpoint_checks(task: Any, executor: Any) -> list[Check]:
    """The rules of AsyncCheckpointPlugin / LocalCheckpointPlugin, applied to what the task will run with."""
    from nemo_resiliency_plugins.async_checkpoint import ASYNC_FORMATS
    from nemo_resiliency_plugins.core.task_config import read_config_field
    from nemo_resiliency_plugins.local_checkpoint import check_durable_schedule, check_exit_saves_persistent

    def read(field: str) -> Any:
        return read_config_field(task, "checkpoint", field, plugin="doctor")

    checks: list[Check] = []
    if str(read("async_save")).lower() == "true":
        fmt = read("ckpt_format") or "torch_dist"
        ok = fmt in ASYNC_FORMATS and read("save") is not None
        checks.append(_check("async save: format and checkpoint.save", ok, f"ckpt_format={fmt}, save={read('save')}"))
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
            _check(
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


def _resume_check(task: Any) -> Check:
    """Megatron Bridge resumes only from checkpoint.load: a restart must find what the run saved."""
    from nemo_resiliency_plugins.core.task_config import config_field_seen

    name = "restarts resume from the saved checkpoints"
    try:
        save_seen, save = config_field_seen(task, "checkpoint", "save", plugin="doctor")
        load_seen, load = config_field_seen(task, "checkpoint", "load", plugin="doctor")
    except Exception as err:  # an unreadable task is reported by other checks
        return Check(name, "n/a", f"could not read the task: {err}")
    if not save_seen:
        return Check(
            name,
            "warn",
            "the task does not show checkpoint.save (a recipe inside the script?): make checkpoint.load the "
            "same directory, or every restart trains from iteration 0",
        )
    if not save:
        return Check(name, "FAIL", "checkpoint.save is unset: nothing is saved, every restart trains from iteration 0")
    if not load_seen or not load:
        return Check(
            name,
            "FAIL",
            f"checkpoint.save={save} but checkpoint.load is unset: Megatron Bridge resumes only from checkpoint.load, "
            "so every restart trains from iteration 0",
        )
    if os.path.normpath(str(load)) != os.path.normpath(str(save)):
        return Check(name, "FAIL", f"checkpoint.load={load} differs from checkpoint.save={save}: restarts load {load}")
    return Check(name, "pass", f"checkpoint.load = checkpoint.save = {save}")


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
    from nemo_resiliency_plugins.core.task_config import read_config_field
    from nemo_resiliency_plugins.core.validation import is_finite_number

    value = read_config_field(task, "dist", "distributed_timeout_minutes", plugin="doctor")
    # null, a string or a non-finite number is "unknown" here; the plugins that need it refuse it themselves.
    return float(value) * 60 if is_finite_number(value) else None


def _flag_checks(task: Any, executor: Any) -> list[Check]:
    try:
        from nemo_run.run.torchx_backend.packaging import package

        app = package("doctor", task, executor, serialize_to_file=False)
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


def _ft_state_checks(path: Path, save_time_s: float | None) -> list[Check]:
    if not path.exists():
        return [Check("ft_state.json", "n/a", f"{path} not there (yet): timeouts come from the launcher config")]
    try:
        state = json.loads(path.read_text())
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
            _check(
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


def jobs_from_experiment_dir(exp_dir: str) -> list[tuple[Any, Any, list[Any]]]:
    """(task, executor, plugins) of every job NeMo-Run saved in ``exp_dir`` (already set up by plugins).

    A directory that is not one NeMo-Run saved (no ``_CONFIG``, too shallow to be
    ``<home>/experiments/<title>/<id>``, or a config NeMo-Run cannot load) is a :class:`ResiliencyConfigError`
    naming it, never a traceback from NeMo-Run's loader.
    """
    from nemo_run import config as nemo_run_config

    exp_dir = os.path.abspath(exp_dir)
    allowed = "an experiment directory NeMo-Run saved ($NEMORUN_HOME/experiments/<title>/<id>, with a _CONFIG file)"
    if not os.path.isdir(exp_dir):
        raise ResiliencyConfigError("nemo-resiliency", "EXPERIMENT_DIR", exp_dir, allowed, detail="no such directory")
    if len(Path(exp_dir).parents) < 3 or not os.path.isfile(os.path.join(exp_dir, run.Experiment._CONFIG_FILE)):
        raise ResiliencyConfigError(
            "nemo-resiliency", "EXPERIMENT_DIR", exp_dir, allowed, detail="this directory is not one"
        )
    # NeMo-Run rebuilds the experiment under $NEMORUN_HOME/experiments/<title>/<id>; an experiment made with
    # another base_dir is found by pointing that home at the directory three levels up for the duration.
    saved = nemo_run_config.get_nemorun_home()
    nemo_run_config.set_nemorun_home(str(Path(exp_dir).parents[2]))
    try:
        exp = run.Experiment._from_config(exp_dir)
        return [(_task_of(job.task), job.executor, list(job.plugins or [])) for job in exp.jobs]
    except Exception as err:  # NeMo-Run's loader: a broken or foreign _CONFIG
        raise ResiliencyConfigError(
            "nemo-resiliency",
            "EXPERIMENT_DIR",
            exp_dir,
            allowed,
            detail=f"NeMo-Run cannot load it ({type(err).__name__}: {err})",
        ) from None
    finally:
        nemo_run_config.set_nemorun_home(saved)


def _task_of(saved: Any) -> Any:
    """NeMo-Run keeps a reconstructed job's task in its serialized form; rebuild run.Script, keep Partials."""
    if not isinstance(saved, str):
        return saved
    import fiddle as fdl
    from nemo_run.core.serialization.zlib_json import ZlibJSONSerializer

    config = ZlibJSONSerializer().deserialize(saved)
    return fdl.build(config) if fdl.get_callable(config) is run.Script else config


def summarize(checks: list[Check]) -> dict[str, Any]:
    failed = [c for c in checks if c.verdict == "FAIL"]
    return {"ok": not failed, "failed": len(failed), "checks": [asdict(c) for c in checks]}
