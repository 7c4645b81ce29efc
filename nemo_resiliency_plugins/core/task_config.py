"""The one place that sets a Megatron Bridge config field on a NeMo-Run task.

Plugins describe *what* they want (``section="ft", values={"enable_ft_package": True, ...}``); this module
decides *how* for each task type:

``run.Script``
    Hydra-style overrides appended to ``task.args``, read back by Megatron Bridge's
    ``process_config_with_overrides``. Sections that ``ConfigContainer`` leaves ``None`` by default
    (``ft``, ``nvrx_straggler``, ``inprocess_restart``, ``straggler``) cannot take a plain ``ft.x=...``
    override (the key has no children yet), and ``+ft.x=...`` would leave a plain dict where the training
    code expects a dataclass. They are written as one whole-section override carrying ``_target_``
    (``ft={_target_:megatron.bridge.training.config.FaultToleranceConfig,enable_ft_package:true,...}``):
    Megatron Bridge's override applier instantiates ``_target_`` dicts, so the job gets a real
    ``FaultToleranceConfig`` whether its recipe left ``ft`` as None or not. Sections that always exist
    (``train``, ``checkpoint``, ``dist``, ``rerun_state_machine``) get one ``section.field=value`` per field.
    An override the user already wrote for the same key is kept if it agrees, folded in if it belongs to a
    whole-section override, and reported as a :class:`ResiliencyConfigError` if it disagrees.

``run.Partial`` / ``run.Config``
    The ``ConfigContainer`` buildable inside the task (the task itself, or its argument that builds a
    ``ConfigContainer``, e.g. ``run.Partial(pretrain, config=run.Config(ConfigContainer, ...))``) gets the
    attribute set with fiddle. A ``None`` sub-config is created as a buildable of the class that the
    container's own field annotation names, so it follows the user's installed Megatron Bridge version.

A program in front of the task's own
    Some mechanisms must run code in each rank's process before the training script starts (the rank keeper of
    in-process restart with a reserve, the local checkpoint check). ``front_program.put_in_front`` re-targets a
    ``run.Script`` at that program, arguments untouched, and names what runs next in the job's environment.

``script_args_converter_fn``
    Megatron Bridge's escape hatch for scripts with other argument styles: when a plugin has one, the
    plugin's script-args object is passed to it and whatever list of strings it returns is appended.
"""

from __future__ import annotations

import dataclasses
import logging
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import fiddle as fdl
import nemo_run as run

from nemo_resiliency_plugins.core.hydra_overrides import (
    Override,
    OverrideSyntaxError,
    find_overrides,
    format_value,
    parse_value,
    same_value,
)
from nemo_resiliency_plugins.core.validation import SHELL_WORD, SHELL_WORD_TEXT
from nemo_resiliency_plugins.errors import ResiliencyConfigError

logger = logging.getLogger(__name__)

_MB_CONFIG = "megatron.bridge.training.config"


@dataclass(frozen=True)
class Section:
    """A top-level field of Megatron Bridge's ``ConfigContainer``."""

    name: str
    class_name: str
    # True where ConfigContainer's default is None: the section must be created, not edited.
    optional: bool

    @property
    def class_path(self) -> str:
        return f"{_MB_CONFIG}.{self.class_name}"


# Checked against the installed Megatron Bridge by tests/contract/test_megatron_bridge_config.py.
SECTIONS: dict[str, Section] = {
    s.name: s
    for s in (
        Section("ft", "FaultToleranceConfig", optional=True),
        Section("nvrx_straggler", "NVRxStragglerDetectionConfig", optional=True),
        Section("straggler", "StragglerDetectionConfig", optional=True),
        Section("inprocess_restart", "InProcessRestartConfig", optional=True),
        Section("rerun_state_machine", "RerunStateMachineConfig", optional=False),
        Section("train", "TrainingConfig", optional=False),
        Section("checkpoint", "CheckpointConfig", optional=False),
        Section("dist", "DistributedInitConfig", optional=False),
    )
}


@dataclass(frozen=True)
class Change:
    """What one call changed on a task, for logs and ``nemo-resiliency explain``."""

    plugin: str
    description: str


