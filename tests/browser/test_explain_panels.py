"""Issue 32's panels in real Chromium: the anatomy panel's value norms ‖f(x_j)‖ (static/js/anatomy.js),
the ALTI+ source | prefix view (static/js/explain-view.js), the Models page's method × model table
(static/js/explain-table.js) and contrastive attribution from the Heads card's alternatives."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

pytestmark = pytest.mark.browser

TEXT = "A man is riding a bicycle."
@pytest.fixture(scope="module")
def server_url(explained_server_url: str) -> str:
    """The browser tests' models; two cards carry an `explanations` section (conftest.py)."""
    return explained_server_url


def translate(page: Page, server_url: str, model: str) -> None:
    page.goto(f"{server_url}/?text=")
    page.wait_for_selector("body[data-ready=true]")
    page.select_option("#model", model)
    page.fill("#beam", "1")
    page.fill("#text", TEXT)
    with page.expect_response("**/api/translate"):
        page.press("#text", "Enter")
    expect(page.locator("#explorer [data-role=caption-main]")).not_to_be_empty()


def click_row(page: Page, row: int) -> dict:
    """Click heatmap row ``row``; the answer the anatomy panel fetched."""
    gd = page.locator("#explorer [data-role=plot-main] .nsewdrag").first
    gd.scroll_into_view_if_needed()
    box = gd.bounding_box()
    rows = len(page.eval_on_selector("#explorer [data-role=plot-main]", "gd => gd.data[0].z"))
    with page.expect_response("**/api/translate") as answer:
        page.mouse.click(box["x"] + 5, box["y"] + box["height"] * (row + 0.5) / rows)
    body: dict = answer.value.json()
    return body


@pytest.mark.parametrize("model", ["en-de-transformer", "en-de-rnn-additive"])
def test_anatomy_shows_value_norms_and_what_each_key_moves(page: Page, server_url: str, model: str, shoot) -> None:  # type: ignore[no-untyped-def]
    translate(page, server_url, model)
    answer = click_row(page, 1)
    rows = page.locator("#anatomy-card .anatomy-table tbody tr")
    expect(rows).to_have_count(len(answer["source_tokens"]))
    layer, head = (0, 0)
    if model == "en-de-transformer":
        layer = int(page.locator("#explorer [data-role=layer]").input_value())
        head = int(page.locator("#explorer [data-role=head]").input_value())
    sizes = answer["explanations"]["norm_values"]["cross"][layer][head]
    query = int(page.locator("#anatomy-card").get_attribute("data-query") or "-1")
    norms = answer["explanations"]["norm"]["cross"][layer][head][query]
    shown = rows.locator("[data-size]").evaluate_all("cs => cs.map(c => Number(c.dataset.size))")
    moved = rows.locator("[data-moved]").evaluate_all("cs => cs.map(c => Number(c.dataset.moved))")
    assert shown == pytest.approx(sizes, abs=1e-6)
    assert moved == pytest.approx(norms, abs=1e-5)  # α‖f(x)‖ is the norm explanation's entry
    expect(page.locator("#anatomy-card thead")).to_contain_text("value norm ‖f(x)‖")
    expect(page.locator("#anatomy-card")).to_contain_text("A high weight on a short vector moves little")
    shoot(page, f"anatomy-norms-{model}")
    page.set_viewport_size({"width": 390, "height": 844})
    expect(page.locator("#anatomy-card [data-size]").first).to_be_visible()
    shoot(page, f"anatomy-norms-{model}-390")


