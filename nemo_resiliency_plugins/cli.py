"""``nemo-resiliency``: list, show, explain and doctor resiliency recipes from the command line.

    nemo-resiliency list
    nemo-resiliency show slurm-pretraining
    nemo-resiliency explain local-smoke --executor slurm
    nemo-resiliency doctor local-smoke --executor local
    nemo-resiliency doctor ~/.nemo_run/experiments/my-exp/my-exp_1712345678

Every command takes ``--json`` for CI. ``explain`` and ``doctor`` launch nothing: they use NeMo-Run's own
``Experiment.add`` and dry run.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import logging
import os
import sys
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Resiliency recipes for NeMo-Run + Megatron Bridge.")
console = Console()


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


def _recipe(name: str):
    from nemo_resiliency_plugins.recipes import RECIPES

    if name not in RECIPES:
        console.print(f"[red]unknown recipe {name!r}[/red]; known: {', '.join(RECIPES)}")
        raise typer.Exit(2)
    return RECIPES[name]


def _fields(plugin: Any) -> dict[str, Any]:
    return {f.name: getattr(plugin, f.name) for f in dataclasses.fields(plugin) if f.init and f.name != "experiment_id"}


@app.command("list")
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
def show(name: str, json_out: bool = typer.Option(False, "--json")) -> None:
    """The plugins of a recipe, every field and its value, and what each plugin changes."""
    recipe = _recipe(name)
    from nemo_resiliency_plugins.errors import ResiliencyConfigError
    from nemo_resiliency_plugins.explain import explain, make_executor, make_task

    try:
        plugins = recipe.build()
    except ResiliencyConfigError as err:
        console.print(f"[red]{err}[/red]")
        raise typer.Exit(1) from err
    with _quiet():
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
def explain(
    name: str,
    executor: str = typer.Option("local", "--executor", "-e", help="local | slurm | docker"),
    script: str = typer.Option(None, "--script", help="Your training script (run.Script, Hydra overrides)."),
    partial: bool = typer.Option(False, "--partial", help="Explain a run.Partial(pretrain, config=...) task."),
    nodes: int = typer.Option(1, "--nodes"),
    ntasks_per_node: int = typer.Option(8, "--ntasks-per-node"),
    time: str = typer.Option("04:00:00", "--time", help="Slurm time limit."),
    step_time: float = typer.Option(None, "--step-time", help="Seconds one training step takes (for the chain)."),
    save_time: float = typer.Option(None, "--save-time", help="Seconds one checkpoint save takes."),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """Dry run: what each plugin changes, the timeout chain, and the final launch command."""
    recipe = _recipe(name)
    from nemo_resiliency_plugins.explain import explain as do_explain
    from nemo_resiliency_plugins.explain import make_executor, make_task
    from nemo_resiliency_plugins.timeout_chain import timeout_chain

    plugins = recipe.build()
    with _quiet():
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
    _print_chain(chain)
    cfg_path = result.env.get("PET_FT_CFG_PATH")
    if cfg_path and os.path.exists(cfg_path):
        console.rule(f"ft_launcher config file ({cfg_path})")
        with open(cfg_path) as handle:
            console.print(handle.read(), markup=False, highlight=False)
    if result.command:
        console.rule("launch command" + (" (sbatch script)" if executor == "slurm" else ""))
        console.print(result.command, markup=False, highlight=False)
    raise typer.Exit(1 if refused else 0)


def _print_chain(chain: list) -> None:
    table = Table(title="timeout chain")
    for column in ("link", "rule", "numbers", "verdict"):
        table.add_column(column)
    colors = {"pass": "green", "FAIL": "red", "unknown": "yellow"}
    for link in chain:
        table.add_row(link.name, link.rule, link.detail, f"[{colors[link.verdict]}]{link.verdict}[/]")
    console.print(table)


@app.command()
def doctor(
    target: str = typer.Argument(..., help="An experiment directory NeMo-Run saved, or a recipe name."),
    executor: str = typer.Option("local", "--executor", "-e", help="With a recipe name: local | slurm"),
    checkpoint_dir: str = typer.Option(None, "--checkpoint-dir", help="Where ft_state.json is (else from the task)."),
    step_time: float = typer.Option(None, "--step-time"),
    save_time: float = typer.Option(None, "--save-time"),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """Why does training hang / why did fault tolerance not trigger? A verdict per check; exit 1 on FAIL."""
    from nemo_resiliency_plugins import doctor as doc

    with _quiet():
        if os.path.isdir(target):
            jobs = doc.jobs_from_experiment_dir(target)
        else:
            recipe = _recipe(target)
            from nemo_resiliency_plugins.explain import make_executor, make_task

            plugins = recipe.build()
            jobs = [(*_applied(make_task(), make_executor(executor), plugins), plugins)]
        results = []
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
            table.add_row(check.name, f"[{colors[check.verdict]}]{check.verdict}[/]", check.detail)
        console.print(table)
        console.print(
            "[green]no problem found[/green]" if summary["ok"] else f"[red]{summary['failed']} check(s) failed[/red]"
        )
    raise typer.Exit(0 if summary["ok"] else 1)


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
            console.print(f"[red]--set {item!r}[/red]: expected Plugin.field=value")
            raise typer.Exit(2)
        overrides.setdefault(plugin, {})[name] = yaml.safe_load(raw)
    return overrides


# A module-level option object: a list-typed default may not be built in the signature (ruff B008).
_SET_OPTION = typer.Option(None, "--set", help="Override a recipe field: Plugin.field=value (repeatable).")


@app.command()
def rehearse(
    name: str = typer.Argument(
        ..., help="A recipe name (nemo-resiliency list), or an experiment directory NeMo-Run saved (its plugins)."
    ),
    faults: str = typer.Option("kill,hang", "--faults", help="Comma-separated: kill, hang, raise, sigterm."),
    ranks: int = typer.Option(2, "--ranks"),
    sets: list[str] = _SET_OPTION,
    step_time: float = typer.Option(None, "--step-time", help="Your cluster's step time, for the timeout chain."),
    save_time: float = typer.Option(None, "--save-time", help="Your cluster's checkpoint save time."),
    workdir: str = typer.Option(None, "--workdir", help="Where runs, checkpoints and logs go (default: a temp dir)."),
    timeline: str = typer.Option(None, "--timeline", help="Write a PNG timeline of each run (needs matplotlib)."),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """Prove a recipe on this machine: inject each fault into a short local run; exit 1 if any is not survived."""
    from nemo_resiliency_plugins.errors import ResiliencyConfigError
    from nemo_resiliency_plugins.rehearse import rehearse as do_rehearse
    from nemo_resiliency_plugins.rehearse import write_timeline

    overrides = _parse_sets(sets or [])
    build = plugins_for(name, overrides)
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
        console.print(f"[red]{err}[/red]")
        raise typer.Exit(2) from err
    png = None
    if timeline:
        png = write_timeline(report, timeline)
    if json_out:
        _emit_json(report.to_json() | {"timeline": png})
        raise typer.Exit(0 if report.ok else 1)
    _print_rehearsal(name, report)
    if timeline:
        console.print(f"timeline: {png}" if png else "[yellow]no timeline: matplotlib is not installed[/yellow]")
    raise typer.Exit(0 if report.ok else 1)


def _print_rehearsal(name: str, report: Any) -> None:
    def num(value: Any, unit: str = " s") -> str:
        return "-" if value is None else f"{value:g}{unit}"

    table = Table(title=f"nemo-resiliency rehearse: {name} ({report.ranks} ranks, {report.wall_s:g} s)")
    for column in ("run", "verdict", "detected by", "detect", "recover", "resumed from", "job", "params = fault-free"):
        table.add_column(column)
    if report.baseline is not None:
        base = report.baseline
        healthy = base.state == "SUCCEEDED" and not any("baseline" in r for r in report.reasons)
        table.add_row(
            "baseline (no fault)",
            "[green]ok[/]" if healthy else "[red]FAIL[/]",
            "-",
            "-",
            "-",
            "-",
            f"{base.state} in {base.wall_s:g} s",
            "-",
        )
    for f in report.faults:
        table.add_row(
            f.fault,
            "[green]ok[/]" if f.ok else "[red]FAIL[/]",
            f.detected_by or ("-" if f.final_state == "not run" else "not detected"),
            num(f.detect_s),
            num(f.recover_s),
            "-" if f.resumed_from is None else f"step {f.resumed_from}",
            f.final_state + (f" in {f.run.wall_s:g} s" if f.run else ""),
            {True: "yes", False: "NO", None: "-"}[f.params_equal],
        )
    if report.baseline is not None or report.faults:
        console.print(table)
    for line in report.scaled:
        console.print(f"[cyan]scaled:[/cyan] {line}", markup=True, highlight=False)
    for line in report.not_exercised:
        console.print(f"[yellow]not exercised here:[/yellow] {line}", highlight=False)
    if report.chain:
        chain = Table(title="timeout chain (your settings; step/save time: " + _chain_times(report) + ")")
        for column in ("link", "numbers", "verdict"):
            chain.add_column(column)
        colors = {"pass": "green", "FAIL": "red", "unknown": "yellow"}
        for link in report.chain:
            chain.add_row(link["name"], link["detail"], f"[{colors[link['verdict']]}]{link['verdict']}[/]")
        console.print(chain)
    if report.ok:
        console.print("[green]OK: every fault was detected and survived with nothing lost[/green]")
    else:
        console.print("[red]FAILED:[/red]")
        for reason in report.reasons:
            console.print(f"  - {reason}", markup=False, highlight=False)
    if report.baseline is not None:
        console.print(f"logs and checkpoints: {report.workdir}", highlight=False)


def _chain_times(report: Any) -> str:
    step = "unknown" if report.step_time_s is None else f"{report.step_time_s:g} s"
    if report.step_time_measured:
        step += " (the rehearsal's toy step; pass --step-time)"
    save = "unknown (pass --save-time)" if report.save_time_s is None else f"{report.save_time_s:g} s"
    return f"{step} / {save}"


def plugins_for(target: str, overrides: dict[str, dict[str, Any]] | None = None):
    """A function building the plugins to rehearse: a recipe's, or those a saved NeMo-Run experiment attached.

    An experiment directory (``$NEMORUN_HOME/experiments/<title>/<id>``, written by ``exp.run()`` or
    ``exp.dryrun(delete_exp_dir=False)``) keeps the plugin instances of every job: the user's own settings,
    exactly as their experiment script attached them.
    """
    if os.path.isdir(target):
        if overrides:
            console.print("[red]--set applies to recipes; edit the experiment's plugins instead[/red]")
            raise typer.Exit(2)
        from nemo_resiliency_plugins.doctor import jobs_from_experiment_dir

        with _quiet():
            jobs = jobs_from_experiment_dir(target)
        plugins = next((p for _, _, p in jobs if p), None)
        if not plugins:
            console.print(f"[red]no job in {target} has plugins attached[/red]")
            raise typer.Exit(2)
        return lambda: list(plugins)
    recipe = _recipe(target)
    return lambda: recipe.build(**(overrides or {}))


def main() -> None:
    app()


if __name__ == "__main__":
    main()
