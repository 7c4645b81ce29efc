"""The plugins a saved NeMo-Run experiment holds, read as data: nothing from the directory is imported or called.

A report must be safe on any directory a user is handed (a colleague's job, a bug report). NeMo-Run's own loader
(``Experiment._from_config``) is not: the experiment's ``_CONFIG`` and ``_TASKS`` are fiddle's serialization JSON,
which names modules and callables (``{"type": "pyref", "module": ..., "name": ...}``); loading it imports each one
and ``fdl.build`` then calls them, so a crafted file runs whatever it names. Here the JSON is parsed with the
standard library and walked by hand:

* a job's ``plugins`` list is read from ``_TASKS`` (the serialized jobs NeMo-Run writes beside ``_CONFIG``);
* a plugin is rebuilt only when the class it names is one of this package's own plugin classes (an allowlist of
  module and class names compared as strings: nothing is imported by the name the file gives), and only from
  plain field values (``None``, bool, int, float, str, and lists, tuples and dicts of those); a callable field
  (``script_args_converter_fn``) is left at its default, as the report has no use for it;
* the plugin's own ``__post_init__`` checks the values, as it does for a user's;
* any other class, any value that is not plain, a file that is not a regular one or is too large, or JSON that is
  not fiddle's: the job's plugins are unknown (``None``), never a partial list.
"""

from __future__ import annotations

import ast
import base64
import binascii
import json
import os
import re
import stat
import zlib
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

#: The serialized-jobs file NeMo-Run writes into each experiment directory (``Experiment._TASK_FILE``).
TASKS_FILE = "_TASKS"
#: The most bytes read from ``_TASKS``, and the most one job's decompressed JSON may hold: a real one is a few
#: hundred KB; a file past this is not one NeMo-Run wrote for a job a report can describe.
MAX_BYTES = 32 * 1024 * 1024
#: How deep plain values may nest (a section-timeouts dict is 1 deep).
MAX_DEPTH = 16
#: The package's plugin classes, by the (module, class) a saved experiment names them with. Plugin modules never
#: move (CONTRIBUTING: module paths are stored in saved experiments).
PLUGIN_CLASSES = {
    ("nemo_resiliency_plugins.async_checkpoint", "AsyncCheckpointPlugin"),
    ("nemo_resiliency_plugins.fault_tolerance", "FaultTolerancePlugin"),
    ("nemo_resiliency_plugins.inprocess_restart", "InProcessRestartPlugin"),
    ("nemo_resiliency_plugins.local_checkpoint", "LocalCheckpointPlugin"),
    ("nemo_resiliency_plugins.preemption", "PreemptionPlugin"),
    ("nemo_resiliency_plugins.rerun", "RerunStateMachinePlugin"),
    ("nemo_resiliency_plugins.straggler", "StragglerDetectionPlugin"),
}
#: The NeMo-Run classes a saved job's executor and ``run.Script`` task are rebuilt from (same rules as plugins:
#: named by string, plain fields only). Anything else (a ``run.Partial`` of a training function, a tunnel that
#: connects, a class of the user's) is not rebuilt: doctor and rehearse say so in one line.
RUN_CLASSES = {
    ("nemo_run.config", "Script"),
    ("nemo_run.core.execution.local", "LocalExecutor"),
    ("nemo_run.core.execution.slurm", "SlurmExecutor"),
    ("nemo_run.core.execution.docker", "DockerExecutor"),
    ("nemo_run.core.execution.launcher", "Torchrun"),
    ("nemo_run.core.execution.launcher", "FaultTolerance"),
    ("nemo_run.core.execution.slurm", "SlurmJobDetails"),
    ("nemo_run.core.execution.base", "ExecutorMacros"),
    ("nemo_resiliency_plugins.core.executors.base", "FaultToleranceWithSections"),
    ("nemo_run.core.packaging.pattern", "PatternPackager"),
    ("nemo_run.core.packaging.base", "Packager"),
    ("nemo_run.core.packaging.git", "GitArchivePackager"),
    ("nemo_run.core.tunnel.client", "LocalTunnel"),
}
#: Fields that hold a callable: never rebuilt from a file (left at their default).
CALLABLE_FIELDS = frozenset({"script_args_converter_fn"})
_PLAIN_CONTAINERS = {"list", "tuple", "dict"}
_ATTR = re.compile(r"Attr\(name='([A-Za-z_][A-Za-z0-9_]*)'\)")
_INDEX = re.compile(r"Index\(index=([0-9]{1,9})\)")
_KEY = re.compile(r"Key\(key=(.{1,1000})\)", re.DOTALL)


class NotPlain(Exception):
    """A part of the file this reader does not rebuild (a class, a callable, a reference to a module)."""


