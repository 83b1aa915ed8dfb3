"""A result's views as plotly figures in Python, for static export (``result.save("x.svg")``):
the explorer's image export (``exportImage`` in ``static/js/heatmap.js``) built with
``plotly.graph_objects`` and written by plotly itself (PNG, SVG, PDF through kaleido; HTML
offline, with Plotly.js inlined).

The colours are read from the pages' modules (``COLORSCALE`` in heatmap.js, ``DIVERGING`` in
difference.js, ``KIND_LABELS`` in matrix.js), so the image and the page cannot drift apart; the
layout follows ``exportImage``: title, model and sentence in a subtitle, token labels on both axes,
the key axis on top, one cell per token pair."""

from __future__ import annotations

import json
import re
from functools import lru_cache
from typing import Any

import numpy as np

__all__ = ["FIGURE_VIEWS", "IMAGE_FORMATS", "figure", "scale", "write_figure"]

IMAGE_FORMATS = (".png", ".svg", ".pdf", ".jpg", ".jpeg", ".webp")

FIGURE_VIEWS = ("heatmap", "heads", "compare")
AXIS_NAMES = {"cross": ("target", "source"), "encoder_self": ("source", "source key"), "decoder_self": ("target", "decoder input")}
_SCALE = re.compile(r"export const (\w+) = (\[[^;]*?\]);", re.S)


@lru_cache(maxsize=4)
def scale(name: str) -> list[list[Any]]:
    """A colour scale of the pages' modules: ``COLORSCALE`` (heatmap.js) or ``DIVERGING``
    (difference.js), as ``[[stop, "#rrggbb"], ...]``."""
    from attnscope.config import shipped

    source = (shipped("static") / "js" / ("difference.js" if name == "DIVERGING" else "heatmap.js")).read_text(encoding="utf-8")
    for found, body in _SCALE.findall(source):
        if found == name:
            return list(json.loads(re.sub(r",\s*\]", "]", body)))  # a JS array: no trailing commas in JSON
    raise LookupError(f"no colour scale {name} in the pages' modules")


@lru_cache(maxsize=1)
def kind_labels() -> dict[str, str]:
    """matrix.js's ``KIND_LABELS`` (``cross`` -> ``Cross``)."""
    from attnscope.config import shipped

    source = (shipped("static") / "js" / "matrix.js").read_text(encoding="utf-8")
    found = re.search(r"export const KIND_LABELS = (\{[^}]*\});", source)
    if found is None:
        raise LookupError("no KIND_LABELS in matrix.js")
    return dict(re.findall(r'(\w+): "([^"]*)"', found.group(1)))


def _matrix(result: Any, kind: str, layer: int, head: int | str) -> np.ndarray:
    """``[query, key]`` one head (or ``"avg"``: their mean) of ``kind`` at ``layer``."""
    if kind not in result.attention:
        raise ValueError(f"no {kind!r} attention in this result; it has {', '.join(result.kinds) or 'none'}")
    weights = result.attention[kind]  # [layers, heads, query, key]
    layers, heads = weights.shape[:2]
    if not 0 <= layer < layers:
        raise ValueError(f"layer must be 0..{layers - 1}, not {layer}")
    if head == "avg":
        return np.asarray(weights[layer].mean(axis=0))
    if not isinstance(head, int) or not 0 <= head < heads:
        raise ValueError(f"head must be 0..{heads - 1} or 'avg', not {head!r}")
    return np.asarray(weights[layer, head])


def _label_width(labels: list[str], px: float) -> float:
    longest = max((len(str(label)) for label in labels), default=0)
    return min(260, max(36, 10 + longest * px))


