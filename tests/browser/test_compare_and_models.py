"""End-to-end (real Chromium, real server, tiny models): the Compare page with a shared target
and the Models page's plots, numbering and phone layout (issue 30, item 4)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
from playwright.sync_api import Page, Response, expect

from attnscope.testing import running_server

pytestmark = pytest.mark.browser

SENTENCE = "A man is riding a bicycle."
TARGET = "Ein Mann fährt Fahrrad."
MODELS = {"a": "en-de-rnn-additive", "b": "en-de-transformer"}


@pytest.fixture(scope="module")
def server_url(browser_models_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The browser suite's models plus a second en-de Transformer (as the shipped
    en-de-transformer-aligned is), so one pair has two models of one family."""
    root = tmp_path_factory.mktemp("two-transformers")
    models = root / "models"
    shutil.copytree(browser_models_dir, models)
    twin = models / "en-de-transformer-aligned"
    shutil.copytree(models / "en-de-transformer", twin)
    card = json.loads((twin / "card.json").read_text())
    card["id"] = twin.name
    (twin / "card.json").write_text(json.dumps(card))
    with running_server(models, root / "server.log") as url:
        yield url


def answers(page: Page) -> dict[tuple[str, str], dict[str, Any]]:
    """Every /api/translate and /api/align answer the page gets, by (route, model)."""
    seen: dict[tuple[str, str], dict[str, Any]] = {}

    def keep(response: Response) -> None:
        route = response.url.rsplit("/", 1)[-1]
        if route in ("translate", "align") and response.request.method == "POST" and response.ok:
            seen[(route, response.request.post_data_json["model"])] = response.json()

    page.on("response", keep)
    return seen


def open_compare(page: Page, server_url: str, **params: str) -> None:
    page.goto(f"{server_url}/compare?{urlencode({**MODELS, 'text': SENTENCE, 'beam': '2', **params})}")
    page.wait_for_selector("body[data-ready=true]")
    for side in "ab":
        page.wait_for_function(
            "s => document.querySelector(s)?.data?.length > 0", arg=f"#explorer-{side} [data-role=plot-main]"
        )


def test_same_target_keeps_each_models_own_translation(page: Page, server_url: str, shoot) -> None:  # type: ignore[no-untyped-def]
    seen = answers(page)
    open_compare(page, server_url, target=TARGET)
    for side, model in MODELS.items():
        panel = page.locator(f"#panel-{side}")
        own = seen[("translate", model)]["translation"]
        forced = seen[("align", model)]
        expect(panel.locator("[data-role=translation-label]")).to_contain_text("own translation")
        expect(panel.locator("[data-role=translation]")).to_have_text(own or "(empty translation)")
        expect(panel.locator("[data-role=forced-box]")).to_be_visible()
        expect(panel.locator("[data-role=forced]")).to_have_text(TARGET)
        expect(panel.locator("[data-role=forced-meta]")).to_contain_text(f"{len(forced['target_tokens'])} target tokens")
        # the heatmap is the forced target's, and its caption says so
        expect(panel.locator("[data-role=caption-main]")).to_contain_text("Your target (teacher-forced)")
        rows = page.eval_on_selector(f"#explorer-{side} [data-role=plot-main]", "gd => gd.data[0].z.length")
        assert rows == len(forced["target_tokens"])
    shoot(page, "compare-same-target")

    page.fill("#compare-target", "")  # without a target: one translation, plainly labelled
    with page.expect_response("**/api/translate"):
        page.click("#compare-btn")
    expect(page.locator("#compare-btn")).to_be_enabled()
    for side in "ab":
        panel = page.locator(f"#panel-{side}")
        expect(panel.locator("[data-role=translation-label]")).to_have_text("Translation")
        expect(panel.locator("[data-role=forced-box]")).to_be_hidden()
        expect(panel.locator("[data-role=caption-main]")).to_contain_text("Model translation")


def boxes(page: Page, chart: str, selector: str) -> list[dict[str, float]]:
    return page.eval_on_selector(
        f"[data-chart={chart}]",
        """(gd, sel) => [...gd.querySelectorAll(sel)].map(n => {
            const r = n.getBoundingClientRect(); return {x: r.x, y: r.y, w: r.width, h: r.height} })""",
        selector,
    )


def overlaps(a: dict[str, float], b: dict[str, float]) -> bool:
    return a["x"] < b["x"] + b["w"] and b["x"] < a["x"] + a["w"] and a["y"] < b["y"] + b["h"] and b["y"] < a["y"] + a["h"]


