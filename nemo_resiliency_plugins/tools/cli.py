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

import dataclasses
import os
import sys
from typing import Any

import typer
from rich.markup import escape
from rich.table import Table

from nemo_resiliency_plugins.tools.cli_common import (
    UsageError,
    _emit_json,
    _executor_kind,
    _guarded,
    _looks_like_path,
    _png_option,
    _positive,
    _quiet,
    _recipe,
    _slurm_time,
    app,
    console,
    err_console,
)


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


def _applied(task: Any, executor: Any, plugins: list[Any]) -> tuple[Any, Any]:
    import nemo_run as run

    with run.Experiment("doctor", executor=executor, log_level="ERROR") as exp:
        exp.add(task, executor=executor, plugins=plugins, name="train")
        job = exp.jobs[0]
    return job.task, job.executor


# rehearse and plan (tools/cli_plan.py) register after the commands above, the order --help lists them in; their
# helpers are importable from here as before.
from nemo_resiliency_plugins.tools.cli_plan import _saved_plugins_of, plugins_for  # noqa: E402

__all__ = ["UsageError", "app", "main", "plugins_for", "_saved_plugins_of"]


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
