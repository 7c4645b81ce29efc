"""Adding a recipe is adding one file (issue 53): every file of the top-level recipes/ is found here by its path
(not through the catalog, so a file the catalog fails to load fails these tests) and proved: it is listed by
``nemo-resiliency list``, its experiment script runs as a NeMo-Run dry run, the recipe dry-runs on every executor it
names, and ``doctor`` passes it on each with its own documented step and save times. The docs' recipe page is
written from these files (docs/recipe_page.py); issue 47 item 14: an override that is not a mapping, or a value that
cannot be copied, is one ResiliencyConfigError line."""

from __future__ import annotations

import ast
import contextlib
import copy
import io
import json
import os
import re
import sys
import threading
from pathlib import Path

import nemo_run as run
import pytest

import nemo_resiliency_plugins.recipes as catalog
from nemo_resiliency_plugins.errors import ResiliencyConfigError
from nemo_resiliency_plugins.recipes import RECIPES, get_recipe
from nemo_resiliency_plugins.tools.cli import main
from nemo_resiliency_plugins.tools.explain import EXTRA_EXECUTOR_KINDS, make_executor, make_task
from tests.helpers import add_job, launch_command

REPO = Path(__file__).resolve().parents[2]
FOLDER = REPO / "recipes"


def _defines_recipe(path: Path) -> bool:
    tree = ast.parse(path.read_text())
    return any(
        isinstance(t, ast.Name) and t.id == "RECIPE"
        for node in tree.body
        if isinstance(node, ast.Assign)
        for t in node.targets
    )


FILES = sorted(p for p in FOLDER.glob("*.py") if not p.name.startswith("_"))
RECIPE_FILES = [p for p in FILES if _defines_recipe(p)]
NAMES = [p.stem.replace("_", "-") for p in RECIPE_FILES]


def cli(*args: str) -> tuple[int, str, str]:
    """``nemo-resiliency ARGS`` in this process: exit code, stdout, stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(list(args))
            code = 0
        except SystemExit as done:
            code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
    return code, out.getvalue(), err.getvalue()


def test_the_catalog_is_the_top_level_folder():
    assert len(RECIPE_FILES) >= 8, FILES
    # Every other file of the folder is a longer example job a recipe names (the main job, .ci/demo).
    examples = {r.example for r in RECIPES.values() if r.example}
    assert {p.name for p in FILES} - {p.name for p in RECIPE_FILES} == examples == {"local_fault_tolerance.py"}
    # The package reads the same folder's files: the installed copy (a wheel or this checkout) holds the same ones.
    assert sorted(p.name for p in catalog.recipe_files()) == [p.name for p in RECIPE_FILES]
    assert list(RECIPES) == NAMES


def test_list_names_every_recipe_file():
    code, out, err = cli("list", "--json")
    assert code == 0, err
    assert [r["name"] for r in json.loads(out)] == NAMES


@pytest.mark.parametrize("name", NAMES)
def test_a_recipe_file_documents_what_the_page_and_doctor_need(name):
    recipe = RECIPES[name]
    assert recipe.summary and recipe.description and recipe.executors and recipe.plugins
    assert recipe.step_time_s and recipe.step_time_s > 0 and recipe.save_time_s and recipe.save_time_s > 0
    assert re.search(rf'get_recipe\(\s*"{re.escape(name)}"', recipe.script), "the experiment script uses its recipe"
    compile(recipe.script, f"recipes/{name}.py:SCRIPT", "exec")


def _dry_run_script(script: str) -> list[tuple]:
    """Run an experiment script as written, except that its ``run.run(...)`` call is NeMo-Run's real dry run:
    the call is renamed to a function that adds ``dryrun=True`` and records what was launched."""
    tree = ast.parse(script)
    calls = [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute)
        and n.func.attr == "run"
        and isinstance(n.func.value, ast.Name)
        and n.func.value.id == "run"
    ]
    assert len(calls) == 1, "an experiment script launches once, with run.run(...)"
    calls[0].func = ast.Name(id="_launch", ctx=ast.Load())
    launched: list[tuple] = []

    def _launch(task, executor, plugins, **kwargs):
        launched.append((copy.deepcopy(task), executor.clone(), plugins))
        run.run(task, executor=executor, plugins=plugins, dryrun=True, **kwargs)

    with _no_stdin():
        exec(compile(ast.fix_missing_locations(tree), "<recipe script>", "exec"), {"_launch": _launch})
    return launched


@contextlib.contextmanager
def _no_stdin():
    """NeMo-Run's Slurm packaging runs a shell command that reads stdin, which pytest's captured stdin refuses."""
    with open(os.devnull) as devnull:
        saved, sys.stdin = sys.stdin, devnull
        try:
            yield
        finally:
            sys.stdin = saved


def _assert_plugins_acted(recipe, task, executor, plugins) -> None:
    """The recipe's plugins set up this job: with fault tolerance, NeMo-Run would launch ft_launcher."""
    job = add_job(task, executor, plugins)
    entrypoint, args, _ = launch_command(job)
    launched = " ".join([entrypoint, *args])
    assert ("ft_launcher" in launched) == ("FaultTolerancePlugin" in recipe.plugins), launched


