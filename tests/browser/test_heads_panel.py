"""The Translate page's Heads card: heads listed with their F1, switched off by a click, the
translation redone with them off, and attention beside attribution."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

pytestmark = pytest.mark.browser


def test_switch_heads_off_and_compare_with_attribution(page: Page, server_url: str, shoot) -> None:  # type: ignore[no-untyped-def]
    page.goto(f"{server_url}/?model=en-de-transformer")
    card = page.locator("#heads-card")
    expect(card).to_have_attribute("data-ready", "true", timeout=60_000)
    page.select_option("#model", "en-de-transformer")
    page.fill("#text", "A man is riding a bicycle.")
    expect(card.locator("[data-head]")).to_have_count(4)  # 2 layers x 2 heads
    expect(card.locator("[data-head='1:1']")).to_contain_text("F1 0.88")  # from the card
    page.select_option("[data-role=heads-sort]", "f1")
    expect(card.locator("[data-head]").first).to_have_attribute("data-head", "1:1")  # best F1 first
    card.locator("[data-head='0:0']").click()
    card.locator("[data-head='0:1']").click()
    expect(card.locator("[data-head='0:0']")).to_have_attribute("aria-pressed", "true")
    with page.expect_request(lambda r: r.url.endswith("/api/translate") and "disable_heads" in (r.post_data or "")) as req:
        card.locator("[data-role=heads-run]").click()
    assert '"layer":0' in req.value.post_data.replace(" ", "")
    expect(card.locator("[data-role=heads-ablated]")).to_be_visible()
    expect(card).to_contain_text("2 heads off")
    card.locator("[data-role=heads-attribution]").click()
    expect(card.locator("[data-role=heads-correlation] tbody tr")).to_have_count(2, timeout=60_000)
    assert card.locator("[data-role=heads-correlation] thead th").first.inner_text() == "ρ"  # not capitalised to Ρ
    shoot(page, "heads-panel")
