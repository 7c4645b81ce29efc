"""What a recipe is and how it builds: the ``Recipe`` record every recipe file of this folder fills in, and the
plugin classes a recipe may name. The files themselves (one per recipe) are found by ``__init__.py``."""

from __future__ import annotations

import copy
import dataclasses
import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from nemo_resiliency_plugins.errors import ResiliencyConfigError

# Plugin class name -> module, imported only when a recipe is built (``list`` needs none of them).
PLUGIN_MODULES = {
    "FaultTolerancePlugin": "nemo_resiliency_plugins.fault_tolerance",
    "StragglerDetectionPlugin": "nemo_resiliency_plugins.straggler",
    "PreemptionPlugin": "nemo_resiliency_plugins.preemption",
    "RerunStateMachinePlugin": "nemo_resiliency_plugins.rerun",
    "InProcessRestartPlugin": "nemo_resiliency_plugins.inprocess_restart",
    "AsyncCheckpointPlugin": "nemo_resiliency_plugins.async_checkpoint",
    "LocalCheckpointPlugin": "nemo_resiliency_plugins.local_checkpoint",
}

_MAPPING_HINT = "a mapping of field name -> value, e.g. {'num_in_job_restarts': 5}"


@dataclass(frozen=True)
class Recipe:
    """A named plugin set: ``plugins`` maps plugin class names to their settings, in application order.

    ``script`` is a short experiment script that uses the recipe (the docs' recipe page shows it; the recipe
    tests run it as a NeMo-Run dry run). ``step_time_s`` and ``save_time_s`` are the step and checkpoint-save
    times the recipe's timeouts are chosen for: ``nemo-resiliency doctor`` passes the recipe with them (tested),
    so a job much slower than that needs its own timeouts. ``example`` names a longer example job beside it.
    """

    name: str
    summary: str
    description: str
    executors: tuple[str, ...]
    plugins: Mapping[str, Mapping[str, Any]]
    example: str | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)
    script: str = ""
    step_time_s: float | None = None
    save_time_s: float | None = None

    def build(self, **overrides: Mapping[str, Any]) -> list[Any]:
        """Fresh plugin instances. The catalog's settings are deep-copied into each, so changing a built
        plugin (or a dict it holds, such as ``section_timeouts``) never changes the catalog or a later build."""
        for class_name, extra in overrides.items():
            if not isinstance(extra, Mapping):  # e.g. d.items(): a view, not a mapping (issue 47 item 14)
                raise ResiliencyConfigError(f"recipe {self.name!r}", class_name, extra, _MAPPING_HINT)
        unknown = set(overrides) - set(self.plugins)
        if unknown:
            raise ResiliencyConfigError(
                f"recipe {self.name!r}",
                sorted(unknown)[0],
                overrides[sorted(unknown)[0]],
                "one of " + ", ".join(self.plugins),
                detail="overrides are keyed by the plugin class names of the recipe",
            )
        built = []
        for class_name, settings in self.plugins.items():
            cls = plugin_class(class_name)
            extra = _copied_override(self.name, class_name, overrides.get(class_name, {}))
            names = {f.name for f in dataclasses.fields(cls) if f.init}
            for key in extra:
                if key not in names:
                    raise ResiliencyConfigError(
                        class_name, key, extra[key], "a field of " + class_name, detail=f"in recipe {self.name!r}"
                    )
            built.append(cls(**{**copy.deepcopy(dict(settings)), **extra}))
        return built


def _copied_override(recipe: str, class_name: str, extra: Mapping[str, Any]) -> dict[str, Any]:
    """A private copy of one plugin's overrides, so the caller's dict is never shared with a plugin. A mapping
    that cannot be read as one, or a value that cannot be copied (a lock, a generator, an open file), is the
    user's error, said in one line, not a ``TypeError`` from ``copy.deepcopy``."""
    try:
        items = dict(extra)
    except Exception as err:  # a Mapping whose keys()/__getitem__ disagree or raise
        raise ResiliencyConfigError(f"recipe {recipe!r}", class_name, extra, _MAPPING_HINT) from err
    copied = {}
    for key, value in items.items():
        try:
            copied[key] = copy.deepcopy(value)
        except Exception as err:
            raise ResiliencyConfigError(
                class_name,
                key,
                value,
                "a plain value (number, string, bool, None, or a list/dict of them)",
                detail=f"in recipe {recipe!r}: it cannot be copied ({type(err).__name__})",
            ) from err
    return copied


def plugin_class(name: str) -> type:
    """The plugin class a recipe names (imported on first use)."""
    module = PLUGIN_MODULES.get(name)
    if module is None:
        raise ResiliencyConfigError("recipes", "plugin", name, "one of " + ", ".join(PLUGIN_MODULES))
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as err:
        raise ResiliencyConfigError(
            "recipes", "plugin", name, detail=f"{name} is not available in this version ({err})"
        ) from err