def _heatmap(z: np.ndarray, rows: list[str], cols: list[str], *, colorscale: Any, zmin: float = 0.0) -> Any:
    import plotly.graph_objects as go

    return go.Heatmap(
        z=z, x=list(range(len(cols))), y=list(range(len(rows))), zmin=zmin, zmax=1.0, colorscale=colorscale,
        xgap=1 if len(cols) <= 60 else 0, ygap=1 if len(rows) <= 60 else 0,
        colorbar={"thickness": 12, "outlinewidth": 0, "tickfont": {"size": 10}},
        customdata=[[[_escape(r), _escape(c)] for c in cols] for r in rows],
        hovertemplate="<b>%{z:.4f}</b><br>%{customdata[0]} → %{customdata[1]}<extra></extra>",
    )  # fmt: skip


def _axes(rows: list[str], cols: list[str], names: tuple[str, str], font: int) -> dict[str, Any]:
    axis = {"tickfont": {"size": font}, "ticks": "", "showgrid": False, "zeroline": False}
    title = {"font": {"size": 12, "color": "#475569"}, "standoff": 4}
    return {
        "xaxis": {**axis, "side": "top", "title": {**title, "text": names[1]}, "tickangle": -55 if len(cols) > 3 else 0,
                  "tickvals": list(range(len(cols))), "ticktext": [_escape(c) for c in cols], "range": [-0.5, len(cols) - 0.5]},
        "yaxis": {**axis, "title": {**title, "text": names[0]}, "tickvals": list(range(len(rows))), "ticktext": [_escape(r) for r in rows],
                  "range": [len(rows) - 0.5, -0.5]},
    }  # fmt: skip


