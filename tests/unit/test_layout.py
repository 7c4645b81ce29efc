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


def _every_import(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """Every module of the package that ``name`` imports anywhere: top level, in a function, under
    ``if TYPE_CHECKING:`` (a type-only circle is still two modules that each need the other), relative imports
    resolved; ``from a import b`` is module ``a.b`` where that is a module, else ``a``."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            for alias in node.names:
                full = f"{base}.{alias.name}"
                found.add(full if full in modules else base)
    return {m for m in found if m in modules and m != name}


def module_graph() -> dict[str, set[str]]:
    """The package's import graph: module -> the package modules it imports (every import, see _every_import)."""
    modules = _modules()
    return {name: _every_import(name, path, modules) for name, path in modules.items()}


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The graph's strongly connected groups of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    circles.append(sorted(group))
    return circles


def test_the_graph_reader_sees_function_level_and_type_only_imports(tmp_path):
    a, b, c = tmp_path / "a.py", tmp_path / "b.py", tmp_path / "c.py"
    a.write_text("def f():\n    from pkg import b\n")
    b.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.c import X\n")
    c.write_text("from . import a\n")
    modules = {"pkg.a": a, "pkg.b": b, "pkg.c": c}
    graph = {name: _every_import(name, path, modules) for name, path in modules.items()}
    assert graph == {"pkg.a": {"pkg.b"}, "pkg.b": {"pkg.c"}, "pkg.c": {"pkg.a"}}
    assert import_circles(graph) == [["pkg.a", "pkg.b", "pkg.c"]]
    assert import_circles({"x": {"y"}, "y": set()}) == []


def test_no_import_circle_between_modules():
    graph = module_graph()
    assert len(graph) > 50 and sum(map(len, graph.values())) > 100  # the reader found the package
    circles = import_circles(graph)
    assert not circles, "import circles: " + "; ".join(" <-> ".join(group) for group in circles)