def set_config_fields(
    task: run.Script | fdl.Buildable,
    section: str,
    values: Mapping[str, Any],
    *,
    plugin: str,
    script_args: Any = None,
    script_args_converter_fn: Callable[[Any], list[str]] | None = None,
    fill_none: bool = False,
) -> list[Change]:
    """Make the job's ``ConfigContainer.<section>`` carry ``values``; returns what was changed.

    ``fill_none``: a field a ``run.Partial``'s config sets to None explicitly counts as unset (Megatron Bridge's
    meaning of None for optional paths such as ``checkpoint.load``), so the plugin may fill it in.

    Every change is logged here (INFO, prefixed with the plugin's name), so an experiment's log says what each
    plugin did to the task whichever plugin made the change.
    """
    if section not in SECTIONS:
        raise ResiliencyConfigError(plugin, None, detail=f"unknown Megatron Bridge config section {section!r}")
    if isinstance(task, run.Script):
        if script_args_converter_fn is not None:
            changes = _apply_converter(task, plugin, script_args, script_args_converter_fn)
        else:
            changes = _set_on_script(task, SECTIONS[section], values, plugin)
    elif isinstance(task, fdl.Buildable):
        changes = _set_on_buildable(task, SECTIONS[section], values, plugin, fill_none=fill_none)
    else:
        raise ResiliencyConfigError(
            plugin,
            None,
            detail=(
                f"cannot configure a task of type {type(task).__name__}; expected run.Script, run.Partial or run.Config"
            ),
        )
    for change in changes:
        logger.info("%s: %s", plugin, change.description)
    return changes


def config_field_seen(task: run.Script | fdl.Buildable, section: str, field: str, *, plugin: str) -> tuple[bool, Any]:
    """``(seen, value)``: whether the job's value of ``section.field`` can be known from the task, and that value.

    A ``run.Script`` shows a field only through an override in ``task.args`` (the recipe inside the script is
    invisible): ``checkpoint.save=/x`` is seen, ``~checkpoint.save`` and ``checkpoint.save=null`` are seen as
    None. A ``run.Partial`` / ``run.Config`` holding the ``ConfigContainer`` shows every field of a section it
    sets: a field left unset there has the section class's default. Plugins use it for rules that need to know
    a value is *absent* (no checkpoint directory at all), which :func:`read_config_field` cannot tell apart
    from "not visible".
    """
    if isinstance(task, run.Script):
        seen, found = False, None
        for override in script_overrides(task, plugin=plugin):
            if override.key == f"{section}.{field}":
                seen, found = True, None if override.prefix == "~" else override.value
            elif override.key == section and _removes_section(override):
                seen, found = True, None  # ``~section`` and ``section=null``: no section, so no field (one answer)
            elif override.key == section and isinstance(override.value, dict) and field in override.value:
                seen, found = True, override.value[field]
        return seen, found
    if isinstance(task, fdl.Buildable):
        container = _find_container(task, SECTIONS[section], plugin=plugin, required=False)
        current = None if container is None else _explicit(container, section)
        if current is None:
            return False, None
        if isinstance(current, fdl.Buildable) and field not in current.__arguments__:
            cls = _target_class(current)
            for f in dataclasses.fields(cls) if dataclasses.is_dataclass(cls) else ():
                if f.name == field:
                    if f.default is not dataclasses.MISSING:
                        return True, f.default
                    if f.default_factory is not dataclasses.MISSING:
                        return True, f.default_factory()
            return False, None
        return True, _explicit(current, field)
    return False, None


def read_config_field(task: run.Script | fdl.Buildable, section: str, field: str, *, plugin: str) -> Any:
    """The value the task already sets for ``section.field``, or None when the task does not set it.

    Used by plugins to check cross-field rules (e.g. the NCCL watchdog against in-process timeouts). A
    ``task.args`` that Hydra cannot parse is a ResiliencyConfigError naming ``plugin``.
    """
    if isinstance(task, run.Script):
        found = None
        for override in script_overrides(task, plugin=plugin):
            if override.key == f"{section}.{field}":
                found = None if override.prefix == "~" else override.value
            elif override.key == section and _removes_section(override):
                found = None
            elif override.key == section and isinstance(override.value, dict) and field in override.value:
                found = override.value[field]
        return found
    if isinstance(task, fdl.Buildable):
        container = _find_container(task, SECTIONS[section], plugin=plugin, required=False)
        if container is None:
            return None
        current = _explicit(container, section)
        if current is None:
            return None
        return _explicit(current, field)
    return None


# ---------------------------------------------------------------------------------------------- run.Script


def script_overrides(task: run.Script, *, plugin: str) -> list[Override]:
    """The Hydra overrides in ``task.args``, read by Hydra's own parser (what the job will read).

    One that Hydra rejects (an unterminated quote, a sweep) is a :class:`ResiliencyConfigError` naming the
    plugin, the override's key and the text: the job would fail on it at start, and the plugin cannot tell
    whether it agrees with what the plugin sets.
    """
    try:
        return find_overrides(task.args)
    except OverrideSyntaxError as err:
        raise ResiliencyConfigError(
            plugin,
            f"task.args[{err.key}]" if err.key else "task.args",
            err.arg,
            "an override Hydra's parser accepts (key=value; quote a value with spaces or special characters)",
            detail=err.reason,
        ) from None


