"""The documentation is tested like code (issue 30): the site builds with warnings as errors, every relative link
resolves, and every Python example on the pages runs.

Pages: README.md, CONTRIBUTING.md and every Markdown file under docs/. The examples of one page run in order in one
namespace (a later block may use what an earlier one built), in a temporary directory, with this session's
NEMORUN_HOME. Examples that would need a cluster are written as dry runs (a SlurmExecutor with a LocalTunnel,
``exp.dryrun()``), so they run here as they would on a user's launching host. A block that would launch real jobs
(minutes each) starts with ``# launches: ...`` naming the test that runs the same thing; it is compiled, its imports
run, and the named test file must exist.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"


def _pages() -> list[Path]:
    pages = [REPO / "README.md", REPO / "CONTRIBUTING.md"]
    pages += sorted(p for p in DOCS.rglob("*.md") if "_build" not in p.relative_to(DOCS).parts)
    return pages


_OPEN = re.compile(r"^(\s*)(`{3,}|~{3,})\s*(.*)$")


def code_blocks(text: str) -> list[tuple[int, str, str]]:
    """Every fenced block of ``text``: (line number of its first code line, info string, code)."""
    blocks, lines, i = [], text.split("\n"), 0
    while i < len(lines):
        m = _OPEN.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, info = len(m[1]), m[2], m[3].strip()
        start, i = i + 1, i + 1
        body: list[str] = []
        while i < len(lines):
            close = lines[i].strip()
            if close and set(close) == {fence[0]} and len(close) >= len(fence):
                break
            body.append(lines[i][indent:] if lines[i][:indent].strip() == "" else lines[i])
            i += 1
        blocks.append((start + 1, info, "\n".join(body)))
        i += 1
    return blocks


def _python_blocks(page: Path) -> list[tuple[int, str]]:
    return [(line, code) for line, info, code in code_blocks(page.read_text()) if info.split()[:1] == ["python"]]


EXAMPLE_PAGES = [p for p in _pages() if _python_blocks(p)]


def test_the_pages_have_examples_to_run():
    # The parametrized test below would pass vacuously if the block parser stopped finding blocks.
    names = {p.relative_to(REPO).as_posix() for p in EXAMPLE_PAGES}
    assert {"README.md", "docs/index.md", "docs/plugins/fault_tolerance.md", "docs/rehearse.md"} <= names
    assert sum(len(_python_blocks(p)) for p in EXAMPLE_PAGES) >= 12


@pytest.mark.parametrize("page", EXAMPLE_PAGES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_python_example_runs(page: Path, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    # NeMo-Run's Slurm packaging (a dry run too) runs shell commands through invoke, which forwards this process's
    # stdin to them; pytest's captured stdin refuses reads. The commands read nothing: give them an empty stdin.
    devnull = open(os.devnull)  # noqa: SIM115 - closed by the finalizer below
    monkeypatch.setattr(sys, "stdin", devnull)
    monkeypatch.setattr(sys, "__stdin__", devnull)
    namespace: dict = {"__name__": "__docs_example__"}
    for line, code in _python_blocks(page):
        where = f"{page.relative_to(REPO)}:{line}"
        tree = compile(code, where, "exec", ast.PyCF_ONLY_AST)  # a syntax error fails here, naming the line
        first = code.lstrip().split("\n", 1)[0]
        if first.startswith("# launches:"):
            named = re.findall(r"tests/\S+?\.py", first)
            assert named, f"{where}: a '# launches:' block must name the test that runs the same thing"
            for test_file in named:
                assert (REPO / test_file).is_file(), f"{where}: {test_file} does not exist"
            imports = ast.Module([n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))], [])
            exec(compile(imports, where, "exec"), namespace)
            continue
        try:
            exec(compile(tree, where, "exec"), namespace)
        except BaseException as err:
            out = capsys.readouterr()
            why = f"{type(err).__name__}: {err}\n{out.err[-2000:]}"
            raise AssertionError(f"the example at {where} failed: {why}") from err
    devnull.close()


# ----------------------------------------------------------------------------------------------- links
_LINK = re.compile(r"(?<!`)!?\[[^\]]*\]\(([^)\s]+)\)")


def _relative_links(page: Path) -> list[str]:
    text = page.read_text()
    for _, _, code in code_blocks(text):  # links inside code blocks are code, not links
        text = text.replace(code, "")
    text = re.sub(r"`[^`\n]*`", "", text)
    return [t for t in _LINK.findall(text) if not re.match(r"[a-z][a-z0-9+.-]*:", t) and not t.startswith("#")]


def test_every_relative_link_resolves():
    """Sphinx checks the links between pages of the site; this checks README.md and CONTRIBUTING.md (shown on
    GitHub and the package index, outside the site) and every page's links to files outside docs/."""
    broken = []
    for page in _pages():
        for target in _relative_links(page):
            path = target.split("#", 1)[0]
            if path and not (page.parent / path).exists():
                broken.append(f"{page.relative_to(REPO)}: {target}")
    assert not broken, "broken relative links:\n" + "\n".join(broken)


