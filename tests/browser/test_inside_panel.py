"""The "Inside the layers" panel (static/js/inside-panel.js) in real Chromium at 1400 and 390 px:
the lens table has one row per point and one column per target word, the attribution and
patching grids one cell per layer and head, the minimal pairs and "swap this word" fill the form,
a length mismatch shows the server's message, and nothing scrolls sideways on a phone."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from tests.browser.layout import page_width_settles

pytestmark = pytest.mark.browser


@pytest.mark.parametrize("width", [1400, 390])
def test_the_panel_end_to_end(page: Page, server_url: str, width: int, shoot) -> None:  # type: ignore[no-untyped-def]
    page.set_viewport_size({"width": width, "height": 900})
    page.goto(f"{server_url}/?text=")
    page.wait_for_selector("body[data-ready=true]")
    page.select_option("#model", "en-de-transformer")
    page.fill("#text", "a b c")
    card = page.locator("#inside-card")
    with page.expect_response("**/api/lens") as answer:
        card.locator("[data-role=lens-run]").click()
    out = answer.value.json()
    table = card.locator("[data-role=lens-table]")
    expect(table.locator("tbody tr")).to_have_count(len(out["points"]) + 1)  # + the emergence row
    expect(table.locator("thead th")).to_have_count(len(out["target_tokens"]) + 1)
    expect(card.locator("[data-role=dla-cross] tbody td")).to_have_count(4)  # 2 layers × 2 heads

    card.locator("[data-role=pairs] button", has_text="gender").click()
    expect(card.locator("[data-role=corrupted]")).to_have_value("The woman is reading.")
    card.locator("[data-role=clean]").fill("the man")
    card.locator("[data-role=swaps] button", has_text="man").click()
    expect(card.locator("[data-role=corrupted]")).to_have_value("the woman")

    card.locator("[data-role=clean]").fill("a b c")
    card.locator("[data-role=corrupted]").fill("a b d")
    with page.expect_response("**/api/patch"):
        card.locator("[data-role=patch-run]").click()
    expect(card.locator("[data-role=patch-cross] tbody td")).to_have_count(4)
    expect(card.locator("[data-role=patch-positions] tbody tr")).to_have_count(3)  # embed, enc 1, enc 2
    expect(card.locator("[data-role=patch-summary]")).to_contain_text("changes log p by")

    card.locator("[data-role=corrupted]").fill("a b c d e")
    with page.expect_response("**/api/patch"):
        card.locator("[data-role=patch-run]").click()
    expect(card.locator("[data-role=error]")).to_contain_text("equally long")
    assert page_width_settles(page, width) <= width
    shoot(page, f"inside-{width}")
