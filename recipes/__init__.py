"""The recipe catalog: named, documented, validated plugin sets, attached in one line.

    from nemo_resiliency_plugins.recipes import get_recipe
    run.run(task, executor=executor, plugins=get_recipe("slurm-pretraining"))
    run.run(task, executor=executor, plugins=get_recipe("slurm-pretraining",
            FaultTolerancePlugin={"num_in_job_restarts": 5}))

Overrides are given per plugin class name, field by field; an unknown plugin or field is a
``ResiliencyConfigError`` (a typo must not silently leave a default in place).

This folder is the repository's top-level ``recipes/``, installed as ``nemo_resiliency_plugins.recipes``
(pyproject.toml maps it), so a checkout and a ``pip install`` read the same files. The catalog is the folder:
each ``<name>.py`` that assigns ``RECIPE = Recipe(...)`` at its top level is the recipe ``<name>`` (underscores
for hyphens), so adding a recipe is adding one file (tests/unit/test_recipe_files.py proves each). Files that
start with ``_`` are the machinery; ``local_fault_tolerance.py`` is the main example job (``.ci/demo``).
"""

from __future__ import annotations

import ast
import importlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from nemo_resiliency_plugins.errors import ResiliencyConfigError
from nemo_resiliency_plugins.recipes._catalog import PLUGIN_MODULES, Recipe, plugin_class

FOLDER = Path(__file__).resolve().parent


def recipe_files() -> list[Path]:
    """The recipe files of this folder, by name: modules that assign ``RECIPE`` at their top level. Read with
    ``ast``, not imported, so an example job beside them (which may import torch) is not run by ``list``."""
    found = []
    for path in sorted(FOLDER.glob("*.py")):
        if path.name.startswith("_"):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        targets = [t for node in tree.body if isinstance(node, ast.Assign) for t in node.targets]
        targets += [node.target for node in tree.body if isinstance(node, ast.AnnAssign)]
        if any(isinstance(t, ast.Name) and t.id == "RECIPE" for t in targets):
            found.append(path)
    return found


def _load() -> dict[str, Recipe]:
    recipes: dict[str, Recipe] = {}
    for path in recipe_files():
        recipe = getattr(importlib.import_module(f"{__name__}.{path.stem}"), "RECIPE", None)
        expected = path.stem.replace("_", "-")
        if not isinstance(recipe, Recipe) or recipe.name != expected:
            raise ResiliencyConfigError(
                "recipes",
                path.name,
                getattr(recipe, "name", recipe),
                f"RECIPE = Recipe(name={expected!r}, ...): a recipe file is named for its recipe",
            )
        recipes[recipe.name] = recipe
    return recipes


RECIPES: dict[str, Recipe] = _load()


def list_recipes() -> list[Recipe]:
    """Every recipe of the catalog, in file-name order."""
    return list(RECIPES.values())


def get_recipe(name: str, **overrides: Mapping[str, Any]) -> list[Any]:
    """The plugin instances of recipe ``name``, with per-plugin field overrides (new instances each call)."""
    if not isinstance(name, str) or name not in RECIPES:
        raise ResiliencyConfigError("recipes", "name", name, "one of " + ", ".join(RECIPES))
    return RECIPES[name].build(**overrides)


RecipeBuilder = Callable[..., list[Any]]

__all__ = ["PLUGIN_MODULES", "RECIPES", "Recipe", "get_recipe", "list_recipes", "plugin_class", "recipe_files"]
