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

    # an RNN: no lens (the message says why, and no table of the Transformer's stays under it),
    # one context vector per decoder step instead of the grids, and any source length
    page.select_option("#model", "en-de-rnn-additive")
    with page.expect_response("**/api/lens") as refused:
        card.locator("[data-role=lens-run]").click()
    assert refused.value.status == 422
    expect(card.locator("[data-role=error]")).to_contain_text("no layer-by-layer stream")
    expect(card.locator("[data-role=error]")).to_contain_text("context vector")
    expect(card.locator("[data-role=lens-table]")).to_have_count(0)
    with page.expect_response("**/api/patch") as answer:
        card.locator("[data-role=patch-run]").click()
    steps = len(answer.value.json()["target_tokens"])
    expect(card.locator("[data-role=patch-context] tbody tr")).to_have_count(steps)
    expect(card.locator("[data-role=patch-cross]")).to_have_count(0)
    assert page_width_settles(page, width) <= width
    shoot(page, f"inside-{width}")


def test_the_tour_stop_reads_the_lens_and_points_at_the_panel(page: Page, server_url: str) -> None:
    """Stop 9 of the Learn tour: a lens table from /api/lens, listed in the contents, and its link
    opens the Translate page on the panel, visible, with the tour's model and sentence."""
    page.set_viewport_size({"width": 1400, "height": 900})
    with page.expect_response("**/api/lens", timeout=60_000) as answer:
        page.goto(f"{server_url}/learn?text=a+b+c")
    out = answer.value.json()
    page.wait_for_selector("body[data-learn-ready='true']", timeout=60_000)
    stop = page.locator("#stop-inside")
    expect(page.locator(".learn-toc a[href='#stop-inside']")).to_be_visible()
    expect(stop.locator("[data-role=figure]")).to_have_attribute("data-state", "ready")
    expect(stop.locator("table.lens-table tbody tr")).to_have_count(len(out["points"]) + 1)  # + emergence
    expect(stop.locator("table.lens-table thead th")).to_have_count(len(out["target_tokens"]) + 1)
    link = stop.locator("[data-role=full]")
    href = link.get_attribute("href") or ""
    assert href.startswith("/?") and href.endswith("#inside-card") and "model=en-de-transformer" in href
    with page.expect_response("**/api/lens"):  # the panel reads the lens of the tour's sentence at once
        link.click()
    page.wait_for_selector("body[data-ready=true]")
    expect(page.locator("#inside-card [data-role=lens-table]")).to_be_visible()
    expect(page.locator("#inside-card")).to_be_in_viewport()
    expect(page.locator("#model")).to_have_value("en-de-transformer")
    expect(page.locator("#text")).to_have_value("a b c")
