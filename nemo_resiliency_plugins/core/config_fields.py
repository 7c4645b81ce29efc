"""The field names of an installed Megatron Bridge config class, read from its source without importing it.

A plugin that emits ``checkpoint.<field>`` must emit only fields the installed ``CheckpointConfig`` has: Hydra
refuses an unknown key, and the next Megatron Bridge drops ``async_strategy`` (its newest ``config.py`` has none;
Megatron Core's own async saver was removed). Importing ``megatron.bridge.training.config`` costs seconds and needs
Megatron Bridge where the experiment is defined, so the class is read as text (:mod:`ast`): its own annotated
fields plus those of its dataclass bases, each base followed through the ``from X import Y [as Z]`` that names it
(package ``__init__`` re-exports and relative imports included). ``None`` when the source is not on this host or
cannot be followed: the caller then keeps the behaviour tested with Megatron Bridge 0.6.2.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
from pathlib import Path

MB_CONFIG_MODULE = "megatron.bridge.training.config"


def _module_file(module: str) -> Path | None:
    """The file of ``module`` (``a/b.py`` or ``a/b/__init__.py``) under the top-level package's locations."""
    top, *rest = module.split(".")
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None
    for root in (spec.submodule_search_locations or []) if spec is not None else []:
        base = Path(root, *rest)
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if candidate.is_file():
                return candidate
    return None


def _resolve(module: str, level: int, here: str, is_package: bool) -> str:
    if not level:
        return module
    parts = here.split(".")
    parts = parts if is_package else parts[:-1]
    parts = parts[: len(parts) - (level - 1)] if level > 1 else parts
    return ".".join([*parts, module] if module else parts)


def class_fields(module: str, cls: str, *, source: str | None = None, _depth: int = 0) -> frozenset[str] | None:
    """Annotated field names of ``module.cls`` and its bases (read from source); None where it cannot be read."""
    if _depth > 8:
        return None
    path = _module_file(module)
    is_package = path is not None and path.name == "__init__.py"
    if source is None:
        if path is None:
            return None
        try:
            source = path.read_text()
        except (OSError, UnicodeDecodeError):
            return None
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    imported: dict[str, tuple[str, str]] = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            target = _resolve(node.module or "", node.level, module, is_package)
            for alias in node.names:
                imported[alias.asname or alias.name] = (target, alias.name)
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == cls:
            fields = {n.target.id for n in node.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
            for base in node.bases:
                if isinstance(base, ast.Name) and base.id in imported:
                    inherited = class_fields(*imported[base.id], _depth=_depth + 1)
                    if inherited is None:
                        return None
                    fields |= inherited
            return frozenset(fields)
    if cls in imported:  # a re-export: follow it
        return class_fields(*imported[cls], _depth=_depth + 1)
    return None


@functools.lru_cache(maxsize=8)
def megatron_bridge_fields(cls: str) -> frozenset[str] | None:
    """Fields of the installed Megatron Bridge's ``training.config.<cls>``; None where its source is not here."""
    return class_fields(MB_CONFIG_MODULE, cls)
