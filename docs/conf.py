"""Sphinx configuration for the nemo-resiliency-plugins site (Sphinx + MyST, as NeMo-Run and Megatron Bridge build
theirs). CI builds it with warnings as errors (tests/unit/test_docs.py), so a broken cross-reference, a page
missing from the toctree or a docstring that does not parse fails the suite."""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The API reference imports the package; when it is not installed (a docs-only checkout), use the checkout.
try:
    import nemo_resiliency_plugins  # noqa: F401
except ImportError:
    sys.path.insert(0, str(ROOT))

project = "nemo-resiliency-plugins"
author = "nemo-resiliency-plugins contributors"
copyright = "2026, nemo-resiliency-plugins contributors"

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
]

source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build"]

# MyST: heading anchors so pages can link to a section (`[](executors.md#preemption-in-containers)`), and the
# extensions the pages use.
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence", "deflist"]

# autodoc: members in source order (fields first, as the dataclasses declare them), type hints in the signature.
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_default_options = {"members": True, "show-inheritance": False}

# Unresolved references are errors for our own pages and names; types from other projects (NeMo-Run, typing,
# fiddle, the standard library) have no inventory offline and are not checked.
nitpicky = True
nitpick_ignore_regex = [
    ("py:class", r"(?!nemo_resiliency_plugins\.).*"),
    ("py:obj", r"(?!nemo_resiliency_plugins\.).*"),
    ("py:data", r"(?!nemo_resiliency_plugins\.).*"),
    # Modules of the shared mechanism and the tools are not part of the public reference; a docstring that names
    # one (``:mod:`nemo_resiliency_plugins.core.autoresume```) points readers at the source, which is fine.
    ("py:mod", r"nemo_resiliency_plugins\.(core|job|tools|testing)(\..*)?"),
    ("py:(class|func|meth|obj)", r"nemo_resiliency_plugins\.(core|job|testing)\..*"),
]

html_theme = "nvidia_sphinx_theme"
html_title = "nemo-resiliency-plugins"
html_show_sourcelink = False
html_theme_options = {"navigation_depth": 3}


# ---------------------------------------------------------------------------------------------------- docstrings
# The docstrings are written for ``help()`` and the source: a heading line that ends in ":" followed by indented
# "field: what it does" lines, continued deeper. reST reads that as nested definition lists and block quotes and
# warns on every continuation. Rather than bend the docstrings to reST, the hook below turns such a block into a
# bullet list (one bullet per field, continuations joined), and an indented block with no field lines after a ":"
# heading (a code example) into a literal block. The docstrings themselves stay as they are.
_CODE = re.compile(r"(from |import |>>> |\$ |[\w.]+\(|[\w.]+ = |NRP_\w+=)")
_FIELD = re.compile(r"([A-Za-z_]\w*(?:\s*/\s*[A-Za-z_]\w*)*):\s+(\S.*)")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def fields_to_lists(lines: list[str]) -> list[str]:
    """Rewrite "heading:" + indented "field: text" blocks as bullet lists, and indented code as literal blocks
    (see above); returns the new lines."""
    out: list[str] = []
    i, n = 0, len(lines)
    while i < n:
        line = lines[i]
        if line.rstrip().endswith("::"):  # a literal block already: copy it unchanged
            out.append(line)
            base, i = _indent(line), i + 1
            while i < n and (not lines[i].strip() or _indent(lines[i]) > base):
                out.append(lines[i])
                i += 1
            continue
        j = i + 1
        while j < n and not lines[j].strip():
            j += 1
        base = _indent(line)
        is_bullet = line.lstrip().startswith(("* ", "- "))
        if line.strip() and not is_bullet and j < n and _indent(lines[j]) > base:
            inner = _indent(lines[j])
            k = j
            while k < n and (not lines[k].strip() or _indent(lines[k]) >= inner):
                k += 1
            block = lines[j:k]
            if line.rstrip().endswith(":") and any(
                _indent(b) == inner and _FIELD.fullmatch(b.strip()) for b in block if b.strip()
            ):
                out += [line, ""]
                for b in block:
                    if not b.strip():
                        continue
                    m = _FIELD.fullmatch(b.strip()) if _indent(b) == inner else None
                    if m:
                        out.append(" " * base + f"* ``{m[1]}``: {m[2]}")
                    else:
                        out.append(" " * (base + 2) + b.strip())
                out.append("")
                i = k
                continue
            if (j > i + 1 or line.rstrip().endswith(":")) and _CODE.match(lines[j].strip()):
                out += [line, "", " " * base + "::", ""] + block + [""]
                i = k
                continue
        out.append(line)
        i += 1
    return out


def _process_docstring(app, what, name, obj, options, lines: list[str]) -> None:
    lines[:] = fields_to_lists(lines)


def setup(app):
    app.connect("autodoc-process-docstring", _process_docstring)
    # The recipe page's catalog is written from the recipe files at build time (docs/recipe_page.py).
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from recipe_page import fill_marker

    app.connect("source-read", fill_marker)