@dataclass(frozen=True)
class SavedJob:
    """One job of a saved experiment: its folder as NeMo-Run named it, its plugins (None: unknown), and its task
    and executor when they are of :data:`RUN_CLASSES` (else None, with ``problem`` saying what was not rebuilt)."""

    job_dir: str | None
    plugins: list[Any] | None
    task: Any = None
    executor: Any = None
    problem: str | None = None


def read_regular(path: Path, limit: int = MAX_BYTES) -> bytes | None:
    """The bytes of ``path`` when it is a regular file of at most ``limit`` bytes, else None (a FIFO would block
    the read for ever, a device or a huge file would fill the memory)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > limit:
            return None
        with os.fdopen(fd, "rb", closefd=False) as handle:
            data = handle.read(limit + 1)
        return data if len(data) <= limit else None
    finally:
        os.close(fd)


def saved_jobs(exp_dir: str | Path) -> list[SavedJob] | None:
    """Every job of the experiment NeMo-Run saved in ``exp_dir``, or None when its ``_TASKS`` cannot be read."""
    data = read_regular(Path(exp_dir) / TASKS_FILE)
    if data is None:
        return None
    try:
        entries = json.loads(data)
    except (ValueError, RecursionError):  # not JSON, or a number past Python's digit limit
        return None
    if not isinstance(entries, list):
        return None
    jobs = []
    for entry in entries:
        # NeMo-Run writes [job, task] per job: the job without its task, and the task serialized on its own.
        serialized = entry[0] if isinstance(entry, list) and entry else None
        task = entry[1] if isinstance(entry, list) and len(entry) > 1 else None
        jobs.append(_job(serialized, task) if isinstance(serialized, str) else SavedJob(None, None))
    return jobs


def _decode(serialized: str) -> dict | None:
    """NeMo-Run's ZlibJSONSerializer format (url-safe base64 of zlib of fiddle's JSON), decoded as data."""
    try:
        packed = base64.urlsafe_b64decode(serialized)
        inflate = zlib.decompressobj()
        text = inflate.decompress(packed, MAX_BYTES)
        if inflate.unconsumed_tail:
            return None
        graph = json.loads(text)
    except (binascii.Error, zlib.error, ValueError, RecursionError):
        return None
    return graph if isinstance(graph, dict) and isinstance(graph.get("objects"), dict) else None


def _job(serialized: str, saved_task: Any) -> SavedJob:
    graph = _decode(serialized)
    if graph is None:
        return SavedJob(None, None, problem="the saved job is not NeMo-Run's serialized JSON")
    objects = graph["objects"]
    try:
        root = _object(graph.get("root"), objects)
        items = _attrs(root)
        job_dir = executor = None
        problem = None
        if "executor" in items:
            saved = _object(items["executor"], objects)
            try:
                executor = _build(saved, objects, RUN_CLASSES)
            except NotPlain as err:
                problem = f"its executor is not rebuilt ({err})"
            try:  # the job's folder is read even from an executor not rebuilt (the report needs only that)
                fields_ = _attrs(saved)
                value = _plain(fields_["job_dir"], objects) if "job_dir" in fields_ else None
            except NotPlain:
                value = None
            job_dir = value if isinstance(value, str) else None
        task, task_problem = _task(saved_task)
        node = items.get("plugins")
        # a job added without plugins saves ``plugins=None``: no plugins, not unknown ones
        leaf_none = isinstance(node, dict) and node.get("type") == "leaf" and node.get("value") is None
        no_plugins = node is None or leaf_none
        listed = None if no_plugins else _object(node, objects)
        if listed is None or _builtin(listed) != "list":
            plugins = [] if listed is None else None
        else:
            plugins = [_build(_object(node, objects), objects, PLUGIN_CLASSES) for _path, node in _items(listed)]
        return SavedJob(job_dir, plugins, task, executor, problem or task_problem)
    except (NotPlain, KeyError, TypeError, ValueError, RecursionError) as err:
        return SavedJob(None, None, problem=f"it holds what is not rebuilt ({str(err)[:200]})")


def _task(saved: Any) -> tuple[Any, str | None]:
    """The job's task, saved by NeMo-Run as its own serialized string: only a ``run.Script`` of plain fields is
    rebuilt (a ``run.Partial`` names a function of the user's, which would have to be imported)."""
    if not isinstance(saved, str):
        return None, "it saved no task NeMo-Run could have written (a job group?)"
    graph = _decode(saved)
    if graph is None:
        return None, "its task is not NeMo-Run's serialized JSON"
    objects = graph["objects"]
    try:
        return _build(_object(graph.get("root"), objects), objects, RUN_CLASSES), None
    except (NotPlain, KeyError, TypeError, ValueError, RecursionError) as err:
        return None, f"its task is not rebuilt, only a run.Script of plain fields is ({str(err)[:200]})"


def _target(obj: dict, objects: dict) -> tuple[Any, Any]:
    metadata = _object(obj.get("metadata"), objects)
    target = _attrs(metadata).get("fn_or_cls")
    if not isinstance(target, dict) or target.get("type") != "pyref":
        raise NotPlain("an object with no class")
    return target.get("module"), target.get("name")


def _build(obj: dict, objects: dict, allowed: set[tuple[str, str]], depth: int = 0) -> Any:
    """An object of one of the ``allowed`` classes from its saved fields (plain values, or objects of the same
    allowlist); anything else is :class:`NotPlain`."""
    import importlib

    from nemo_resiliency_plugins.errors import ResiliencyConfigError

    named = _target(obj, objects)
    if named not in allowed or depth > MAX_DEPTH:
        raise NotPlain(f"not a class this reader rebuilds: {str(named[0])[:80]}.{str(named[1])[:80]}")
    # The module comes from the allowlist, never from the file.
    module, name = next(pair for pair in allowed if pair == named)
    cls = getattr(importlib.import_module(module), name)
    known = {f.name for f in fields(cls) if f.init}
    kwargs = {}
    for field_name, node in _attrs(obj).items():
        if field_name not in known:
            raise NotPlain(f"{name} has no field {field_name!r}")
        try:
            kwargs[field_name] = _plain(node, objects)
        except NotPlain:
            if field_name in CALLABLE_FIELDS:
                continue
            saved = _object(node, objects)
            if _builtin(saved) is not None:
                raise
            kwargs[field_name] = _build(saved, objects, allowed, depth + 1)
    try:
        return cls(**kwargs)
    except ResiliencyConfigError as err:
        raise NotPlain(f"{name}: {err}") from None
    except (TypeError, ValueError) as err:
        raise NotPlain(f"{name}: {type(err).__name__}") from None


def _object(node: Any, objects: dict) -> dict:
    if not isinstance(node, dict) or node.get("type") != "ref" or not isinstance(objects.get(node.get("key")), dict):
        raise NotPlain("not a reference to a saved object")
    return objects[node["key"]]


def _items(obj: dict) -> list[tuple[str, Any]]:
    items = obj.get("items")
    if not isinstance(items, list) or not all(isinstance(i, list) and len(i) == 2 for i in items):
        raise NotPlain("an object without items")
    return [(str(path), node) for path, node in items]


def _attrs(obj: dict) -> dict[str, Any]:
    """A Config's (or the traverser metadata's) fields: ``Attr(name='x')`` -> the node saved for it."""
    out = {}
    for path, node in _items(obj):
        match = _ATTR.fullmatch(path)
        if match is None:
            raise NotPlain(f"not a field: {path[:80]!r}")
        out[match.group(1)] = node
    return out


def _builtin(obj: dict) -> str | None:
    """``list``/``tuple``/``dict`` for an object fiddle saved as that builtin container, else None."""
    kind = obj.get("type")
    if isinstance(kind, dict) and kind.get("type") == "pyref" and kind.get("module") == "builtins":
        return kind.get("name") if kind.get("name") in _PLAIN_CONTAINERS else None
    return None


def _plain(node: Any, objects: dict, depth: int = 0) -> Any:
    """A plain value (None, bool, int, float, str, or a list/tuple/dict of those), or :class:`NotPlain`."""
    if depth > MAX_DEPTH or not isinstance(node, dict):
        raise NotPlain("too deep, or not a saved value")
    if node.get("type") == "leaf":
        value = node.get("value")
        if value is None or isinstance(value, bool | int | float | str):
            return value
        raise NotPlain("a leaf that is not a scalar")
    obj = _object(node, objects)
    kind = _builtin(obj)
    if kind is None:
        raise NotPlain("an object that is not a list, tuple or dict")
    values = [(path, _plain(child, objects, depth + 1)) for path, child in _items(obj)]
    if kind == "dict":
        return {_key(path): value for path, value in values}
    if any(_INDEX.fullmatch(path) is None for path, _ in values):
        raise NotPlain("a sequence item without an index")
    ordered = [value for _path, value in sorted(values, key=lambda pv: int(_INDEX.fullmatch(pv[0]).group(1)))]
    return ordered if kind == "list" else tuple(ordered)


def _key(path: str) -> str | int:
    """A dict key from fiddle's ``Key(key='setup')``: a string or int literal, parsed as a literal only."""
    match = _KEY.fullmatch(path)
    if match is None:
        raise NotPlain(f"not a dict key: {path[:80]!r}")
    try:
        key = ast.literal_eval(match.group(1))
    except (ValueError, SyntaxError, MemoryError):
        raise NotPlain("a dict key that is not a literal") from None
    if isinstance(key, bool) or not isinstance(key, str | int):
        raise NotPlain("a dict key that is not a string or an integer")
    return key


__all__ = ["PLUGIN_CLASSES", "RUN_CLASSES", "SavedJob", "read_regular", "saved_jobs"]
