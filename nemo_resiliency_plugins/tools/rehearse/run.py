"""Rehearse a plugin set on one machine before it meets a cluster.

A resiliency setting is only proven when a fault happens and the job survives it. On the cluster that costs
GPU-hours and happens at the worst moment; here it costs a few minutes of CPU. :func:`rehearse` takes the
user's plugins (instances, a recipe name, or a callable that builds them, so that a refused setting is
reported rather than raised), and:

* swaps the training task for the reference workload (Megatron Bridge's real config parser and fault-tolerance
  hooks around a toy model, :mod:`nemo_resiliency_plugins.testing.workload`) and the executor for NeMo-Run's
  ``LocalExecutor`` (through :func:`~nemo_resiliency_plugins.testing.local_run.run_local`);
* keeps every setting that can act on one machine, and scales the timeouts a cluster job needs (minutes) to the
  toy's step (a fraction of a second): FT section timeouts keep their ratios, scaled so the step timeout is
  :data:`TARGET_STEP_TIMEOUT_S` (never below a floor the local start-up needs); the scaling is listed in the
  report, because a rehearsal that silently changed the user's numbers would prove something else;
* runs a fault-free baseline, then one run per fault (``kill``, ``hang``, ``raise``, ``sigterm``) injected on
  the last rank at step :data:`FAULT_STEP`, and reports per fault what detected it (a section timeout, a dead
  rank, a signal handler, in-process restart), how long detection and recovery took, which checkpoint the job
  resumed from, and whether the final parameters equal the baseline's bit for bit;
* lists the settings it could not exercise locally and why, and checks the timeout chain of the *original*
  settings with the step/save times given (the user's cluster numbers) or measured here.

A rehearsal fails (``report.ok`` False, with reasons) when a fault is not detected within its deadline, the
healthy baseline is killed or restarted, the parameters differ, a chain link FAILs, or a plugin refuses its
settings. Times come from watching the job's log while it runs (a 0.2 s poll), so they are accurate to about
that.
"""

from __future__ import annotations

import dataclasses
import os
import re
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from nemo_resiliency_plugins.errors import ResiliencyConfigError
from nemo_resiliency_plugins.tools.rehearse.adapt import (
    DEFAULT_FAULTS,
    DETECTION_SLACK_S,
    FAULT_STEP,
    FAULTS,
    SAVE_INTERVAL,
    STEP_TIME_S,
    STEPS,
    TARGET_STEP_TIMEOUT_S,
    plugin_name,
    rehearsal_plugins,
    with_local_dir,
)
from nemo_resiliency_plugins.tools.rehearse.report import FaultResult, PluginsLike, RehearsalReport, RunOutcome
from nemo_resiliency_plugins.tools.rehearse.watch import DETECTIONS, HEALTHY_JOB_KILLERS, Watch


# ------------------------------------------------------------------------------------------------ plugins
def _resolve(plugins: PluginsLike) -> tuple[list[Any] | None, str | None]:
    """The plugin list, or the refusal a user would get when building it."""
    try:
        if isinstance(plugins, str):
            from nemo_resiliency_plugins.recipes import get_recipe

            return list(get_recipe(plugins)), None
        if callable(plugins):
            return list(plugins()), None
        return list(plugins), None
    except ResiliencyConfigError as err:
        return None, f"settings refused before anything ran: {err}"


def _run(
    name: str,
    workdir: Path,
    plugins: list[Any],
    ranks: int,
    env: dict[str, str],
    deadline: float | None,
    save_name: str | None = None,
    stop_on: frozenset[str] = frozenset(),
):
    from nemo_resiliency_plugins.testing.local_run import run_local, workload_task

    save = workdir / (save_name or name)
    save.mkdir(parents=True, exist_ok=True)
    task = workload_task(
        [
            f"train.train_iters={STEPS}",
            f"checkpoint.save={save}",
            f"checkpoint.load={save}",
            f"checkpoint.save_interval={SAVE_INTERVAL}",
        ],
        env={"NRP_STEP_TIME": str(STEP_TIME_S), **env},
    )
    plugins = with_local_dir(plugins, workdir / "local" / (save_name or name))
    base = str(workdir / "nemo_run")
    started = time.monotonic()
    watch = Watch(os.path.join(base, "experiments", name), started, deadline, stop_on)
    watch.start()
    try:
        result = run_local(task, plugins, name=name, ntasks=ranks, base_dir=base)
    finally:
        watch.finish()
    outcome = RunOutcome(
        name=name,
        state=result.state,
        wall_s=round(result.wall_s, 2),
        job_dir=result.job_dir,
        save_dir=str(save),
        events=[(round(t, 2), lab) for t, lab, _ in watch.events],
        stopped_by_rehearsal=watch.stopped,
        log_tail=result.log[-3000:],
    )
    return outcome, watch, result


