"""The Models page draws each card's per-head grids: word-alignment F1 and BLEU with a head off."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

pytestmark = pytest.mark.browser


def test_models_page_shows_alignment_and_ablation_grids(page: Page, server_url: str, shoot) -> None:  # type: ignore[no-untyped-def]
    page.goto(f"{server_url}/models")
    expect(page.locator("body")).to_have_attribute("data-ready", "true", timeout=60_000)
    card = page.locator("#model-en-de-transformer")
    grid = card.locator("[data-grid=alignment]")
    expect(grid).to_contain_text("best head L2 · H2 0.88")  # the card's 0-based (1, 1), counted from 1
    expect(grid).to_contain_text("diagonal baseline 0.55")
    expect(grid.locator("svg").first).to_be_visible()
    assert "0.88" in grid.inner_text() or "0.88" in grid.locator("svg").first.inner_html()
    ablation = card.locator("[data-grid=ablation]")
    expect(ablation).to_contain_text("30.00 with every head on")
    assert "-5.0" in ablation.locator("svg").first.inner_html() or "−5.0" in ablation.locator("svg").first.inner_html()
    assert page.locator("#model-en-de-rnn-additive [data-grid=alignment]").count() == 0  # no alignment in its card
    shoot(page, "models-head-grids")