def _apply_converter(task: run.Script, plugin: str, script_args: Any, fn: Callable[[Any], list[str]]) -> list[Change]:
    produced = fn(script_args)
    if not isinstance(produced, (list, tuple)) or not all(isinstance(a, str) for a in produced):
        raise ResiliencyConfigError(
            plugin,
            "script_args_converter_fn",
            fn,
            "a function returning a list of str",
            detail=f"it returned {produced!r}",
        )
    task.args = list(task.args) + list(produced)
    return [Change(plugin, f"script args (custom converter): {' '.join(produced)}")]


def _set_on_script(task: run.Script, section: Section, values: Mapping[str, Any], plugin: str) -> list[Change]:
    args = list(task.args)
    overrides = script_overrides(task, plugin=plugin)
    if section.optional:
        return _set_whole_section(task, args, overrides, section, values, plugin)

    whole = [o for o in overrides if o.key == section.name]
    for override in whole:
        _refuse_section_removal(plugin, section, override, args[override.index])
    changes = []
    for field, value in values.items():
        key = f"{section.name}.{field}"
        mine = [o for o in overrides if o.key == key]
        for override in mine:
            _check_agrees(plugin, key, override, value, where="task.args")
        for override in whole:  # section={...} carrying the field: it must agree too
            if isinstance(override.value, dict) and field in override.value:
                if not same_value(override.value[field], value):
                    raise ResiliencyConfigError(
                        plugin,
                        key,
                        value,
                        detail=(
                            f"task.args already has {args[override.index]!r}; {plugin} would set "
                            f"{key}={format_value(value)}. Make them agree (a user value is never silently "
                            "overwritten)"
                        ),
                    )
        if not mine:
            args.append(f"{key}={_script_safe(plugin, section.name, field, value)}")
            changes.append(Change(plugin, f"override {args[-1]}"))
    task.args = args
    return changes


def _set_whole_section(task, args, overrides, section: Section, values, plugin: str) -> list[Change]:
    """``++section._target_=<class>`` then ``++section.<field>=<value>`` for each field.

    ``++`` adds a key or overrides it, so the same overrides work whether the job's recipe left the section
    None (Hydra creates a dict, and Megatron Bridge's applier instantiates it from ``_target_``) or built it
    already (the dict of its current values gains ``_target_`` and is re-instantiated with them). A
    ``{...}`` value would be safer to read but NeMo-Run shlex-quotes launcher arguments, and on
    LocalExecutor those quotes reach the script literally; these overrides use only characters shlex
    leaves alone.
    """
    user: dict[str, tuple[str, Any]] = {}
    for override in overrides:
        if override.key != section.name and not override.key.startswith(section.name + "."):
            continue
        shown = args[override.index]
        if override.key == section.name:
            _refuse_section_removal(plugin, section, override, shown)
        if override.prefix == "~":
            raise ResiliencyConfigError(
                plugin, override.key, shown, detail=f"task.args deletes '{override.key}', which {plugin} sets"
            )
        if override.key == section.name:
            if isinstance(override.value, dict):
                for field, value in override.value.items():
                    user[field] = (shown, value)
            continue
        field = override.key[len(section.name) + 1 :]
        user[field] = (shown, override.value)

    if "_target_" in user and user["_target_"][1] != section.class_path:
        raise ResiliencyConfigError(
            plugin,
            f"{section.name}._target_",
            user["_target_"][1],
            section.class_path,
            detail=f"task.args builds '{section.name}' from another class ({user['_target_'][0]})",
        )
    wanted = {"_target_": section.class_path, **values}
    for field, value in values.items():
        if field in user and not same_value(user[field][1], value):
            raise ResiliencyConfigError(
                plugin,
                f"{section.name}.{field}",
                value,
                detail=(
                    f"task.args already has {user[field][0]!r}; {plugin} would set "
                    f"{section.name}.{field}={format_value(value)}. Remove the override from the task or set the "
                    "plugin field to the value you want (a user value is never silently overwritten)"
                ),
            )
    # Drop the user's per-field overrides we re-emit (they agree); a whole-section one stays, ours follow it.
    drop = {
        o.index for o in overrides if o.key.startswith(section.name + ".") and o.key[len(section.name) + 1 :] in wanted
    }
    new = [
        f"++{section.name}.{field}={_script_safe(plugin, section.name, field, value)}"
        for field, value in wanted.items()
    ]
    task.args = [a for i, a in enumerate(args) if i not in drop] + new
    return [Change(plugin, "override " + " ".join(new))]