# ------------------------------------------------------------------------------------------------ rehearse
def rehearse(
    plugins: PluginsLike,
    *,
    faults: Sequence[str] = DEFAULT_FAULTS,
    ranks: int = 2,
    workdir: str | os.PathLike | None = None,
    step_time_s: float | None = None,
    save_time_s: float | None = None,
    baseline_from: RehearsalReport | None = None,
    progress: Callable[[str], None] | None = None,
) -> RehearsalReport:
    """Rehearse ``plugins`` on this machine: a fault-free baseline, then each of ``faults``.

    ``step_time_s`` / ``save_time_s``: your cluster's step and checkpoint-save times, for the timeout chain (the
    rehearsal's own toy times are used otherwise, which only catches gross mistakes). ``baseline_from``: reuse
    the fault-free run of an earlier report made with the same ``ranks`` (it saves a run; the healthy-baseline
    check of *these* settings is then not made). ``progress`` receives a line as each run starts.
    """
    say = progress or (lambda _line: None)
    started = time.monotonic()
    unknown = [f for f in faults if f not in FAULTS]
    if unknown:
        raise ResiliencyConfigError("rehearse", "faults", list(faults), "a subset of " + ", ".join(FAULTS))
    if not isinstance(ranks, int) or isinstance(ranks, bool) or ranks < 2:
        raise ResiliencyConfigError("rehearse", "ranks", ranks, "an integer >= 2 (a fault needs a surviving rank)")
    resolved, refusal = _resolve(plugins)
    if resolved is None:
        return RehearsalReport(False, [refusal], [], ranks, [], [], [], None, [], 0.0, str(workdir or ""))
    work = Path(workdir) if workdir is not None else Path(tempfile.mkdtemp(prefix="nrp-rehearse-"))
    work.mkdir(parents=True, exist_ok=True)
    names = [plugin_name(p) for p in resolved]
    reasons: list[str] = []
    try:
        local, scaled, not_exercised = rehearsal_plugins(resolved)
    except ResiliencyConfigError as err:
        return RehearsalReport(False, [f"settings refused: {err}"], names, ranks, [], [], [], None, [], 0.0, str(work))
    reasons += _static_findings(local)

    if baseline_from is not None and baseline_from.baseline is not None and baseline_from.ranks == ranks:
        baseline = baseline_from.baseline
        scaled.append(f"baseline reused from {baseline.save_dir} (not re-run with these settings)")
    else:
        say("rehearse: fault-free baseline")
        # A healthy job that a timeout fires on is already the finding: stop it rather than sit out its restarts.
        baseline, watch, _ = _run("rehearse-baseline", work, local, ranks, {}, None, stop_on=HEALTHY_JOB_KILLERS)
        reasons += _baseline_problems(baseline, watch)
    baseline_ok = baseline.state == "SUCCEEDED" and Path(baseline.save_dir, "final_params.pt").exists()

    measured_step = _measured_step_time(baseline)
    results: list[FaultResult] = []
    for fault in faults:
        if not baseline_ok:
            results.append(_not_run(fault, "not run: the fault-free baseline did not succeed"))
            continue
        say(f"rehearse: fault {fault!r} on rank {ranks - 1} at step {FAULT_STEP}")
        results.append(_rehearse_fault(fault, work, local, ranks, baseline))
    for r in results:
        reasons += [f"{r.fault}: {why}" for why in r.reasons]

    from nemo_resiliency_plugins.tools.timeout_chain import timeout_chain

    step_for_chain = step_time_s if step_time_s is not None else measured_step
    chain = timeout_chain(resolved, None, step_time_s=step_for_chain, save_time_s=save_time_s)
    chain_rows = [dataclasses.asdict(link) | {"verdict": link.verdict} for link in chain]
    reasons += [f"timeout chain FAIL: {link.name} ({link.detail})" for link in chain if link.ok is False]
    return RehearsalReport(
        ok=not reasons,
        reasons=reasons,
        plugins=names,
        ranks=ranks,
        scaled=scaled,
        not_exercised=not_exercised,
        chain=chain_rows,
        baseline=baseline,
        faults=results,
        wall_s=round(time.monotonic() - started, 1),
        workdir=str(work),
        step_time_s=step_for_chain,
        save_time_s=save_time_s,
        step_time_measured=step_time_s is None and measured_step is not None,
    )


