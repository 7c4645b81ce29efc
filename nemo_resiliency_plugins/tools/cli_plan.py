"""``nemo-resiliency rehearse`` and ``nemo-resiliency plan``: the two commands that run or simulate a recipe's
life (registered on :mod:`.cli_common`'s app when :mod:`.cli` imports this module)."""

from __future__ import annotations

import os
import sys
from typing import Any

import typer

from nemo_resiliency_plugins.tools.cli_common import (
    UsageError,
    _emit_json,
    _fail,
    _guarded,
    _looks_like_path,
    _png_option,
    _positive,
    _quiet,
    _recipe,
    app,
    console,
)
from nemo_resiliency_plugins.tools.requirements import require_training_stack


def _parse_sets(sets: list[str]) -> dict[str, dict[str, Any]]:
    """``--set Plugin.field=value`` (value in YAML: numbers, booleans, ``{setup: 60}``) -> recipe overrides."""
    import yaml

    overrides: dict[str, dict[str, Any]] = {}
    for item in sets:
        key, sep, raw = item.partition("=")
        plugin, dot, name = key.partition(".")
        if not sep or not dot or not plugin or not name:
            raise UsageError(f"--set {item!r}: expected Plugin.field=value")
        try:
            value = yaml.safe_load(raw)
        except yaml.YAMLError as err:
            problem = getattr(err, "problem", None) or type(err).__name__
            raise UsageError(f"--set {item!r}: the value is not valid YAML ({problem})") from None
        overrides.setdefault(plugin, {})[name] = value
    return overrides


# A module-level option object: a list-typed default may not be built in the signature (ruff B008).
_SET_OPTION = typer.Option(None, "--set", help="Override a recipe field: Plugin.field=value (repeatable).")