def test_alti_shows_source_and_prefix_side_by_side(page: Page, server_url: str, shoot) -> None:  # type: ignore[no-untyped-def]
    translate(page, server_url, "en-de-transformer")
    page.select_option("#explorer [data-role=layer]", "0")
    with page.expect_response("**/api/translate") as answer:
        page.click("#explorer [data-role=explain-switch] [data-method=alti]")
    alti = answer.value.json()["explanations"]["alti"]
    plot = page.locator("#explorer [data-role=alti-split] [data-role=alti-plot]")
    expect(plot).to_have_attribute("data-layer", "0")
    z = plot.evaluate("gd => gd.data.map(t => t.z)")
    assert z == [alti["source"][0], alti["target"][0]]
    for src, tgt in zip(*z, strict=True):  # a row over source and prefix sums to 1
        assert sum(src) + sum(tgt) == pytest.approx(1, abs=1e-3)
    expect(page.locator("#explorer [data-role=source-share] [data-share]")).to_have_count(len(z[0]))  # the bar row stays
    page.select_option("#explorer [data-role=layer]", "1")
    expect(plot).to_have_attribute("data-layer", "1")
    assert plot.evaluate("gd => gd.data[0].z") == alti["source"][1]
    shoot(page, "alti-split")
    page.set_viewport_size({"width": 390, "height": 844})
    expect(plot).to_be_visible()
    box = page.locator("#explorer [data-role=alti-split]")
    expect(box).to_have_js_property("scrollWidth", box.evaluate("b => b.clientWidth"))  # fits, no sideways scroll
    assert box.evaluate("b => b.getBoundingClientRect().right") <= 390
    shoot(page, "alti-split-390")
    page.click("#explorer [data-role=explain-switch] [data-method=weights]")
    expect(page.locator("#explorer [data-role=alti-split]")).to_be_hidden()


def test_models_page_draws_the_method_by_model_table(page: Page, server_url: str, shoot) -> None:  # type: ignore[no-untyped-def]
    page.goto(f"{server_url}/models")
    page.wait_for_selector("body[data-ready=true]")
    table = page.locator("[data-role=explain-table]")
    expect(table).to_have_count(1)  # one language pair has cards with explanations
    expect(table.locator("thead th")).to_have_text(["method", "en-de-transformer", "en-de-rnn-additive"])  # the page's model order

    def cell(model: str, method: str) -> tuple[float, str]:
        td = table.locator(f"td[data-model='{model}'][data-method='{method}']")
        return float(td.get_attribute("data-f1") or "nan"), td.get_attribute("data-where") or ""

    # the cards' 0-based [layer][head] grids, shown counted from 1
    assert cell("en-de-transformer", "weights") == (0.3, "L2 H1")
    assert cell("en-de-transformer", "norm") == (0.35, "L1 H2")
    assert cell("en-de-transformer", "alti") == (0.75, "L2")
    assert cell("en-de-rnn-additive", "norm") == (0.5, "")
    expect(table.locator("td[data-model='en-de-rnn-additive'][data-method='alti']")).to_have_text("–")
    expect(table.locator("td[data-model='en-de-transformer'][data-method='alti'] strong")).to_have_text("F1 0.750 (L2)")
    expect(table.locator("td[data-model='en-de-transformer'][data-method='norm'] strong")).to_have_text("ρ 0.400 (L2 H1)")
    table.scroll_into_view_if_needed()
    shoot(page, "models-explain-table")
    page.set_viewport_size({"width": 390, "height": 844})
    assert table.evaluate("t => t.getBoundingClientRect().right") <= 390
    shoot(page, "models-explain-table-390")


def test_heads_card_explains_why_not_an_alternative(page: Page, server_url: str, shoot) -> None:  # type: ignore[no-untyped-def]
    translate(page, server_url, "en-de-transformer")
    with page.expect_response("**/api/translate") as details:
        page.locator("#insight [data-role=confidence] .prob").nth(1).click()  # what-if at token 2
    written = details.value.json()["target_tokens"][1]
    why = page.locator("#whatif button.why-not").first
    foil = why.get_attribute("data-foil")
    assert foil and foil != written
    with page.expect_response("**/api/attribution") as answer:
        why.click()
    asked = answer.value.request.post_data_json
    assert asked["contrast"] == {"position": 1, "token": foil}
    body = answer.value.json()
    c = body["contrastive"]
    assert (c["token"], c["foil"]) == (written, foil)
    out = page.locator("#heads-card [data-role=heads-out]")
    expect(out.locator("[data-role=contrast-title]")).to_have_text(f"Why «{written}» rather than «{foil}» (token 2)?")
    rows = out.locator("[data-role=contrast-bars] tbody tr")
    expect(rows).to_have_count(len(body["source_tokens"]))
    shares = rows.evaluate_all("rs => rs.map(r => Number(r.dataset.share))")
    assert shares == pytest.approx(c["integrated_gradients"], abs=1e-9)
    assert sum(shares) == pytest.approx(1, abs=1e-3)
    expect(out).to_contain_text("log p(")
    shoot(page, "contrast")
    page.set_viewport_size({"width": 390, "height": 844})
    assert out.evaluate("o => o.getBoundingClientRect().right") <= 390
    shoot(page, "contrast-390")
