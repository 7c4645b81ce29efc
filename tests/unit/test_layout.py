"""The package's layout is its architecture: these tests keep each role folder to its promise.

* ``job/``: programs that run inside a training rank, standard library only (a plugin may ship the file alone);
* ``core/``: the only code that edits a task or an executor, and it imports no plugin;
* no import cycle between the package's modules.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import nemo_resiliency_plugins
import nemo_resiliency_plugins.recipes

PKG = Path(nemo_resiliency_plugins.__file__).parent
RECIPES_DIR = Path(nemo_resiliency_plugins.recipes.__file__).parent
PLUGIN_MODULES = (
    "fault_tolerance",
    "straggler",
    "preemption",
    "rerun",
    "inprocess_restart",
    "async_checkpoint",
    "local_checkpoint",
)


def _modules() -> dict[str, Path]:
    found = {}
    for path in PKG.rglob("*.py"):
        rel = path.relative_to(PKG.parent).with_suffix("")
        parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
        found[".".join(parts)] = path
    # The recipe catalog is the top-level recipes/, installed as nemo_resiliency_plugins.recipes (issue 53): in an
    # editable install it is not under PKG, and its rules are the package's all the same.
    for path in RECIPES_DIR.glob("*.py"):
        found["nemo_resiliency_plugins.recipes" + ("" if path.stem == "__init__" else f".{path.stem}")] = path
    return found


def _imports(path: Path, *, top_level_only: bool) -> set[str]:
    tree = ast.parse(path.read_text())
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    names: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.If):  # `if TYPE_CHECKING:` imports do not run
            continue
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def test_job_programs_run_with_the_standard_library_alone():
    blocker = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        top = name.partition('.')[0]\n"
        "        if top not in sys.stdlib_module_names and top != 'nemo_resiliency_plugins':\n"
        "            raise ImportError('not standard library: ' + name)\n"
        "sys.meta_path.insert(0, Block())\n"
    )
    jobs = sorted(name for name in _modules() if name.startswith("nemo_resiliency_plugins.job."))
    assert jobs, "no program found in job/"
    code = blocker + "".join(f"import {name}\n" for name in jobs) + "print('ok')\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_core_imports_no_plugin_and_no_tool():
    for name, path in _modules().items():
        if not name.startswith("nemo_resiliency_plugins.core"):
            continue
        bad = {
            imported
            for imported in _imports(path, top_level_only=False)
            if imported.startswith("nemo_resiliency_plugins.tools")
            or any(imported == f"nemo_resiliency_plugins.{plugin}" for plugin in PLUGIN_MODULES)
        }
        assert not bad, f"{name} imports {sorted(bad)}"


_EDITED = ("task", "executor")


def _edits_task_or_executor(path: Path) -> list[str]:
    """Assignments to ``task.<x>`` / ``executor.<x>`` (or their items) in one module."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        targets = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        flat = []
        for target in targets:
            flat += target.elts if isinstance(target, ast.Tuple | ast.List) else [target]
        for target in flat:
            base = target
            while isinstance(base, ast.Attribute | ast.Subscript):
                base = base.value
            if target is not base and isinstance(base, ast.Name) and base.id in _EDITED:
                found.append(f"{path.name}:{node.lineno}")
    return found


def test_only_core_edits_a_task_or_an_executor():
    edits = []
    for name, path in _modules().items():
        if name.startswith(("nemo_resiliency_plugins.core", "nemo_resiliency_plugins.testing")):
            continue  # testing/ builds its own reference tasks
        edits += _edits_task_or_executor(path)
    assert not edits, f"outside core/: {edits}"


def test_no_import_cycle_between_modules():
    modules = _modules()
    graph = {
        name: {m for m in _imports(path, top_level_only=True) if m in modules and m != name}
        for name, path in modules.items()
    }
    # A package's __init__ importing its own submodules (to re-export them) is not a cycle of two modules.
    for name in graph:
        graph[name] = {m for m in graph[name] if not m.startswith(name + ".")}
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        path.append(node)
        for nxt in graph[node]:
            if state.get(nxt) == 1:
                raise AssertionError("import cycle: " + " -> ".join(path[path.index(nxt) :] + [nxt]))
            if nxt not in state:
                visit(nxt)
        path.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