def test_the_readme_fits_one_screen_for_users():
    text = (REPO / "README.md").read_text()
    assert len(text.splitlines()) <= 150
    assert "pip install nemo-resiliency-plugins" in text
    # The two set-up commands are the contract (one runs the main job, one the whole suite).
    assert "bash .ci/demo" in text and "bash .ci/test" in text
    # The package index shows the README without the repository: no relative images.
    images = re.findall(r"!\[[^\]]*\]\(([^)]+)\)|<img[^>]+src=\"([^\"]+)\"", text)
    assert all(re.match(r"https?://", a or b) for a, b in images), images


# ----------------------------------------------------------------------------------------------- the site
def test_the_site_builds_with_warnings_as_errors(tmp_path):
    """-W: a warning fails the build (a broken cross-reference between pages, a page in no toctree, a docstring
    that does not parse, a missing image); nitpicky (docs/conf.py): a reference to one of our names that does not
    resolve; --keep-going: every warning is reported, not only the first."""
    out = tmp_path / "html"
    proc = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", "-d", str(tmp_path / "doctrees"),
         str(DOCS), str(out)],
        # Not from the checkout: `python -m` puts the working directory first, and the site documents the installed
        # package (the checkout's nemo_resiliency_plugins/ has no recipes/: the wheel maps the top-level one in).
        capture_output=True, text=True, cwd=tmp_path, env={**os.environ, "PYTHONWARNINGS": "ignore"}, timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    built = {p.relative_to(out).with_suffix("").as_posix() for p in out.rglob("*.html")}
    sources = {p.relative_to(DOCS).with_suffix("").as_posix() for p in DOCS.rglob("*.md") if "_build" not in p.parts}
    assert sources <= built, sources - built
    api = (out / "reference" / "api.html").read_text()
    for name in ("FaultTolerancePlugin", "PreemptionPlugin", "StragglerDetectionPlugin", "InProcessRestartPlugin",
                 "AsyncCheckpointPlugin", "LocalCheckpointPlugin", "RerunStateMachinePlugin", "ResiliencyConfigError"):
        assert f'id="nemo_resiliency_plugins.{name}"' in api, name
    # The recipe page's catalog is written from recipes/*.py at build time (docs/recipe_page.py): every recipe
    # file's recipe has its section, with its experiment script, on the built page.
    from nemo_resiliency_plugins.recipes import RECIPES

    page = (out / "recipes.html").read_text()
    assert "recipe-catalog" not in page, "the marker was left on the page"
    for name in RECIPES:
        assert f'id="{name}"' in page and f'<span class="s2">"{name}"</span>' in page, name  # heading, script
        assert f"recipes/{name.replace('-', '_')}.py" in page, name
