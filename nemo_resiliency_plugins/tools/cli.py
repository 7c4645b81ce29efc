"""``nemo-resiliency``: list, show, explain and doctor resiliency recipes from the command line.

    nemo-resiliency list
    nemo-resiliency show slurm-pretraining
    nemo-resiliency explain local-smoke --executor slurm
    nemo-resiliency doctor local-smoke --executor local
    nemo-resiliency doctor ~/.nemo_run/experiments/my-exp/my-exp_1712345678
    nemo-resiliency plan --gpus 16384 --step-time 6 --save-time 60 --failure-profile llama3
    nemo-resiliency report ~/.nemo_run/experiments/my-exp/my-exp_1712345678

Every command takes ``--json`` for CI. ``explain`` and ``doctor`` launch nothing: they use NeMo-Run's own
``Experiment.add`` and dry run.

Errors: every bad argument (an unknown recipe or executor, a missing or foreign experiment directory, a bad
number or time, a malformed ``--set``) ends the command with exit code 2 and one line on stderr,
``nemo-resiliency <command>: error: <what was wrong>``; never a traceback, never silence. A module the command
needs that is not installed (matplotlib for ``--plot``, an incomplete installation) is exit code 3, with the
same one line saying what to install (:mod:`nemo_resiliency_plugins.tools.requirements`), checked before any
work. Stdout is
redirected while NeMo-Run runs (its banners), so errors go to stderr, which stays visible.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import io
import json
import logging
import math
import os
import sys
from collections.abc import Callable
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from nemo_resiliency_plugins.tools.requirements import (
    EXIT_MISSING_MODULE,
    MissingModule,
    import_failure_message,
    require_plotting,
    require_training_stack,
)

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Resiliency recipes for NeMo-Run + Megatron Bridge.")
console = Console()
# Errors go to stderr: stdout is redirected while NeMo-Run runs, and a script piping stdout still sees them.
err_console = Console(stderr=True, soft_wrap=True, highlight=False)


class UsageError(Exception):
    """A bad command-line argument, with the message to show (one line)."""


def _fail(command: str, message: str, code: int = 2) -> None:
    text = " ".join(str(message).split())  # one line, whatever the message held
    err_console.print(f"nemo-resiliency {command}: error: {text}", markup=False)
    raise typer.Exit(code)


def _guarded(command: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Turn any error escaping a command into one stderr line and exit code 2.

    ResiliencyConfigError and UsageError are expected (a bad value, a bad argument); anything else is
    reported the same way with its type, so a user never gets a traceback from this CLI.
    """

    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def run_guarded(*args: Any, **kwargs: Any) -> Any:
            try:
                return fn(*args, **kwargs)
            except (typer.Exit, typer.Abort, KeyboardInterrupt):
                raise
            except UsageError as err:
                _fail(command, str(err))
            except MissingModule as err:  # an optional piece, checked before any work
                _fail(command, str(err), EXIT_MISSING_MODULE)
            except ImportError as err:  # not a bad argument: a module missing here (exit 3, not 2)
                _fail(command, import_failure_message(err), EXIT_MISSING_MODULE)
            except Exception as err:  # noqa: BLE001 - the CLI's promise: one line, never a traceback
                from nemo_resiliency_plugins.errors import ResiliencyConfigError

                text = str(err) if isinstance(err, ResiliencyConfigError) else f"{type(err).__name__}: {err}"
                _fail(command, text)

        return run_guarded

    return wrap


def _positive(option: str, value: float | int | None, *, integer: bool = False) -> None:
    """``--step-time``, ``--save-time``, ``--nodes``...: None (not given) or a finite number > 0."""
    if value is None:
        return
    if (isinstance(value, float) and not math.isfinite(value)) or value <= 0:
        raise UsageError(f"{option} {value!r}: expected a {'whole ' if integer else ''}number greater than 0")


