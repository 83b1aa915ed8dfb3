"""Jupyter views of a result, drawn by the explorer's own JavaScript (``static/js``).

``result.show()`` is an anywidget (JupyterLab, Notebook 7, VS Code; ``pip install
attnscope[notebook]``); ``result.to_html()`` the same view as a page that holds everything it
needs (modules, data and Plotly.js inlined), for a file, an e-mail or a notebook's saved output.

The modules are read from the shipped ``static/js`` each time (the files the pages load), never
copied: ``view.js`` here is only the glue that imports them and lays out the controls."""

from __future__ import annotations

import hashlib
import json
import re
from functools import lru_cache
from pathlib import Path
from typing import Any, Protocol

from attnscope.extras import require


class Result(Protocol):
    """What a view draws: a result of the Python API (``attnscope.api.results.Result``)."""

    @property
    def model(self) -> str: ...

    def to_dict(self) -> dict[str, Any]: ...

__all__ = ["VIEWS", "modules", "standalone_html", "view_widget"]

VIEWS = ("heatmap", "heads", "beam", "anatomy", "compare")
ENTRIES = ("matrix.js", "heatmap.js", "beamtree.js", "step-anatomy.js", "difference.js", "models-api.js")
# app.css rules the views use, kept (scoped to the view) by the start of their selectors
KEPT_RULES = (".beam-", ".anatomy", ".bar", ".context-bars", ".ccol", ".cbar", ".hint", ".empty", ".table-scroll")
GLUE = Path(__file__).with_name("view.js")
_IMPORT = re.compile(r"""(?:from|import)\s*\(?\s*["']\./([\w.-]+\.js)["']""")


def modules() -> dict[str, str]:
    """The sources of :data:`ENTRIES` and every module they import, by file name."""
    from attnscope.config import shipped

    folder = shipped("static") / "js"
    found: dict[str, str] = {}
    todo = list(ENTRIES)
    while todo:
        name = todo.pop()
        if name in found:
            continue
        found[name] = (folder / name).read_text(encoding="utf-8")
        todo.extend(_IMPORT.findall(found[name]))
    return dict(sorted(found.items()))


@lru_cache(maxsize=1)
def css() -> str:
    """The pages' look for the views: ``app.css``'s colour variables and its rules for the beam
    tree and the step anatomy (:data:`KEPT_RULES`), all scoped to the view (never the
    notebook's own elements), read from the shipped stylesheet."""
    from attnscope.config import shipped

    text = (shipped("static") / "css" / "app.css").read_text(encoding="utf-8")
    kept = []
    for selector, body in _rules(re.sub(r"/\*.*?\*/", "", text, flags=re.S)):
        if selector == ":root":
            kept.append(f".attnscope-view {{{body}}}")
        elif all(part.strip().startswith(KEPT_RULES) for part in selector.split(",")):
            scoped = ", ".join(f".attnscope-view {part.strip()}" for part in selector.split(","))
            kept.append(f"{scoped} {{{body}}}")
    return "\n".join(kept)


def _rules(text: str) -> list[tuple[str, str]]:
    """The top-level ``selector { body }`` rules of ``text`` (at-rules' blocks skipped)."""
    rules, depth, start, open_at = [], 0, 0, 0
    for i, char in enumerate(text):
        if char == "{":
            if depth == 0:
                open_at = i
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                selector = text[start:open_at].strip()
                if not selector.startswith("@"):
                    rules.append((selector, text[open_at + 1 : i]))
                start = i + 1
    return rules


@lru_cache(maxsize=1)
def plotly_js() -> str:
    """Plotly.js from the installed ``plotly`` package (the file the server serves)."""
    import plotly

    return (Path(plotly.__file__).parent / "package_data" / "plotly.min.js").read_text(encoding="utf-8")


@lru_cache(maxsize=1)
def formulas() -> dict[str, str]:
    """Each score function's and family's formula, as ``GET /api/score-functions`` gives them
    and the pages' ``loadCatalog()`` files them (the step anatomy writes them out)."""
    from attnscope.nn.family import families
    from attnscope.nn.scores import SCORE_FUNCTIONS

    found = {tag: f.score_formula for tag, f in families().items() if f.score_formula}
    for name, f in SCORE_FUNCTIONS.items():
        info = f.to_dict()
        if info.get("module"):
            found[name] = f"score({info['arguments']}) = {info['formula']}"
    return found