def _removes_section(override: Override) -> bool:
    """``~section`` deletes a section and ``section=null`` sets it to None: the same removal in Hydra's grammar,
    so every rule that reads a section treats both alike."""
    return override.prefix == "~" or override.value is None


def _refuse_section_removal(plugin: str, section: Section, override: Override, shown: str) -> None:
    """One rule for every way of saying "no such section": ``~ft`` deletes it and ``ft=null`` sets it to None.

    Both contradict a plugin that needs the section, so both are refused (never silently overridden), for
    sections Megatron Bridge creates (``train``) and those it leaves None (``ft``) alike.
    """
    if _removes_section(override):
        how = "deletes" if override.prefix == "~" else "sets to null"
        raise ResiliencyConfigError(
            plugin,
            section.name,
            shown,
            detail=f"task.args {how} '{section.name}', which {plugin} needs; remove {shown!r} from task.args",
        )


def _script_safe(plugin: str, section: str, field: str, value: Any) -> str:
    """``value`` as override text that reaches the script intact and that Hydra reads back as ``value``."""
    try:
        text = format_value(value)
    except (TypeError, ValueError) as err:
        raise ResiliencyConfigError(
            plugin, f"{section}.{field}", value, "a plain config value", detail=str(err)
        ) from None
    if SHELL_WORD.fullmatch(text) is None:
        raise ResiliencyConfigError(
            plugin,
            f"{section}.{field}",
            value,
            f"a value made of {SHELL_WORD_TEXT}",
            detail=(
                "NeMo-Run shell-quotes launcher arguments and, on LocalExecutor, the quotes reach the script "
                "literally, so this value would not arrive intact"
            ),
        )
    try:
        back = parse_value(text)
    except OverrideSyntaxError as err:
        back = err
    if not same_value(back, value):
        raise ResiliencyConfigError(
            plugin,
            f"{section}.{field}",
            value,
            "a value Hydra's override parser reads back unchanged",
            detail=f"written as {text!r}, the job would read {back!r}",
        )
    return text


def _check_agrees(plugin: str, key: str, override: Override, value: Any, where: str) -> None:
    existing, raw = override.value, override.raw_value
    if override.prefix == "~" or not same_value(existing, value):
        raise ResiliencyConfigError(
            plugin,
            key,
            value,
            detail=(
                f"{where} already sets {key}={raw}; {plugin} would set {format_value(value)}. Remove one of them "
                "or make them agree (a user value is never silently overwritten)"
            ),
        )


# ------------------------------------------------------------------------------ run.Partial / run.Config


def _set_on_buildable(
    task: fdl.Buildable, section: Section, values: Mapping[str, Any], plugin: str, *, fill_none: bool = False
) -> list[Change]:
    container = _find_container(task, section, plugin, required=True)
    container_cls = _target_class(container)
    current = (
        _explicit(container, section.name) if isinstance(container, fdl.Buildable) else getattr(container, section.name)
    )
    changes = []
    if current is None:
        sub_cls = _section_class(container_cls, section, plugin)
        current = run.Config(sub_cls)
        setattr(container, section.name, current)
        changes.append(Change(plugin, f"created {section.name}=run.Config({sub_cls.__name__})"))

    sub_cls = _target_class(current)
    known = {f.name for f in dataclasses.fields(sub_cls)} if dataclasses.is_dataclass(sub_cls) else None
    for field, value in values.items():
        key = f"{section.name}.{field}"
        if known is not None and field not in known:
            raise ResiliencyConfigError(
                plugin,
                key,
                value,
                detail=f"the installed Megatron Bridge's {sub_cls.__name__} has no field '{field}'",
            )
        existing = _explicit_or_changed(current, field, sub_cls)
        if fill_none and existing is None:
            existing = _UNSET
        if existing is not _UNSET:
            if not same_value(existing, value):
                raise ResiliencyConfigError(
                    plugin,
                    key,
                    value,
                    detail=(
                        f"the task already sets {key}={existing!r}; {plugin} would set {value!r}. Remove it from "
                        "the task or set the plugin field to the value you want (a user value is never "
                        "silently overwritten)"
                    ),
                )
            continue
        setattr(current, field, value)
        changes.append(Change(plugin, f"set {key}={value!r}"))
    return changes


_UNSET = object()


