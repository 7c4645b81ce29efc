"""Let ``import megatron.bridge.training.config`` work on a machine without Transformer Engine.

TEST/CPU ACCOMMODATION - not part of the plugins, and a no-op where Transformer Engine is installed.

Why this exists
---------------
Megatron Bridge's config module pulls in its model providers, and that import chain reaches
``megatron/bridge/peft/lora_layers.py``, which starts with an *unguarded*
``import transformer_engine.pytorch as te``. Transformer Engine cannot be built or loaded on a CPU-only
machine (it needs CUDA headers and links libcuda), so the whole config module - and with it
``ConfigContainer``, ``FaultToleranceConfig``, the Hydra override applier and the fault-tolerance
integration - fails to import with ``ModuleNotFoundError``. Everything else on that path (megatron-core
included) already guards its Transformer Engine imports.

What it does
------------
:func:`ensure_megatron_bridge_importable` installs a single meta-path finder that intercepts exactly one
module, ``megatron.bridge.peft.lora_layers``. It loads the real file from its real location, with the
one offending import line replaced by a local placeholder object bound to the name ``te``, and executes
it under its real filename. The placeholder only satisfies the module-level references (type
annotations such as ``te.ops.Sequential``); every placeholder "class" refuses to be instantiated, and
``isinstance`` checks against it are simply False. LoRA fused branches are therefore unusable, which
is irrelevant for config parsing and CPU tests.

What it deliberately does NOT do
--------------------------------
* It never puts a ``transformer_engine`` module into ``sys.modules``: megatron-core must keep
  detecting "no Transformer Engine" and take its non-TE code paths.
* It does nothing when ``transformer_engine`` is importable (a real GPU environment), when
  ``lora_layers`` has already been imported, or when the offending line is no longer in the file
  (upstream fixed it) - in the last case the file is loaded unmodified.
* It patches no other module.

The function is idempotent; call it before the first import of anything under ``megatron.bridge``.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types

__all__ = ["ensure_megatron_bridge_importable", "TARGET_MODULE", "OFFENDING_IMPORT"]

TARGET_MODULE = "megatron.bridge.peft.lora_layers"
OFFENDING_IMPORT = "import transformer_engine.pytorch as te"


class _MissingTEMeta(type):
    """Metaclass of the placeholders: any attribute is another placeholder; instantiation fails."""

    def __getattr__(cls, name: str):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        cache = cls.__dict__["_children"]
        if name not in cache:
            child = _MissingTEMeta(f"{cls.__name__}.{name}", (), {"_children": {}})
            cache[name] = child
        return cache[name]

    def __call__(cls, *args, **kwargs):
        raise ImportError(
            f"{cls.__name__} is a placeholder installed by nemo_resiliency_plugins.testing.te_compat: "
            "Transformer Engine is not installed, so this LoRA code path is unavailable."
        )


def _make_placeholder() -> type:
    return _MissingTEMeta("transformer_engine.pytorch(missing)", (), {"_children": {}})


class _PatchedSourceLoader(importlib.machinery.SourceFileLoader):
    """Loads the real lora_layers.py with the one unguarded TE import replaced by a placeholder."""

    def get_code(self, fullname):  # noqa: D401 - importlib API
        source = self.get_data(self.path).decode("utf-8")
        lines = source.splitlines(keepends=True)
        replaced = False
        for i, line in enumerate(lines):
            if line.strip() == OFFENDING_IMPORT and not line.startswith((" ", "\t")):
                newline = "\n" if line.endswith("\n") else ""
                # Same line count, so tracebacks still point at the right lines of the real file.
                lines[i] = f"te = __nrp_te_placeholder__  # te_compat: was `{OFFENDING_IMPORT}`{newline}"
                replaced = True
                break
        if not replaced:
            # Upstream no longer has the unguarded import: load the file as it is.
            return super().get_code(fullname)
        return compile("".join(lines), self.path, "exec", dont_inherit=True)

    def exec_module(self, module: types.ModuleType) -> None:
        module.__dict__["__nrp_te_placeholder__"] = _make_placeholder()
        try:
            super().exec_module(module)
        finally:
            module.__dict__.pop("__nrp_te_placeholder__", None)


class _LoraLayersFinder(importlib.abc.MetaPathFinder):
    """Meta-path finder that only ever answers for ``megatron.bridge.peft.lora_layers``."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != TARGET_MODULE:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
            return None
        loader = _PatchedSourceLoader(fullname, spec.origin)
        return importlib.util.spec_from_file_location(fullname, spec.origin, loader=loader)


def _transformer_engine_available() -> bool:
    if "transformer_engine" in sys.modules:
        return True
    try:
        return importlib.util.find_spec("transformer_engine") is not None
    except (ImportError, ValueError):
        return False


def ensure_megatron_bridge_importable() -> bool:
    """Make ``import megatron.bridge.training.config`` work without Transformer Engine.

    Idempotent. Returns True when the accommodation is (or already was) installed, False when it is not
    needed (Transformer Engine importable, or ``lora_layers`` already imported).
    """
    if any(isinstance(f, _LoraLayersFinder) for f in sys.meta_path):
        return True
    if TARGET_MODULE in sys.modules or _transformer_engine_available():
        return False
    sys.meta_path.insert(0, _LoraLayersFinder())
    return True