def _layout(title: str, subtitle: list[str], rows: list[str], cols: list[str], names: tuple[str, str]) -> dict[str, Any]:
    """exportImage's layout: cells of 16 to 36 px, room for the labels, title and subtitle."""
    cell = max(16, min(36, 900 // max(len(cols), len(rows), 1)))
    font = 12 if cell >= 22 else 11
    left = _label_width(rows, font * 0.62) + 34
    width = max(640, int(left + len(cols) * cell + 90))
    head = 40 + 17 * len(subtitle)
    top = _label_width(cols, font * 0.62 * 0.85) + 36 + head
    bottom = max(20, 110 - len(rows) * cell)
    height = int(top + len(rows) * cell + bottom)
    lines = "<br>".join(_escape(line) for line in subtitle)
    return {
        "width": width, "height": height, "margin": {"l": left, "t": top, "r": 80, "b": bottom},
        "paper_bgcolor": "#ffffff", "plot_bgcolor": "#ffffff",
        "font": {"family": "system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif", "color": "#1e293b"},
        "title": {"text": f"<b>{_escape(title)}</b><br><span style='font-size:12px;color:#475569'>{lines}</span>",
                  "x": 0.01, "xanchor": "left", "yref": "container", "y": 1 - 24 / height, "yanchor": "top",
                  "font": {"size": 16}},
        **_axes(rows, cols, names, font),
    }  # fmt: skip


def _escape(text: str) -> str:
    """Text as plotly shows it literally (it reads ``<b>``, ``</s>``... as markup; plotlyText on the pages)."""
    return str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _where(head: int | str) -> str:
    return "head average" if head == "avg" else f"head {int(head) + 1}"


def _subtitle(result: Any) -> list[str]:
    source = result.source_text or " ".join(result.source_tokens)
    return [f"model {result.model}", f"source: {source}", f"translation: {result.text}"]


def figure(result: Any, view: str = "heatmap", other: Any = None, **options: Any) -> Any:
    """``view`` of ``result`` as a ``plotly.graph_objects.Figure``: ``heatmap`` (options ``kind``,
    ``layer``, ``head`` or ``"avg"``), ``heads`` (every head of a ``kind``, one small map each)
    or ``compare`` (``result`` minus ``other`` on one head, on the pages' diverging scale)."""
    import plotly.graph_objects as go

    kinds = result.kinds
    if not kinds:
        raise ValueError("this result has no attention (score: none): nothing to draw")
    kind = options.get("kind", kinds[0])
    layer, head = int(options.get("layer", 0)), options.get("head", 0)
    query_list, key_list = result.axes(kind) if kind in result.attention else ([], [])
    names = AXIS_NAMES.get(kind, ("query", "key"))
    label = kind_labels().get(kind, kind)
    if view == "heatmap":
        z = _matrix(result, kind, layer, head)
        title = f"{label} attention — layer {layer + 1} — {_where(head)}"
        return go.Figure(_heatmap(z, query_list, key_list, colorscale=scale("COLORSCALE")),
                         _layout(title, _subtitle(result), query_list, key_list, names))
    if view == "compare":
        if other is None:
            raise ValueError('figure("compare", other): give the result to compare with')
        theirs = other.axes(kind) if kind in other.attention else ([], [])
        if (query_list, key_list) != theirs:
            raise ValueError("the two results' tokens differ, so their matrices cannot be subtracted: align both on the same target")
        z = _matrix(result, kind, layer, head) - _matrix(other, kind, layer, head)
        title = f"{label} attention, A − B — layer {layer + 1} — {_where(head)}"
        subtitle = [f"A: {result.model}", f"B: {other.model}", "red: A attends more, blue: B does", f"translation: {result.text}"]
        return go.Figure(_heatmap(z, query_list, key_list, colorscale=scale("DIVERGING"), zmin=-1.0),
                         _layout(title, subtitle, query_list, key_list, names))
    if view == "heads":
        return _heads(result, kind, label)
    raise ValueError(f"a figure is one of {', '.join(FIGURE_VIEWS)}, not {view!r} (to_html draws every view)")


def _heads(result: Any, kind: str, label: str) -> Any:
    """Every head of ``kind``: a grid of layers × heads small heatmaps on one colour scale."""
    from plotly.subplots import make_subplots

    if kind not in result.attention:
        raise ValueError(f"no {kind!r} attention in this result; it has {', '.join(result.kinds)}")
    weights = result.attention[kind]
    layers, heads = weights.shape[:2]
    fig = make_subplots(rows=layers, cols=heads, horizontal_spacing=0.02, vertical_spacing=0.04,
                        row_titles=[f"layer {i + 1}" for i in range(layers)],
                        column_titles=[f"head {j + 1}" for j in range(heads)])  # fmt: skip
    for i in range(layers):
        for j in range(heads):
            trace = _heatmap(weights[i, j], *result.axes(kind), colorscale=scale("COLORSCALE"))
            trace.update(showscale=i == 0 and j == 0, hovertemplate=f"layer {i + 1} · head {j + 1}: %{{z:.4f}}<extra></extra>")
            fig.add_trace(trace, row=i + 1, col=j + 1)
    fig.update_xaxes(showticklabels=False, ticks="")
    fig.update_yaxes(showticklabels=False, ticks="", autorange="reversed")
    fig.update_layout(width=max(480, 120 * heads + 120), height=max(360, 120 * layers + 120), plot_bgcolor="#ffffff",
                      paper_bgcolor="#ffffff", title={"text": f"<b>{label} attention, every layer × head</b>", "x": 0.01})  # fmt: skip
    return fig


def write_figure(fig: Any, path: Any) -> None:
    """``fig`` as an image at ``path`` (its suffix picks the format), through kaleido; a clear
    error when kaleido (or the browser it drives) is missing, naming the HTML export instead."""
    suffix = path.suffix.lower()
    if suffix not in IMAGE_FORMATS:
        raise ValueError(f"save() writes {', '.join(IMAGE_FORMATS)} or .html, not {suffix or 'a file without a suffix'!r}")
    try:
        import kaleido  # noqa: F401 - plotly's image writer
    except ImportError:
        raise ImportError(
            "PNG/SVG/PDF export needs kaleido: pip install 'attnscope[notebook]' (or save to .html, which needs nothing)"
        ) from None
    try:
        fig.write_image(str(path), scale=2 if suffix == ".png" else 1)
    except (RuntimeError, OSError) as err:
        raise RuntimeError(f"kaleido could not render the image ({err}); it needs Chrome or Chromium. Save to .html instead.") from err
