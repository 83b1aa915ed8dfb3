"""The notebook views, drawn by the pages' own modules: the exported page opens offline in
Chromium and shows the heatmap, head grid, beam tree, step anatomy and comparison with the
answer's numbers; the widget carries the shipped static/js files unchanged; the static export
(plotly + kaleido) writes PNG and SVG of the same matrices."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
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


def open_view(page: Any, result: Result, view: str, tmp_path: Path, other: Result | None = None, **options: Any) -> None:
    path = tmp_path / f"{view}.html"
    result.to_html(path, view=view, other=other, **options)
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


@pytest.fixture(scope="module")
def scored(local_models: dict[str, LocalModel]) -> Result:
    return local_models["en-de-transformer"].translate("A man is riding a bicycle.", beam_size=1, max_length=7,
                                                        return_scores=True, alternatives=3)  # fmt: skip


def test_exported_step_anatomy(page: Any, scored: Result, tmp_path: Path) -> None:
    from attnscope.widget import formulas

    open_view(page, scored, "anatomy", tmp_path, step=2)
    page.wait_for_selector("[data-role=step-anatomy][data-drawn='2/cross/0/0']")
    weights = page.evaluate("() => [...document.querySelectorAll('.anatomy-table tbody tr')].map((r) => Number(r.dataset.weight))")
    np.testing.assert_allclose(weights, scored.attention["cross"][0, 0, 1])
    assert page.inner_text("[data-role=step-title]").startswith(f"Step 2 of {len(scored.target_tokens)}")
    assert formulas()["transformer"] in page.inner_text(".anatomy-steps")  # the catalog's formula, as on the page
    assert page.evaluate("() => document.querySelectorAll('[data-role=step-top] .top-row').length") == 3
    layers, heads = scored.attention["decoder_self"].shape[:2]
    choose(page, "kind", "decoder_self")
    choose(page, "head", str(heads - 1))
    choose(page, "step", "4")
    page.wait_for_selector(f"[data-role=step-anatomy][data-drawn='4/decoder_self/0/{heads - 1}']")
    weights = page.evaluate("() => [...document.querySelectorAll('.anatomy-table tbody tr')].map((r) => Number(r.dataset.weight))")
    np.testing.assert_allclose(weights, scored.attention["decoder_self"][0, heads - 1, 3])


def test_exported_comparison(page: Any, local_models: dict[str, LocalModel], tmp_path: Path) -> None:
    a = local_models["en-de-transformer"].align("A man is riding a bicycle.", "Ein Mann fährt Fahrrad.")
    b = local_models["en-de-rnn-additive"].align("A man is riding a bicycle.", "Ein Mann fährt Fahrrad.")
    open_view(page, a, "compare", tmp_path, other=b, layer=1, head=1)
    page.wait_for_selector("#attnscope-view[data-drawn='cross/1/1']")
    diff = page.evaluate("() => document.querySelector('[data-role=difference]').data[0].z")
    # the RNN has one layer and one head: B is drawn at its own (0, 0)
    np.testing.assert_allclose(diff, a.attention["cross"][1, 1] - b.attention["cross"][0, 0], atol=1e-12)
    other = local_models["en-de-rnn-additive"].translate("A dog runs.", beam_size=1, max_length=5)
    open_view(page, a, "compare", tmp_path, other=other)
    assert "cannot be subtracted" in page.inner_text("[data-role=difference-note]")


def test_static_export_png_svg_html(scored: Result, local_models: dict[str, LocalModel], tmp_path: Path) -> None:
    fig = scored.figure("heatmap", kind="cross", layer=1, head=1)
    np.testing.assert_array_equal(np.asarray(fig.data[0].z), scored.attention["cross"][1, 1])
    def shown(tokens: list[str]) -> list[str]:  # as plotly writes text literally (plotlyText on the pages)
        return [t.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;") for t in tokens]

    assert list(fig.layout.yaxis.ticktext) == shown(scored.target_tokens)
    assert list(fig.layout.xaxis.ticktext) == shown(scored.source_tokens)
    svg = scored.save(tmp_path / "cross.svg", kind="cross", layer=1, head=1).read_text(encoding="utf-8")
    assert svg.startswith("<svg") and "Cross attention — layer 2 — head 2" in svg
    texts = {html.unescape(t) for t in re.findall(r"<text[^>]*>([^<]*)</text>", svg)}
    assert set(scored.source_tokens + scored.target_tokens) <= texts  # every tick label, as the SVG's text
    png = scored.save(tmp_path / "heads.png", "heads", kind="encoder_self").read_bytes()
    width, height = int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
    heads_fig = scored.figure("heads", kind="encoder_self")
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and (width, height) == (2 * heads_fig.layout.width, 2 * heads_fig.layout.height)
    assert len(heads_fig.data) == np.prod(scored.attention["encoder_self"].shape[:2])
    b = local_models["en-de-transformer"].align("A man is riding a bicycle.", scored.text, disable_heads=[("cross", 0, 0)])
    a = local_models["en-de-transformer"].align("A man is riding a bicycle.", scored.text)
    diff = a.figure("compare", b, kind="cross", layer=0, head=1)
    np.testing.assert_array_equal(np.asarray(diff.data[0].z), a.attention["cross"][0, 1] - b.attention["cross"][0, 1])
    assert "anatomy" in scored.save(tmp_path / "anatomy.html", "anatomy", step=2).read_text(encoding="utf-8")
    with pytest.raises(ValueError, match="not '.txt'"):
        scored.save(tmp_path / "x.txt")
    with pytest.raises(ValueError, match="a figure is one of"):
        scored.figure("beam")


def test_views_say_what_they_need(result: Result) -> None:
    with pytest.raises(ValueError, match="return_scores=True"):
        result.show("anatomy")
    with pytest.raises(ValueError, match="give the result to compare with"):
        result.show("compare")