@pytest.mark.parametrize("width", [1400, 390])
def test_models_charts_keep_axis_titles_clear_and_tell_every_model_apart(page: Page, server_url: str, width: int, shoot) -> None:  # type: ignore[no-untyped-def]
    page.set_viewport_size({"width": width, "height": 900})
    page.goto(f"{server_url}/models")
    page.wait_for_selector("body[data-ready=true]")
    for chart in ("val-bleu", "bleu-by-length"):
        titles = boxes(page, chart, ".g-xtitle")
        entries = boxes(page, chart, ".legend .traces")
        assert titles and len(entries) == 4
        assert not any(overlaps(t, e) for t in titles for e in entries), f"{chart}: a legend entry under the x-axis title"
        assert page.eval_on_selector(f"[data-chart={chart}]", "gd => !gd.querySelector('.legend .scrollbar')?.getBoundingClientRect().height")
        styles = page.eval_on_selector(
            f"[data-chart={chart}]", "gd => Object.fromEntries(gd.data.map(t => [t.name, [t.line.color, t.line.dash, t.marker.symbol]]))"
        )
        one, two = styles["en-de-transformer"], styles["en-de-transformer-aligned"]
        assert all(a != b for a, b in zip(one, two, strict=True)), f"{chart}: the two Transformers look alike: {one} {two}"
        assert len({tuple(s) for s in styles.values()}) == len(styles)
    assert page.evaluate("document.documentElement.scrollWidth") <= width  # nothing sideways
    for card in page.locator(".model-card").all():  # every card whole on screen
        box = card.bounding_box()
        assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= width
    shoot(page, f"models-{width}")


def test_models_page_counts_heads_from_1_and_says_so(page: Page, server_url: str) -> None:
    page.goto(f"{server_url}/models")
    page.wait_for_selector("body[data-ready=true]")
    expect(page.locator("#conventions")).to_contain_text("counted from 1")
    expect(page.locator("#conventions")).to_contain_text("count from 0")
    grid = page.locator("#model-en-de-transformer [data-chart=alignment-f1]")
    ticks = grid.evaluate("gd => [gd.data[0].x, gd.data[0].y]")
    assert ticks == [["H1", "H2"], ["L1", "L2"]]  # the card's 2 × 2 grid
    # the card's 0-based best head {layer: 1, head: 1}
    expect(page.locator("#model-en-de-transformer [data-grid=alignment]")).to_contain_text("best head L2 · H2")


def test_the_picker_and_the_models_page_give_the_same_bleu(page: Page, server_url: str) -> None:
    """One BLEU (lowercased) in the Translate picker, the Compare panels and the Models page, and
    the card's chrF beside it in each."""
    page.goto(f"{server_url}/models")
    page.wait_for_selector("body[data-ready=true]")
    expect(page.locator("#conventions")).to_contain_text("lowercased")
    first_set = page.locator("#model-en-de-transformer .bleu-table tbody tr").first
    card_lower, card_chrf = first_set.locator("td").nth(2).inner_text(), first_set.locator("td").nth(3).inner_text()
    assert card_chrf != "–"  # the enriched cards have chrF
    rows = json.loads(page.locator("#score-rows-data").text_content() or "[]")
    additive = next(r for r in rows if r["model"] == "en-de-rnn-additive")
    page.goto(f"{server_url}/?text=")
    page.wait_for_selector("body[data-ready=true]")
    label = page.locator("#model option[value=en-de-transformer]").inner_text()
    assert f"lowercased BLEU {card_lower} · chrF {card_chrf}" in label
    additive_label = page.locator("#model option[value=en-de-rnn-additive]").inner_text()
    assert f"lowercased BLEU {additive['bleu']:.1f} · chrF {additive['chrf']:.1f}" in additive_label
    page.select_option("#model", "en-de-transformer")
    expect(page.locator("#model-info")).to_contain_text(f"BLEU {card_lower} on test2016 (sacreBLEU, lowercased) · chrF {card_chrf}")


def test_a_phone_reflows_the_score_table_so_bleu_is_on_screen(page: Page, server_url: str, shoot) -> None:  # type: ignore[no-untyped-def]
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(f"{server_url}/models")
    page.wait_for_selector("#score-functions[data-ready=true]")
    for label in ("BLEU", "chrF", "BLEU 21+"):
        cells = page.locator(f".score-table td[data-label='{label}']")
        assert cells.count() >= 2
        for cell in cells.all():
            box = cell.bounding_box()
            assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 390, f"{label} cell off screen: {box}"
            assert label in cell.evaluate("td => getComputedStyle(td, '::before').content")  # named beside its number
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    shoot(page, "models-score-table-390")
