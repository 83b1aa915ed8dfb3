"""The Translate page's "Keep as written" switch (the API's ``protect``) and its note on what the
models learnt, in a real Chromium over the tiny models' server: on by default (the request leaves
``protect`` to the server, which copies an emoji-only text through), off sends ``protect: false``
and stays off in the shared link."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import Page, expect

pytestmark = pytest.mark.browser


def translate(page: Page, text: str) -> tuple[Any, Any]:
    """Type ``text``, press Enter; the request body and the answer."""
    page.fill("#text", text)
    with page.expect_response("**/api/translate") as answer:
        page.press("#text", "Enter")
    return answer.value.request.post_data_json, answer.value.json()


def test_the_page_says_what_the_models_learnt(page: Page, server_url: str) -> None:
    page.goto(server_url)
    page.wait_for_selector("body[data-ready=true]")
    expect(page.locator("#trained-on")).to_be_visible()
    expect(page.locator("#trained-on")).to_contain_text("Multi30k")
    expect(page.locator("#trained-on")).to_contain_text("German/French")


def test_keep_as_written_is_on_by_default_and_off_on_request(page: Page, server_url: str) -> None:
    page.goto(server_url)
    page.wait_for_selector("body[data-ready=true]")
    page.select_option("#model", "en-de-transformer")
    expect(page.locator("#protect")).to_be_checked()
    sent, body = translate(page, "🍕🍕🍕")
    assert "protect" not in sent  # the server's default for the model
    assert body["translation"] == "🍕🍕🍕" and [s["placed"] for s in body["protected"]] == ["copied"]
    expect(page.locator("#translation")).to_have_text("🍕🍕🍕")
    expect(page.locator("#result-meta")).to_contain_text("kept as written: 🍕🍕🍕")
    page.uncheck("#protect")
    sent, body = translate(page, "🍕🍕🍕")
    assert sent["protect"] is False and body["protected"] is None
    assert "protect=0" in page.url
    page.goto(page.url)
    page.wait_for_selector("body[data-ready=true]")
    expect(page.locator("#protect")).not_to_be_checked()