def _static_findings(plugins: list[Any]) -> list[str]:
    """Problems visible without running: the reference workload, like Megatron Bridge, reports sections."""
    ft = next((p for p in plugins if plugin_name(p) == "FaultTolerancePlugin"), None)
    out = []
    if ft is not None and ft.workload_style == "heartbeats" and ft.initial_rank_heartbeat_timeout is not None:
        out.append(
            "FaultTolerancePlugin.workload_style='heartbeats': Megatron Bridge's training loop sends no heartbeats, "
            "so every attempt is killed once initial_rank_heartbeat_timeout passes, healthy or not"
        )
    if ft is not None and ft.workload_style == "heartbeats" and ft.calc_ft_timeouts and ft.enable_ft_package:
        out.append(
            "FaultTolerancePlugin: calc_ft_timeouts=True with workload_style='heartbeats': Megatron Bridge computes "
            "section timeouts, and NVRx raises KeyError for sections the launcher did not declare (none here)"
        )
    return out


def _baseline_problems(run: RunOutcome, watch: Watch) -> list[str]:
    out = []
    kinds = {lab for _, lab, _ in watch.events}
    killers = [k for k in ("heartbeat timeout", "section timeout", "out-of-section timeout") if k in kinds]
    errors = sorted({m.group(1).strip() for _, lab, m in watch.events if lab == "rank error"})
    if errors:
        killers.append("rank error: " + "; ".join(errors))
    if run.state != "SUCCEEDED":
        why = f" by a {', '.join(killers)}" if killers else ""
        out.append(f"the healthy fault-free baseline was killed{why}: job {run.state}")
    elif "restart" in kinds or "worker group failed" in kinds:
        why = f" ({', '.join(killers)})" if killers else ""
        out.append(f"the healthy fault-free baseline was restarted{why}")
    elif "finished" not in kinds:
        out.append("the fault-free baseline did not reach FINISHED")
    return out


def _measured_step_time(run: RunOutcome) -> float | None:
    start = next((t for t, lab in run.events if lab == "training started"), None)
    end = next((t for t, lab in run.events if lab == "finished"), None)
    if start is None or end is None or end <= start:
        return None
    return round((end - start) / STEPS, 3)


def _not_run(fault: str, why: str) -> FaultResult:
    return FaultResult(fault, False, False, False, None, None, None, None, "not run", None, 0.0, [why])


def _deadline(fault: str, plugins: list[Any]) -> float:
    """Seconds after the fault by which something must have detected it."""
    ft = next((p for p in plugins if plugin_name(p) == "FaultTolerancePlugin"), None)
    ipr = next((p for p in plugins if plugin_name(p) == "InProcessRestartPlugin" and p.enabled), None)
    interval = ft.workload_check_interval if ft is not None else 1.0
    if fault == "hang":
        bound = TARGET_STEP_TIMEOUT_S
        if ft is not None and ft.workload_style == "sections" and ft.section_timeouts.get("step"):
            bound = ft.section_timeouts["step"]
        if ipr is not None:
            bound = min(bound, ipr.soft_timeout) if ft is not None else ipr.soft_timeout
        return bound + 2 * interval + DETECTION_SLACK_S
    return 2 * interval + DETECTION_SLACK_S


def _rehearse_fault(fault: str, work: Path, plugins: list[Any], ranks: int, baseline: RunOutcome) -> FaultResult:
    deadline = _deadline(fault, plugins)
    env = {"NRP_FAULT": fault, "NRP_FAULT_STEP": str(FAULT_STEP), "NRP_FAULT_RANK": str(ranks - 1)}
    run, watch, _ = _run(f"rehearse-{fault}", work, plugins, ranks, env, deadline)
    if fault == "sigterm" and run.state == "SUCCEEDED" and watch.first("exit on signal") is not None:
        # The preemption path ends the job with a checkpoint; Slurm would requeue it. Do what the requeue does.
        second, watch2, _ = _run(
            f"rehearse-{fault}-requeue", work, plugins, ranks, {}, None, save_name=f"rehearse-{fault}"
        )
        offset = run.wall_s
        run.events += [(round(t + offset, 2), f"requeued: {lab}") for t, lab in second.events]
        watch.events += [(t + offset, lab, m) for t, lab, m in watch2.events if lab in ("resumed", "finished")]
        run.state, run.wall_s = second.state, round(run.wall_s + second.wall_s, 2)
    return _judge(fault, run, watch, deadline, baseline, plugins)