def _slurm_time(option: str, value: str) -> None:
    from nemo_resiliency_plugins.core.executor_config import slurm_time_limit_seconds

    try:
        slurm_time_limit_seconds(value)
    except ValueError:
        raise UsageError(
            f"{option} {value!r}: expected a Slurm time limit such as '04:00:00', '90', '1-00:00:00' or 'UNLIMITED'"
        ) from None


def _executor_kind(value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise UsageError(f"--executor {value!r}: expected one of {', '.join(allowed)}")


@contextlib.contextmanager
def _quiet():
    """NeMo-Run prints banners and plugin logs to stdout; keep the command's own output clean."""
    buffer = io.StringIO()
    level = logging.getLogger("nemo_resiliency_plugins").level
    logging.getLogger("nemo_resiliency_plugins").setLevel(logging.WARNING)
    try:
        with contextlib.redirect_stdout(buffer):
            yield buffer
    finally:
        logging.getLogger("nemo_resiliency_plugins").setLevel(level)


def _emit_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


def _version(value: bool) -> None:
    if value:
        from nemo_resiliency_plugins import __version__

        console.print(f"nemo-resiliency {__version__}", markup=False, highlight=False)
        raise typer.Exit(0)


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", is_eager=True, callback=_version, help="Print the version and exit."
    ),
) -> None:
    """Resiliency recipes for NeMo-Run + Megatron Bridge."""


def _recipe(name: str):
    from nemo_resiliency_plugins.recipes import RECIPES

    if name not in RECIPES:
        raise UsageError(f"unknown recipe {name!r}: expected one of {', '.join(RECIPES)} (nemo-resiliency list)")
    return RECIPES[name]


def _fields(plugin: Any) -> dict[str, Any]:
    return {f.name: getattr(plugin, f.name) for f in dataclasses.fields(plugin) if f.init and f.name != "experiment_id"}