def _find_container(task: fdl.Buildable, section: Section, plugin: str, required: bool):
    if _has_field(_target_class(task), section.name):
        return task
    candidates = []
    for name, arg in task.__arguments__.items():
        if _has_field(_target_class(arg), section.name):
            candidates.append((name, arg))
    if len(candidates) > 1:
        candidates = [c for c in candidates if c[0] == "config"] or candidates[:1]
    if candidates:
        return candidates[0][1]
    if not required:
        return None
    fn = getattr(fdl.get_callable(task), "__qualname__", fdl.get_callable(task))
    nemo2 = nemo2_entry(task)
    if nemo2 is not None:
        raise ResiliencyConfigError(
            plugin,
            None,
            detail=(
                f"the task run.{type(task).__name__}({nemo2}, ...) is a NeMo 2 task (a Lightning trainer=, no "
                f"Megatron Bridge ConfigContainer). {plugin}, like Megatron Bridge's plugin of that name, configures "
                "Megatron Bridge's ConfigContainer; for NeMo 2 use NeMo's own plugins, "
                f"nemo.lightning.run.plugins.{plugin}, or move the task to Megatron Bridge "
                "(run.Partial(pretrain, config=run.Config(ConfigContainer, ...)))"
            ),
        )
    raise ResiliencyConfigError(
        plugin,
        None,
        detail=(
            f"cannot find a Megatron Bridge ConfigContainer (a config with a '{section.name}' field) in the task "
            f"run.{type(task).__name__}({fn}, ...); pass it as an argument, e.g. "
            "run.Partial(pretrain, config=run.Config(ConfigContainer, ...))"
        ),
    )


def nemo2_entry(task: fdl.Buildable) -> str | None:
    """The entry point's name when ``task`` is a NeMo 2 task, else None.

    NeMo 2's entries (``nemo.collections.llm.api.pretrain``/``finetune``, a user's wrapper of them) take a
    Lightning ``trainer`` next to ``model``/``data``; a Megatron Bridge task takes a ``ConfigContainer``.
    Told by the module (``nemo.``) or by that signature, so the message is right where NeMo is not installed.
    """
    fn = fdl.get_callable(task)
    module = getattr(fn, "__module__", "") or ""
    name = f"{module}.{getattr(fn, '__qualname__', fn)}" if module else str(fn)
    if module == "nemo" or module.startswith("nemo."):
        return name
    try:
        import inspect

        params = set(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        params = set(task.__arguments__)
    params |= set(task.__arguments__)
    return name if "trainer" in params and params & {"model", "data"} else None


def require_container(task: Any, section: str, *, plugin: str) -> None:
    """Refuse a ``run.Partial``/``run.Config`` without a Megatron Bridge ``ConfigContainer`` (a NeMo 2 task,
    another program) before any rule reads a field of it: "no checkpoint.save" would point the wrong way."""
    if isinstance(task, fdl.Buildable):
        _find_container(task, SECTIONS[section], plugin, required=True)


def _target_class(obj: Any) -> Any:
    if isinstance(obj, fdl.Buildable):
        return fdl.get_callable(obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return type(obj)
    return None


def _has_field(cls: Any, name: str) -> bool:
    return isinstance(cls, type) and dataclasses.is_dataclass(cls) and name in {f.name for f in dataclasses.fields(cls)}


def _section_class(container_cls: type, section: Section, plugin: str) -> type:
    """The dataclass that ``container_cls``'s own annotation names for ``section`` (Optional unwrapped)."""
    try:
        annotation = typing.get_type_hints(container_cls)[section.name]
    except Exception:
        annotation = {f.name: f.type for f in dataclasses.fields(container_cls)}[section.name]
    candidates = [annotation]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        candidates = list(typing.get_args(annotation))
    for candidate in candidates:
        if isinstance(candidate, type) and dataclasses.is_dataclass(candidate):
            return candidate
    raise ResiliencyConfigError(
        plugin,
        section.name,
        annotation,
        detail=f"{container_cls.__name__}.{section.name} is not annotated with a dataclass type",
    )


def _explicit(obj: Any, name: str) -> Any:
    """A value set on a buildable (not its default), or the attribute of a dataclass instance."""
    if isinstance(obj, fdl.Buildable):
        return obj.__arguments__.get(name)
    return getattr(obj, name, None)


def _explicit_or_changed(obj: Any, field: str, cls: Any) -> Any:
    """The user's own value for ``field``: explicitly set on a buildable, or differing from the default."""
    if isinstance(obj, fdl.Buildable):
        return obj.__arguments__.get(field, _UNSET)
    value = getattr(obj, field)
    for f in dataclasses.fields(cls):
        if f.name == field:
            if f.default is not dataclasses.MISSING and same_value(f.default, value):
                return _UNSET
            if f.default_factory is not dataclasses.MISSING and same_value(f.default_factory(), value):
                return _UNSET
    return value
