"""The notebook views, drawn by the pages' own modules: the exported page opens offline in
Chromium and shows the heatmap, head grid and beam tree with the answer's shapes; the widget
carries the shipped static/js files unchanged."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from attnscope.api.local import LocalModel
from attnscope.api.results import Result
from attnscope.config import shipped
from attnscope.widget import modules, view_widget
from tests.browser.conftest import chromium_path

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def result(local_models: dict[str, LocalModel]) -> Result:
    return local_models["en-de-transformer"].translate("A man is riding a bicycle.", beam_size=3, max_length=7, return_beam=True)


@pytest.fixture(scope="module")
def page() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium_path(), args=["--no-sandbox", "--disable-gpu"])
        context = browser.new_context()
        # offline: the page must need nothing from anywhere
        context.route(re.compile(r"^https?://"), lambda route: route.abort())
        tab = context.new_page()
        errors: list[str] = []
        tab.on("pageerror", lambda err: errors.append(str(err)))
        yield tab
        browser.close()
        assert not errors


def open_view(page: Any, result: Result, view: str, tmp_path: Path) -> None:
    path = tmp_path / f"{view}.html"
    result.to_html(path, view=view)
    page.goto(path.as_uri())
    page.wait_for_selector("#attnscope-view[data-ready=true], #attnscope-view[data-error]", timeout=30_000)
    assert page.get_attribute("#attnscope-view", "data-error") is None


def choose(page: Any, role: str, value: str) -> None:
    """Pick ``value`` in the view's ``role`` select as a user does (the change event)."""
    page.evaluate(
        "([role, value]) => { const box = document.querySelector(`select[data-role=${role}]`);"
        " box.value = value; box.dispatchEvent(new Event('change')); }",
        [role, value],
    )


def shown(page: Any) -> list[int]:
    """The drawn heatmap's rows and columns, from Plotly's own trace."""
    return page.evaluate("() => { const z = document.querySelector('[data-role=heatmap]').data[0].z; return [z.length, z[0].length]; }")


def test_exported_heatmap_has_the_answer_shape(page: Any, result: Result, tmp_path: Path) -> None:
    open_view(page, result, "heatmap", tmp_path)
    layers, heads, queries, keys = result.attention["cross"].shape
    assert shown(page) == [queries, keys]
    top_left = page.evaluate("() => document.querySelector('[data-role=heatmap]').data[0].z[0][0]")
    assert top_left == pytest.approx(result.attention["cross"][0, 0, 0, 0])
    # the controls switch kind, layer and head
    for role, value, drawn in (
        ("kind", "encoder_self", "encoder_self/0/0"),
        ("layer", str(layers - 1), f"encoder_self/{layers - 1}/0"),
        ("head", str(heads - 1), f"encoder_self/{layers - 1}/{heads - 1}"),
    ):
        choose(page, role, value)
        page.wait_for_selector(f"[data-role=heatmap][data-drawn='{drawn}']")
    shape = result.attention["encoder_self"].shape
    assert shown(page) == [shape[2], shape[3]]
    last = page.evaluate("() => document.querySelector('[data-role=heatmap]').data[0].z[0][0]")
    assert last == pytest.approx(result.attention["encoder_self"][layers - 1, heads - 1, 0, 0])


def test_exported_head_grid_and_beam_tree(page: Any, result: Result, tmp_path: Path) -> None:
    open_view(page, result, "heads", tmp_path)
    layers, heads, queries, keys = result.attention["cross"].shape
    sizes = page.evaluate("() => [...document.querySelectorAll('[data-role=head-grid] canvas')].map((c) => [c.height, c.width])")
    assert sizes == [[queries, keys]] * (layers * heads)
    open_view(page, result, "beam", tmp_path)
    assert result.beam is not None
    nodes = page.evaluate("() => document.querySelectorAll('[data-role=beam-tree] svg .node').length")
    assert nodes == len(result.beam["nodes"])


def test_widget_sends_the_pages_modules(result: Result) -> None:
    widget = view_widget(result, "heads", kind="decoder_self")
    folder = shipped("static") / "js"
    assert {"matrix.js", "heatmap.js", "beamtree.js", "dom.js", "pieces.js"} <= set(widget.modules)
    for name, source in widget.modules.items():
        assert source == (folder / name).read_text(encoding="utf-8")
    assert widget.answer == result.to_dict() and widget.options == {"kind": "decoder_self"}
    assert "Plotly" in widget.plotly[:5000] or len(widget.plotly) > 1_000_000
    assert modules() == widget.modules
    with pytest.raises(ValueError, match="view must be one of"):
        result.show("sideways")