def _state(result: Result, view: str, options: dict[str, Any], other: Result | None = None) -> dict[str, Any]:
    if view not in VIEWS:
        raise ValueError(f"view must be one of {', '.join(VIEWS)}, not {view!r}")
    answer = result.to_dict()
    if view == "compare" and other is None:
        raise ValueError('show("compare", other): give the result to compare with')
    if view == "anatomy" and answer.get("attention_scores") is None:
        raise ValueError('show("anatomy") needs the scores: translate (or align) with return_scores=True (and alternatives=5)')
    sources = modules()
    key = hashlib.sha256(json.dumps(sources, sort_keys=True).encode()).hexdigest()[:16]
    state = {
        "answer": answer, "view": view, "options": options,
        "modules": sources, "modules_key": key, "css": css(), "formulas": formulas() if view == "anatomy" else {},
        "other": {}, "labels": {},
    }  # fmt: skip
    if other is not None:
        state["other"] = other.to_dict()
        state["labels"] = {"a": _label(result), "b": _label(other)}
    return state


def _label(result: Result) -> str:
    """A result as a panel names it: its model and its translation."""
    text = str(result.to_dict().get("translation", ""))
    return f"{result.model}: {text[:60]}{'…' if len(text) > 60 else ''}"


def view_widget(result: Result, view: str = "heatmap", other: Result | None = None, **options: Any) -> Any:
    """An anywidget drawing ``view`` of ``result`` (options: ``kind``, ``layer``, ``head``,
    ``width``, ``height``; ``step`` for the anatomy; ``other`` the result to compare with)."""
    require("anywidget", "notebook", purpose="result.show()")  # MissingExtra naming the extra
    import anywidget
    import traitlets  # anywidget's own dependency

    class AttentionView(anywidget.AnyWidget):
        _esm = GLUE.read_text(encoding="utf-8")
        answer = traitlets.Dict().tag(sync=True)
        view = traitlets.Unicode("heatmap").tag(sync=True)
        options = traitlets.Dict().tag(sync=True)
        modules = traitlets.Dict().tag(sync=True)
        modules_key = traitlets.Unicode().tag(sync=True)
        css = traitlets.Unicode().tag(sync=True)
        plotly = traitlets.Unicode().tag(sync=True)
        formulas = traitlets.Dict().tag(sync=True)
        other = traitlets.Dict().tag(sync=True)
        labels = traitlets.Dict().tag(sync=True)

    return AttentionView(**_state(result, view, options, other), plotly=plotly_js())


def standalone_html(result: Result, view: str = "heatmap", other: Result | None = None, **options: Any) -> str:
    """One HTML page drawing ``view`` of ``result`` offline: Plotly.js, the modules, the glue
    and the answer inlined (the data as JSON in a ``<script type="application/json">``)."""
    state = _state(result, view, options, other)
    state["plotly"] = ""  # loaded by its own <script> below
    state["glue"] = GLUE.read_text(encoding="utf-8")
    title = f"attnscope: {result.model}"
    return _PAGE.format(
        title=_escape_text(title),
        plotly=plotly_js().replace("</script", "<\\/script"),
        state=_json_in_html(state),
        runner=_RUNNER,
    )


def _json_in_html(value: Any) -> str:
    """JSON safe inside a <script> element: no ``</``, no ``<!--``."""
    return json.dumps(value, ensure_ascii=False).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _escape_text(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


# The page runs the glue module as the widget would, with a model object over the inlined state.
_RUNNER = """
const state = JSON.parse(document.getElementById("attnscope-state").textContent);
const glue = URL.createObjectURL(new Blob([state.glue], { type: "text/javascript" }));
const { default: widget } = await import(glue);
await widget.render({ model: { get: (name) => state[name] }, el: document.getElementById("attnscope-view") });
"""

_PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{title}</title>
<script>{plotly}</script>
</head>
<body>
<div id="attnscope-view"></div>
<script type="application/json" id="attnscope-state">{state}</script>
<script type="module">{runner}</script>
</body>
</html>
"""