KINDS = {
    run.LocalExecutor: "local",
    run.SlurmExecutor: "slurm",
    run.DGXCloudExecutor: "dgx-cloud",
    run.LeptonExecutor: "lepton",
    run.DockerExecutor: "docker",
}


@pytest.mark.parametrize("name", NAMES)
def test_the_recipes_experiment_script_dry_runs(name, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))  # the scripts' LocalTunnel job_dir is under ~ (the login node's)
    monkeypatch.chdir(tmp_path)
    recipe = RECIPES[name]
    [(task, executor, plugins)] = _dry_run_script(recipe.script)
    assert KINDS[type(executor)] in recipe.executors
    assert [type(p).__name__ for p in plugins] == list(recipe.plugins)
    with _no_stdin():
        _assert_plugins_acted(recipe, task, executor, plugins)


CLAIMS = [(n, kind) for n in NAMES for kind in RECIPES[n].executors if kind not in EXTRA_EXECUTOR_KINDS]


@pytest.mark.parametrize(("name", "executor"), CLAIMS)
def test_every_recipe_dry_runs_on_each_executor_it_names(name, executor, tmp_path):
    recipe = RECIPES[name]
    job_dir = str(tmp_path / "jobs")
    exe = make_executor(executor, job_dir=job_dir) if executor == "slurm" else make_executor(executor)
    with _no_stdin():
        run.run(make_task(), executor=exe.clone(), plugins=recipe.build(), dryrun=True, name="train")
        _assert_plugins_acted(recipe, make_task(), exe, recipe.build())


@pytest.mark.parametrize(("name", "executor"), CLAIMS)
def test_doctor_passes_each_recipe_with_its_own_step_and_save_times(name, executor):
    recipe = RECIPES[name]
    code, out, err = cli(
        "doctor", name, "--executor", executor, "--step-time", f"{recipe.step_time_s:g}",
        "--save-time", f"{recipe.save_time_s:g}", "--json",
    )  # fmt: skip
    data = json.loads(out)
    assert code == 0, [c for c in data["checks"] if c["verdict"] == "FAIL"]
    if "FaultTolerancePlugin" in recipe.plugins:
        assert {c["name"]: c["verdict"] for c in data["checks"]}["section timeouts declared"] == "pass"


def test_the_docs_page_is_written_from_the_files():
    sys.path.insert(0, str(REPO / "docs"))
    try:
        from recipe_page import MARKER, catalog_markdown
    finally:
        sys.path.remove(str(REPO / "docs"))
    page = (REPO / "docs" / "recipes.md").read_text()
    assert MARKER in page
    text = catalog_markdown()
    for name, recipe in RECIPES.items():
        assert f"### `{name}`" in text and f"recipes/{name.replace('-', '_')}.py" in text
        assert recipe.script.strip() in text
        assert f"--step-time {recipe.step_time_s:g} --save-time {recipe.save_time_s:g}" in text
        # What a recipe holds is on the page once, from the file: the page's own text does not repeat it.
        assert recipe.summary not in page and recipe.description not in page
    assert "num_in_job_restarts=3" in text


# ------------------------------------------------------------------------------- issue 47 item 14: overrides
@pytest.mark.parametrize(
    ("override", "field", "allowed"),
    [
        ({"num_in_job_restarts": 5}.items(), None, "a mapping of field name -> value"),
        ({"section_timeouts": threading.Lock()}, "section_timeouts", "a plain value"),
        ({"section_timeouts": (s for s in ("step",))}, "section_timeouts", "a plain value"),
    ],
    ids=["items-view", "lock", "generator"],
)
def test_an_override_that_is_not_a_plain_mapping_is_one_error_line(override, field, allowed):
    with pytest.raises(ResiliencyConfigError) as raised:
        get_recipe("local-smoke", FaultTolerancePlugin=override)
    message = str(raised.value)
    assert "\n" not in message and allowed in message and "local-smoke" in message, message
    assert "FaultTolerancePlugin" in message
    assert raised.value.field == (field or "FaultTolerancePlugin")
    assert not isinstance(raised.value.__cause__, ResiliencyConfigError)


def test_an_override_is_copied_not_shared():
    timeouts = {"setup": 100.0, "step": 20.0, "checkpointing": 50.0}
    built = get_recipe("local-smoke", FaultTolerancePlugin={"section_timeouts": timeouts})[0]
    timeouts["step"] = 1.0
    assert built.section_timeouts["step"] == 20.0


def test_old_import_paths_still_load():
    """Saved experiments and scripts name these paths: unchanged by the move to recipes/."""
    from nemo_resiliency_plugins.recipes import PLUGIN_MODULES, Recipe, list_recipes, plugin_class  # noqa: F401
    from nemo_resiliency_plugins.recipes.local_fault_tolerance import plugin

    assert plugin().num_in_job_restarts == 3
    assert re.fullmatch(r".*/recipes/__init__\.py", catalog.__file__)