def _has_step_timeout(plugins: list[Any]) -> bool:
    ft = next((p for p in plugins if plugin_name(p) == "FaultTolerancePlugin"), None)
    return ft is not None and ft.workload_style == "sections" and bool(ft.section_timeouts.get("step"))


def _judge(
    fault: str, run: RunOutcome, watch: Watch, deadline: float, baseline: RunOutcome, plugins: list[Any]
) -> FaultResult:
    reasons: list[str] = []
    injected = watch.first("fault injected")
    detected_by = detect_s = recover_s = resumed_from = None
    if injected is None:
        reasons.append(f"the fault was never injected (the job ended before step {FAULT_STEP})")
    else:
        t0 = injected[0]
        hits = [(t, lab, m) for t, lab, m in watch.events if lab in DETECTIONS and t >= t0]
        if hits:
            t, label, match = min(hits, key=lambda h: h[0])
            detect_s = round(t - t0, 2)
            detected_by = _describe_detection(fault, label, match, hits)
        resumed = watch.first("resumed", t0)
        if resumed is not None:
            recover_s = round(resumed[0] - t0, 2)
            resumed_from = int(resumed[1].group(1))
        if not hits:
            reasons.append(f"not detected within the {deadline:g} s deadline (run stopped by the rehearsal)")
            if fault == "hang" and not _has_step_timeout(plugins):
                reasons.append(
                    "no 'step' section timeout is declared: NVRx never times out an undeclared section, and checks "
                    "the out-of-section timeout only while no section is open, so a hung step is never detected"
                )
        elif detect_s is not None and detect_s > deadline:
            reasons.append(f"detected by {detected_by} only after {detect_s:g} s (deadline {deadline:g} s)")
        elif fault == "hang" and not detected_by.startswith(("section timeout 'step'", "in-process")):
            reasons.append(f"the hang was not caught by a step timeout but by {detected_by}")
        if resumed is None and run.state == "SUCCEEDED":
            reasons.append("the job did not resume from a checkpoint")
        saved = watch.first("checkpoint saved")
        restarted_from_scratch = any(lab == "training started" and t > t0 for t, lab, _ in watch.events)
        if saved is not None and saved[0] <= t0 and restarted_from_scratch:
            reasons.append(
                f"a restart trained from iteration 0 although step {saved[1].group(1)} was checkpointed (Megatron "
                "Bridge resumes only from checkpoint.load: make it the directory checkpoint.save writes)"
            )
    if run.state != "SUCCEEDED":
        reasons.append(f"job {run.state}" + (" (stopped by the rehearsal)" if run.stopped_by_rehearsal else ""))
    equal = _params_equal(Path(run.save_dir), Path(baseline.save_dir)) if run.state == "SUCCEEDED" else None
    if equal is False:
        reasons.append("final parameters differ from the fault-free run's")
    return FaultResult(
        fault=fault,
        ok=not reasons,
        injected=injected is not None,
        detected=detected_by is not None,
        detected_by=detected_by,
        detect_s=detect_s,
        recover_s=recover_s,
        resumed_from=resumed_from,
        final_state=run.state,
        params_equal=equal,
        deadline_s=deadline,
        reasons=reasons,
        run=run,
    )


def _describe_detection(fault: str, label: str, match: re.Match, hits: list) -> str:
    if label == "section timeout":
        return f"section timeout '{match.group(1)}' (open {match.group(2)} s)"
    if label == "out-of-section timeout":
        return f"out-of-section timeout ({match.group(1)} s)"
    if label == "heartbeat timeout":
        return f"{match.group(1)} heartbeat timeout"
    if label == "in-process restart":
        return "in-process restart"
    if label == "exit on signal":
        return f"signal handler (checkpoint at step {match.group(1)}, exit 0)"
    if fault == "kill":
        return "dead rank (launcher saw the process die)"
    if fault == "raise":
        return "rank exited with an error (launcher)"
    return "worker group failure (launcher)"


def _params_equal(a: Path, b: Path) -> bool | None:
    import torch

    fa, fb = a / "final_params.pt", b / "final_params.pt"
    if not fa.exists() or not fb.exists():
        return None if not fb.exists() else False
    x, y = torch.load(fa), torch.load(fb)
    return x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)