@app.command()
@_guarded("rehearse")
def rehearse(
    name: str = typer.Argument(
        ..., help="A recipe name (nemo-resiliency list), or an experiment directory NeMo-Run saved (its plugins)."
    ),
    faults: str = typer.Option("kill,hang", "--faults", help="Comma-separated: kill, hang, raise, sigterm."),
    ranks: int = typer.Option(2, "--ranks"),
    sets: list[str] = _SET_OPTION,
    step_time: float = typer.Option(None, "--step-time", help="Your cluster's step time, for the timeout chain."),
    save_time: float = typer.Option(
        None, "--save-time", help="Your cluster's longest checkpoint save (a process's first save included)."
    ),
    workdir: str = typer.Option(None, "--workdir", help="Where runs, checkpoints and logs go (default: a temp dir)."),
    timeline: str = typer.Option(None, "--timeline", help="Write a PNG timeline of each run (needs matplotlib)."),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """Prove a recipe on this machine: inject each fault into a short local run; exit 1 if any is not survived."""
    _positive("--ranks", ranks, integer=True)
    _positive("--step-time", step_time)
    _positive("--save-time", save_time)
    _png_option("--timeline", timeline)
    require_training_stack("rehearse")  # the arguments first (exit 2), then what this machine lacks (exit 3)
    from nemo_resiliency_plugins.errors import ResiliencyConfigError
    from nemo_resiliency_plugins.tools.rehearse import rehearse as do_rehearse
    from nemo_resiliency_plugins.tools.rehearse import write_timeline
    from nemo_resiliency_plugins.tools.rehearse.report import print_rehearsal

    overrides = _parse_sets(sets or [])
    build = plugins_for(name, overrides)
    build()  # a bad --set or recipe field fails here, before anything runs
    try:
        with _quiet():
            report = do_rehearse(
                build,
                faults=tuple(f.strip() for f in faults.split(",") if f.strip()),
                ranks=ranks,
                workdir=workdir,
                step_time_s=step_time,
                save_time_s=save_time,
                progress=lambda line: print(line, file=sys.stderr, flush=True),
            )
    except ResiliencyConfigError as err:  # bad --faults / --ranks
        _fail("rehearse", str(err))
    png = None
    if timeline:
        png = write_timeline(report, timeline)
    if json_out:
        _emit_json(report.to_json() | {"timeline": png})
        raise typer.Exit(0 if report.ok else 1)
    print_rehearsal(console, name, report)
    if timeline:
        console.print(f"timeline: {png}" if png else "[yellow]no timeline: matplotlib is not installed[/yellow]")
    raise typer.Exit(0 if report.ok else 1)


def plugins_for(target: str, overrides: dict[str, dict[str, Any]] | None = None):
    """A function building the plugins to rehearse: a recipe's, or those a saved NeMo-Run experiment attached.

    An experiment directory (``$NEMORUN_HOME/experiments/<title>/<id>``, written by ``exp.run()`` or
    ``exp.dryrun(delete_exp_dir=False)``) keeps the plugin instances of every job: the user's own settings,
    exactly as their experiment script attached them.
    """
    if _looks_like_path(target):
        if overrides:
            raise UsageError("--set applies to recipes; edit the experiment's plugins instead")
        plugins = _saved_plugins_of(target)
        if not plugins:
            raise UsageError(f"no job in {target} has plugins attached")
        return lambda: list(plugins)
    recipe = _recipe(target)
    return lambda: recipe.build(**(overrides or {}))


def _saved_plugins_of(target: str) -> list[Any] | None:
    """The first job's plugins of the experiment saved in ``target``, read as data only (tools/saved_plugins.py:
    nothing from the directory is imported or called); a directory that is not one is one line."""
    from nemo_resiliency_plugins.errors import ResiliencyConfigError
    from nemo_resiliency_plugins.tools.saved_plugins import saved_jobs

    exp_dir = os.path.abspath(os.path.expanduser(target))
    allowed = "an experiment directory NeMo-Run saved ($NEMORUN_HOME/experiments/<title>/<id>, with a _CONFIG file)"
    if not os.path.isdir(exp_dir) or not os.path.isfile(os.path.join(exp_dir, "_CONFIG")):
        detail = "no such directory" if not os.path.isdir(exp_dir) else "this directory is not one"
        raise ResiliencyConfigError("nemo-resiliency", "EXPERIMENT_DIR", exp_dir, allowed, detail=detail)
    jobs = saved_jobs(exp_dir)
    if jobs is None:
        detail = "its _TASKS is missing, not a regular file, or not NeMo-Run's list of jobs"
        raise ResiliencyConfigError("nemo-resiliency", "EXPERIMENT_DIR", exp_dir, allowed, detail=detail)
    unread = next((job for job in jobs if job.plugins is None), None)
    if unread is not None:
        detail = f"its plugins are read as data only and {unread.problem or 'are not the package plugin classes'}"
        raise ResiliencyConfigError("nemo-resiliency", "EXPERIMENT_DIR", exp_dir, allowed, detail=detail)
    return next((job.plugins for job in jobs if job.plugins), None)


@app.command()
@_guarded("plan")
def plan(
    gpus: int = typer.Option(..., "--gpus", help="GPUs the run trains on."),
    step_time: float = typer.Option(None, "--step-time", help="Seconds one training step takes."),
    save_time: float = typer.Option(None, "--save-time", help="Seconds one persistent checkpoint save takes."),
    from_dir: str = typer.Option(
        None, "--from", help="A finished job's saved experiment: its measured figures set the next run's settings."
    ),
    async_save: bool = typer.Option(False, "--async-save", help="Saves are async (training waits ~one step)."),
    local_save_time: float = typer.Option(None, "--local-save-time", help="Seconds one local checkpoint takes."),
    restart_time: float = typer.Option(None, "--restart-time", help="Seconds from a restart to training again."),
    failure_rate: str = typer.Option(None, "--failure-rate", help="Faults per GPU-hour, or class=rate,..."),
    failure_profile: str = typer.Option(None, "--failure-profile", help="A published profile: llama3 (default)."),
    plugins: str = typer.Option(None, "--plugins", help="A recipe name or a saved experiment directory."),
    save_interval: float = typer.Option(None, "--save-interval", help="Your seconds of training between saves."),
    days: float = typer.Option(30.0, "--days", help="Length of the run in days."),
    seed: int = typer.Option(0, "--seed", help="Seed of the simulation."),
    json_out: bool = typer.Option(False, "--json"),
    plot: str = typer.Option(None, "--plot", help="Write goodput vs save interval as a PNG (needs matplotlib)."),
) -> None:
    """What to set for a run of N GPUs, and the goodput (useful training / wall time) it will get."""
    from nemo_resiliency_plugins.tools.planning import RunParams, parse_failure_rate
    from nemo_resiliency_plugins.tools.planning import plan as do_plan
    from nemo_resiliency_plugins.tools.planning.failures import PROFILES
    from nemo_resiliency_plugins.tools.planning.mechanisms import from_plugins, our_defaults
    from nemo_resiliency_plugins.tools.planning.recovery import DEFAULT_RESTART_S
    from nemo_resiliency_plugins.tools.planning.report import print_report, stated_defaults, write_plot

    _positive("--gpus", gpus, integer=True)
    if from_dir is not None:
        given = {"--step-time": step_time, "--save-time": save_time, "--restart-time": restart_time}
        given |= {"--save-interval": save_interval, "--async-save": async_save or None}
        if clash := [name for name, value in given.items() if value is not None]:
            raise UsageError(f"--from measures {', '.join(clash)} from the job: give one or the other")
    elif step_time is None or save_time is None:
        raise UsageError("--step-time and --save-time are required (or --from EXPERIMENT_DIR, which measures them)")
    _positive("--step-time", step_time)
    _positive("--save-time", save_time)
    _positive("--local-save-time", local_save_time)
    _positive("--restart-time", restart_time)
    _positive("--save-interval", save_interval)
    _positive("--days", days)
    if days > 3650:
        raise UsageError(f"--days {days!r}: expected at most 3650 (ten years)")
    if failure_rate is not None and failure_profile is not None:
        raise UsageError("--failure-rate and --failure-profile: give one of them")
    if failure_profile is not None and failure_profile not in PROFILES:
        raise UsageError(f"--failure-profile {failure_profile!r}: expected one of {', '.join(PROFILES)}")
    _png_option("--plot", plot)  # before the simulation, not after it
    failures = parse_failure_rate(failure_rate) if failure_rate is not None else PROFILES[failure_profile or "llama3"]()
    if from_dir is not None:
        _plan_from(from_dir, gpus, days, failures, plugins, local_save_time, seed, json_out, plot)
        return
    params = RunParams(
        gpus=gpus,
        step_time_s=step_time,
        save_time_s=save_time,
        days=days,
        async_save=async_save,
        local_save_time_s=local_save_time,
        restart_s=DEFAULT_RESTART_S if restart_time is None else restart_time,
    )
    if plugins is None:
        yours, source = our_defaults(params), "slurm-pretraining (default; pass --plugins)"
    else:
        yours, source = from_plugins(plugins_for(plugins)(), params), plugins
    stated = stated_defaults(restart_given=restart_time is not None, async_save=async_save)
    report = do_plan(
        params, failures, yours, plugins_from=source, save_interval_s=save_interval, seed=seed, stated_defaults=stated
    )
    png = write_plot(report, plot) if plot else None
    if json_out:
        _emit_json(report.to_json() | {"plot": png})
        return
    print_report(console, report, png)


def _plan_from(
    from_dir: str,
    gpus: int,
    days: float,
    failures: Any,
    plugins: str | None,
    local_save_time: float | None,
    seed: int,
    json_out: bool,
    plot: str | None,
) -> None:
    """``plan --from``: the job's figures (tools/planning/measured.py) into plan (tools/planning/from_job.py)."""
    from nemo_resiliency_plugins.tools.planning.from_job import next_run, predict_job, print_from_job, to_json
    from nemo_resiliency_plugins.tools.planning.measured import measure
    from nemo_resiliency_plugins.tools.planning.report import write_plot

    given = plugins_for(plugins)() if plugins is not None else None
    with _quiet():  # loading the saved experiment: NeMo-Run's own lines are not the plan
        measured = measure(os.path.expanduser(from_dir), given)
    job = predict_job(measured)
    report = next_run(measured, gpus=gpus, days=days, failures=failures, seed=seed, local_save_time_s=local_save_time)
    png = write_plot(report, plot) if plot else None
    if json_out:
        _emit_json(to_json(measured, job, report) | {"plot": png})
        return
    print_from_job(console, measured, job, report)
    if png:
        console.print(f"plot: {png}", highlight=False)