@app.command("list")
@_guarded("list")
def list_(json_out: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
    """Recipes with one-line descriptions."""
    from nemo_resiliency_plugins.recipes import list_recipes

    recipes = list_recipes()
    if json_out:
        _emit_json(
            [
                {"name": r.name, "summary": r.summary, "executors": list(r.executors), "plugins": list(r.plugins)}
                for r in recipes
            ]
        )
        return
    table = Table(title="nemo-resiliency recipes")
    for column in ("recipe", "executors", "plugins", "what it is for"):
        table.add_column(column)
    for r in recipes:
        table.add_row(r.name, ", ".join(r.executors), "\n".join(r.plugins), r.summary)
    console.print(table)


@app.command()
@_guarded("show")
def show(name: str, json_out: bool = typer.Option(False, "--json")) -> None:
    """The plugins of a recipe, every field and its value, and what each plugin changes."""
    recipe = _recipe(name)
    from nemo_resiliency_plugins.tools.explain import explain, make_executor, make_task

    with _quiet():  # building a plugin may log (RerunStateMachinePlugin's notice): never into --json's stdout
        plugins = recipe.build()
        result = explain(plugins, make_task(), make_executor(recipe.executors[0]), executor_kind=recipe.executors[0])
    data = {
        "name": recipe.name,
        "description": recipe.description,
        "executors": list(recipe.executors),
        "notes": list(recipe.notes),
        "plugins": [
            {"plugin": type(p).__name__, "fields": _fields(p), "changes": dataclasses.asdict(e)}
            for p, e in zip(plugins, result.effects, strict=False)
        ],
    }
    if json_out:
        _emit_json(data)
        return
    console.rule(f"[bold]{recipe.name}[/bold]")
    console.print(recipe.description)
    for note in recipe.notes:
        console.print(f"[yellow]note:[/yellow] {note}")
    for entry in data["plugins"]:
        table = Table(title=entry["plugin"], show_header=True)
        table.add_column("field")
        table.add_column("value")
        for key, value in entry["fields"].items():
            table.add_row(key, repr(value))
        console.print(table)
        changes = entry["changes"]
        console.print(f"  changes on a {recipe.executors[0]} job:")
        for line in changes["task_changes"] + changes["executor_changes"]:
            console.print("    " + line, markup=False)
        if changes["error"]:
            console.print(f"    [red]{changes['error']}[/red]")


@app.command()
@_guarded("explain")
def explain(
    name: str,
    executor: str = typer.Option(
        "local",
        "--executor",
        "-e",
        help="local | slurm | docker | dgx-cloud | lepton | skypilot | skypilot-jobs | kubeflow",
    ),
    script: str = typer.Option(None, "--script", help="Your training script (run.Script, Hydra overrides)."),
    partial: bool = typer.Option(False, "--partial", help="Explain a run.Partial(pretrain, config=...) task."),
    nodes: int = typer.Option(1, "--nodes"),
    ntasks_per_node: int = typer.Option(8, "--ntasks-per-node"),
    time: str = typer.Option("04:00:00", "--time", help="Slurm time limit."),
    step_time: float = typer.Option(None, "--step-time", help="Seconds one training step takes (for the chain)."),
    save_time: float = typer.Option(
        None, "--save-time", help="Seconds the longest checkpoint save takes (a process's first save included)."
    ),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """Dry run: what each plugin changes, the timeout chain, and the final launch command."""
    from nemo_resiliency_plugins.tools.explain import EXECUTOR_KINDS, make_executor, make_task
    from nemo_resiliency_plugins.tools.explain import explain as do_explain
    from nemo_resiliency_plugins.tools.timeout_chain import timeout_chain

    _executor_kind(executor, EXECUTOR_KINDS)
    _positive("--nodes", nodes, integer=True)
    _positive("--ntasks-per-node", ntasks_per_node, integer=True)
    _slurm_time("--time", time)
    _positive("--step-time", step_time)
    _positive("--save-time", save_time)
    recipe = _recipe(name)

    with _quiet():
        plugins = recipe.build()
        exe = make_executor(executor, nodes=nodes, ntasks_per_node=ntasks_per_node, time=time)
        result = do_explain(plugins, make_task(script, partial), exe, executor_kind=executor)
        chain = timeout_chain(plugins, exe, step_time_s=step_time, save_time_s=save_time)
    refused = [e for e in result.effects if e.error]
    if json_out:
        _emit_json(
            result.to_json() | {"timeout_chain": [dataclasses.asdict(c) | {"verdict": c.verdict} for c in chain]}
        )
        raise typer.Exit(1 if refused else 0)
    console.rule(f"[bold]{recipe.name}[/bold] on {executor} ({result.task_kind})")
    for effect in result.effects:
        console.print(f"[bold]{effect.plugin}[/bold]")
        for line in effect.task_changes:
            console.print(f"  task     {line}", markup=False)
        for line in effect.executor_changes:
            console.print(f"  executor {line}", markup=False)
        if effect.error:
            console.print(f"  [red]refused: {effect.error}[/red]")
    for note in result.notes:
        console.print(f"note: {note}", markup=False, highlight=False, style="yellow")
    _print_chain(chain)
    for line in result.known_bugs:  # known_bugs.py: Megatron Bridge bugs on this job's path
        console.print(f"known Megatron Bridge bug: {line}", markup=False)
    cfg_path = result.env.get("PET_FT_CFG_PATH")
    # Files and scripts are written verbatim (rich would hard-wrap them at the console width when stdout is
    # not a terminal, and a wrapped sbatch script is not valid bash).
    if cfg_path and os.path.exists(cfg_path):
        console.rule(f"ft_launcher config file ({cfg_path})")
        with open(cfg_path) as handle:
            _verbatim(handle.read())
    if result.command:
        console.rule("launch command" + (" (sbatch script)" if executor == "slurm" else ""))
        _verbatim(result.command)
    raise typer.Exit(1 if refused else 0)


def _verbatim(text: str) -> None:
    console.file.write(text if text.endswith("\n") else text + "\n")
    console.file.flush()


def _print_chain(chain: list) -> None:
    table = Table(title="timeout chain")
    for column in ("link", "rule", "numbers", "verdict"):
        table.add_column(column)
    colors = {"pass": "green", "FAIL": "red", "unknown": "yellow"}
    for link in chain:
        table.add_row(link.name, link.rule, link.detail, f"[{colors[link.verdict]}]{link.verdict}[/]")
    console.print(table)


@app.command()
@_guarded("doctor")
def doctor(
    target: str = typer.Argument(..., help="An experiment directory NeMo-Run saved, or a recipe name."),
    executor: str = typer.Option(
        "local", "--executor", "-e", help="With a recipe name: one of the executors of `explain --executor`"
    ),
    checkpoint_dir: str = typer.Option(None, "--checkpoint-dir", help="Where ft_state.json is (else from the task)."),
    step_time: float = typer.Option(None, "--step-time"),
    save_time: float = typer.Option(
        None, "--save-time", help="Seconds the longest checkpoint save takes (a process's first save included)."
    ),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """Why does training hang / why did fault tolerance not trigger? A verdict per check; exit 1 on FAIL."""
    from nemo_resiliency_plugins.errors import ResiliencyConfigError
    from nemo_resiliency_plugins.tools import doctor as doc

    _positive("--step-time", step_time)
    _positive("--save-time", save_time)
    results: list[list[Any]] = []
    with _quiet():
        if _looks_like_path(target):
            jobs = doc.jobs_from_experiment_dir(target)
        else:
            recipe = _recipe(target)
            from nemo_resiliency_plugins.tools.explain import EXECUTOR_KINDS, make_executor, make_task

            _executor_kind(executor, EXECUTOR_KINDS)
            plugins = recipe.build()
            exe = make_executor(executor)  # an executor NeMo-Run cannot build here is a usage error, not a finding
            try:
                jobs = [(*_applied(make_task(), exe, plugins), plugins)]
            except ResiliencyConfigError as err:
                # A plugin refused this job (e.g. ft_launcher not on this host's PATH): a finding, not a crash.
                jobs = []
                results.append([doc.Check("plugins set up the job", "FAIL", str(err))])
        for task, exe, plugins in jobs:
            results.append(
                doc.check_job(
                    task, exe, plugins, checkpoint_dir=checkpoint_dir, step_time_s=step_time, save_time_s=save_time
                )
            )
    checks = [c for r in results for c in r]
    summary = doc.summarize(checks)
    if json_out:
        _emit_json(summary)
    else:
        table = Table(title=f"nemo-resiliency doctor: {target}")
        for column in ("check", "verdict", "detail"):
            table.add_column(column)
        colors = {"pass": "green", "FAIL": "red", "warn": "yellow", "n/a": "dim"}
        for check in checks:
            table.add_row(escape(check.name), f"[{colors[check.verdict]}]{check.verdict}[/]", escape(check.detail))
        console.print(table)
        console.print(
            "[green]no problem found[/green]" if summary["ok"] else f"[red]{summary['failed']} check(s) failed[/red]"
        )
    raise typer.Exit(0 if summary["ok"] else 1)


@app.command()
@_guarded("report")
def report(
    experiment: str = typer.Argument(..., help="A saved experiment (or one job's folder in it) of a job that ran."),
    json_out: bool = typer.Option(False, "--json"),
    timeline: str = typer.Option(None, "--timeline", help="Write a PNG timeline of every cycle (needs matplotlib)."),
    restart_time: float = typer.Option(
        None, "--restart-time", help="plan's restart figure for the comparison (plan's --restart-time)."
    ),
) -> None:
    """What happened to a job that ran: per Slurm attempt and launcher cycle, what ended it and what it cost, and
    each fault next to what plan's model says it costs."""
    from nemo_resiliency_plugins.tools.planning.measured import phase_lines, restart_phases
    from nemo_resiliency_plugins.tools.report import print_reports, report_experiment
    from nemo_resiliency_plugins.tools.report.plan import compare, print_vs_plan, saved_plugins

    _png_option("--timeline", timeline)
    _positive("--restart-time", restart_time)
    reports = report_experiment(os.path.expanduser(experiment))
    png = None
    if timeline is not None:
        from nemo_resiliency_plugins.tools.report.timeline import write_report_timeline

        png = write_report_timeline(reports, timeline)
    with _quiet():  # loading the saved experiment: NeMo-Run's and the plugins' own log lines are not the report
        plugins = [saved_plugins(job.job_dir) for job in reports]
    vs_plan = [
        None if p is None else compare(job, p, restart_s=restart_time) for job, p in zip(reports, plugins, strict=True)
    ]
    phases = [restart_phases(job) for job in reports]  # each restart's phases (tools/planning/measured.py)
    if json_out:
        _emit_json(
            [
                job.to_json()
                | {"timeline": png, "vs_plan": None if rows is None else [dataclasses.asdict(r) for r in rows]}
                | {"restart_phases": [dataclasses.asdict(r) for r in restarts]}
                for job, rows, restarts in zip(reports, vs_plan, phases, strict=True)
            ]
        )
        return
    for job, rows, restarts in zip(reports, vs_plan, phases, strict=True):
        print_reports(console, [job])
        print_vs_plan(console, rows, restart_given=restart_time is not None)
        for line in phase_lines(restarts):
            console.print(line, markup=False, highlight=False)
    if png:
        console.print(f"timeline: {png}", markup=False, highlight=False)


def _png_option(option: str, path: str | None) -> None:
    """A PNG file option (``--plot``, ``--timeline``): a .png name in a directory that exists, and matplotlib to
    write it, all checked before any work."""
    if path is None:
        return
    if not path.endswith(".png"):
        raise UsageError(f"{option} {path!r}: expected a file name ending in .png")
    if not os.path.isdir(os.path.dirname(os.path.abspath(path))):
        raise UsageError(f"{option} {path!r}: its directory does not exist")
    require_plotting(option)


def _looks_like_path(target: str) -> bool:
    """An existing directory, or something only a path would look like (recipe names have no '/' or '.')."""
    return os.path.isdir(target) or os.sep in target or target.startswith(("~", "."))


def _applied(task: Any, executor: Any, plugins: list[Any]) -> tuple[Any, Any]:
    import nemo_run as run

    with run.Experiment("doctor", executor=executor, log_level="ERROR") as exp:
        exp.add(task, executor=executor, plugins=plugins, name="train")
        job = exp.jobs[0]
    return job.task, job.executor


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


def main(argv: list[str] | None = None) -> None:
    """The ``nemo-resiliency`` entry point.

    Click's own usage errors (an unknown option, a missing argument, a value that is not a number) are
    reported like the commands' errors: one line on stderr, exit code 2, instead of a usage banner.
    """
    try:  # typer >= 0.20 vendors click; older ones use click itself
        from typer._click import exceptions as click_errors
    except ImportError:  # pragma: no cover - depends on the installed typer
        from click import exceptions as click_errors

    command = typer.main.get_command(app)
    try:
        code = command.main(args=argv, prog_name="nemo-resiliency", standalone_mode=False)
    except typer.Exit as done:
        sys.exit(done.exit_code)
    except click_errors.NoArgsIsHelpError as err:
        console.print(err.format_message(), markup=False, highlight=False)
        sys.exit(2)
    except click_errors.UsageError as err:
        where = err.ctx.command_path if err.ctx is not None else "nemo-resiliency"
        text = " ".join(err.format_message().split())
        err_console.print(f"{where}: error: {text} (see {where} --help)", markup=False)
        sys.exit(2)
    except (typer.Abort, KeyboardInterrupt):
        err_console.print("nemo-resiliency: aborted", markup=False)
        sys.exit(1)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
