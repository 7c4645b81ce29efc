"""The recipe page's catalog, written at build time from the recipe files (recipes/*.py, read through
``nemo_resiliency_plugins.recipes``): the page holds a marker, never a copy of what a recipe holds, so a recipe
added or changed is on the site at the next build. docs/conf.py connects :func:`fill_marker` to Sphinx's
``source-read`` event."""

from __future__ import annotations

MARKER = "<!-- recipe-catalog: written here at build time from recipes/*.py (docs/recipe_page.py) -->"


def _text(value: str) -> str:
    """Recipe prose as Markdown text: no character of it read as markup (tables, HTML, emphasis)."""
    for char, entity in (("&", "&amp;"), ("<", "&lt;"), (">", "&gt;"), ("|", "&#124;"), ("*", "&#42;")):
        value = value.replace(char, entity)
    return value


def _settings(settings: dict) -> str:
    if not settings:
        return "its defaults"
    return ", ".join(f"`{key}={value!r}`" for key, value in settings.items()).replace("|", "&#124;")


def catalog_markdown() -> str:
    """The table of every recipe, then one section per recipe: what it is for, its plugins and settings, the
    step and save times it is made for, its notes, and its experiment script."""
    from nemo_resiliency_plugins.recipes import list_recipes

    recipes = list_recipes()
    lines = ["| recipe | executors | plugins | what it is for |", "|---|---|---|---|"]
    for r in recipes:
        lines.append(f"| `{r.name}` | {', '.join(r.executors)} | {', '.join(r.plugins)} | {_text(r.summary)} |")
    for r in recipes:
        lines += ["", f"### `{r.name}`", "", _text(r.description), ""]
        lines.append(f"For: {', '.join(r.executors)}. From `recipes/{r.name.replace('-', '_')}.py`.")
        lines += ["", "| plugin | settings (the rest: the plugin's defaults) |", "|---|---|"]
        lines += [f"| {name} | {_settings(dict(settings))} |" for name, settings in r.plugins.items()]
        lines += [
            "",
            f"Its timeouts are made for steps of about {r.step_time_s:g} s and checkpoint saves of about "
            f"{r.save_time_s:g} s: `nemo-resiliency doctor {r.name} --step-time {r.step_time_s:g} "
            f"--save-time {r.save_time_s:g}` passes. A slower job needs its own timeouts.",
        ]
        if r.notes:
            lines += ["", *[f"- {_text(note)}" for note in r.notes]]
        if r.example:
            lines += ["", f"A longer example job beside it: `recipes/{r.example}`."]
        lines += ["", "```python", r.script.rstrip("\n"), "```"]
    return "\n".join(lines) + "\n"


def fill_marker(app, docname: str, source: list[str]) -> None:
    """Sphinx ``source-read``: the marker line of a page becomes the catalog."""
    if MARKER in source[0]:
        source[0] = source[0].replace(MARKER, catalog_markdown())
