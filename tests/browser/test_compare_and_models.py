"""End-to-end (real Chromium, real server, tiny models): the Compare page with a shared target
and the Models page's plots, numbering and phone layout (issue 30, item 4)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

import pytest
from playwright.sync_api import Page, Response, expect

pytestmark = pytest.mark.browser

SENTENCE = "A man is riding a bicycle."
TARGET = "Ein Mann fährt Fahrrad."
MODELS = {"a": "en-de-rnn-additive", "b": "en-de-transformer"}


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
