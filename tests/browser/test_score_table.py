"""The Models page's "Score functions compared" section in Chromium: one row per score function
of the served RNN encoder-decoders, the no-attention floor last, numbers from the cards, card
text shown as text, and one BLEU-by-length plot line per model that has the numbers."""

from __future__ import annotations

import json
import urllib.request

from playwright.sync_api import Page, expect


def served_rnn_scores(server_url: str) -> list[str]:
    with urllib.request.urlopen(f"{server_url}/api/models") as response:
        models = json.load(response)["models"]
    return sorted(m["score"] for m in models if m["architecture"] == "rnn")


def test_one_row_per_served_score_function(page: Page, server_url: str, shoot, card_markup: str) -> None:
    scores = served_rnn_scores(server_url)
    assert scores == ["additive", "none"]  # the tiny models: the table must not invent rows
    page.goto(f"{server_url}/models")
    page.wait_for_selector("#score-functions[data-ready=true]")
    rows = page.locator("#score-functions tbody tr")
    assert sorted(rows.evaluate_all("rows => rows.map(r => r.dataset.score)")) == scores
    # The classic table's order with the floor last, styled apart.
    expect(rows.last).to_have_attribute("data-score", "none")
    expect(rows.last).to_have_class("floor")
    expect(rows.last.locator("th")).to_have_text("no attention")
    additive = page.locator("#score-functions tr[data-score=additive]")
    expect(additive.locator("td.formula")).to_have_text("vᵀ tanh(W_s s + W_h h_i)")
    expect(additive.locator("td").nth(2)).to_have_text("21.0")  # the card's test2016 lowercased BLEU
    expect(additive.locator("td").nth(3)).to_have_text("50.0")  # and its chrF beside it
    expect(additive.locator("td[data-label=chrF] small.delta")).to_have_count(0)  # the floor's card has none
    expect(additive.locator("td").nth(1)).to_have_text("544")  # 2h² + 2h score parameters at h = 16
    note = additive.locator("details.row-note")
    note.locator("summary").click()
    expect(note.locator("p")).to_have_text(f"trained by {card_markup}")  # card text stays text
    expect(additive.locator("a")).to_have_attribute("href", "#model-en-de-rnn-additive")
    # The partial card of the baseline: dashes, not "undefined" or NaN.
    assert "undefined" not in rows.last.inner_text() and "NaN" not in rows.last.inner_text()
    lines = page.eval_on_selector("[data-chart=score-bleu-by-length]", "gd => gd.data.map(t => t.name)")
    assert lines == ["additive"]  # the baseline's card has no BLEU by length
    assert page.locator("#score-functions img").count() == 0
    shoot(page, "score-table")


def test_score_table_scrolls_inside_itself_on_a_phone(page: Page, server_url: str, shoot) -> None:
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(f"{server_url}/models")
    page.wait_for_selector("#score-functions[data-ready=true]")
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 390, f"the page is {width} px wide on a 390 px screen"
    # The table reflows (one block per score function) rather than scrolling: scrolled, its BLEU
    # columns sat past the right edge, unseen (issue 30). No cell reaches past the screen.
    scroller = page.locator(".score-table-scroll").first
    assert scroller.evaluate("el => el.scrollWidth <= el.clientWidth")
    shoot(page, "score-table-phone")
