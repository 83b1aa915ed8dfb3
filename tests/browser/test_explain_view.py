"""The explorer's "what the heatmap shows" switch (static/js/explain-view.js) in real Chromium:
choosing an explanation method redraws the large heatmap with that method's matrix for the same
kind, layer and head, and a family without a method's definition cannot choose it."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import CARD_EXPLANATIONS

pytestmark = pytest.mark.browser

SWITCH = "#explorer [data-role=explain-switch]"
TEXT = "A man is riding a bicycle."
ALTI_F1 = [[0.4], [0.75]]  # what `attnscope evaluate --explain` wrote for ALTI+ (per layer)


@pytest.fixture(scope="module")
def server_url(explained_server_url: str) -> str:
    """The browser tests' models, the Transformer's card with an `explanations` section whose
    ALTI+ F1 is :data:`ALTI_F1` (conftest.py's CARD_EXPLANATIONS, shared with test_explain_panels)."""
    assert CARD_EXPLANATIONS["en-de-transformer"]["alti"]["alignment"]["f1"] == ALTI_F1
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


def shown(page: Page) -> list[list[float]]:
    """The large heatmap's z, as Plotly holds it."""
    z: list[list[float]] = page.eval_on_selector("#explorer [data-role=plot-main]", "gd => gd.data[0].z")
    return z


def rounded(matrix: list[list[float]]) -> list[list[float]]:
    return [[round(v, 3) for v in row] for row in matrix]


def choose(page: Page, method: str, fetches: bool) -> None:
    button = page.locator(f"{SWITCH} [data-method={method}]")
    if fetches:
        with page.expect_response("**/api/translate"):
            button.click()
    else:
        button.click()
    note = page.locator(f"{SWITCH} [data-role=explain-note]")
    expect(note).to_have_text("")
    expect(button).to_have_attribute("aria-checked", "true")


def test_the_switch_keeps_kind_layer_and_head_and_draws_the_method(page: Page, server_url: str, shoot) -> None:  # type: ignore[no-untyped-def]
    translate(page, server_url, "en-de-transformer")
    page.click("#explorer [data-role=kind] [data-kind=encoder_self]")
    page.select_option("#explorer [data-role=layer]", "0")
    page.select_option("#explorer [data-role=head]", "1")
    weights = shown(page)
    choose(page, "rollout", fetches=True)
    expect(page.locator("#explorer [data-role=layer]")).to_have_value("0")
    expect(page.locator("#explorer [data-role=head]")).to_have_value("1")
    expect(page.locator("#explorer [data-role=kind] [data-kind=encoder_self]")).to_have_attribute("aria-checked", "true")
    expect(page.locator("#explorer [data-role=caption-main]")).to_contain_text("showing rollout")
    rollout = shown(page)
    assert rollout != weights
    for row in rollout:  # rollout's rows sum to 1, and a layer-1 rollout is 0.5·Ā + 0.5·I
        assert abs(sum(row) - 1) < 1e-3
    assert all(rollout[i][i] >= 0.5 - 1e-3 for i in range(len(rollout)))
    shoot(page, "explain-rollout")
    # the other kinds and methods keep the view too; back to the weights draws them again
    page.select_option("#explorer [data-role=head]", "0")
    choose(page, "alti", fetches=False)  # one fetch brought every method
    page.click("#explorer [data-role=kind] [data-kind=cross]")
    expect(page.locator("#explorer [data-role=head]")).to_have_value("0")
    expect(page.locator("#explorer [data-role=layer]")).to_have_value("0")
    expect(page.locator("#explorer [data-role=caption-main]")).to_contain_text("showing ALTI+")
    # the caption's F1 is the method's own, from the card, not the weights' head
    expect(page.locator("#explorer [data-role=caption-main]")).to_contain_text("alignment F1 0.40 (test2016, 6 sentences")
    expect(page.locator("#explorer [data-role=caption-main]")).not_to_contain_text("0.25")
    assert all(sum(row) <= 1 + 1e-3 for row in shown(page))  # the source part of each row
    shares = page.locator(f"{SWITCH} [data-role=source-share] [data-share]")
    expect(shares).to_have_count(len(shown(page)))  # one bar per output token
    assert all(0.0 <= float(s) <= 1.0 for s in shares.evaluate_all("cs => cs.map(c => c.dataset.share)"))
    shoot(page, "explain-alti")
    choose(page, "weights", fetches=False)
    expect(page.locator(f"{SWITCH} [data-role=source-share]")).to_be_hidden()
    page.click("#explorer [data-role=kind] [data-kind=encoder_self]")
    page.select_option("#explorer [data-role=head]", "1")
    assert rounded(shown(page)) == rounded(weights)
    expect(page.locator("#explorer [data-role=caption-main]")).not_to_contain_text("showing")


def test_an_rnn_can_show_norms_but_not_the_transformer_methods(page: Page, server_url: str) -> None:
    translate(page, server_url, "en-de-rnn-additive")
    for method in ("rollout", "alti", "value_zeroing"):
        expect(page.locator(f"{SWITCH} [data-method={method}]")).to_be_disabled()
    choose(page, "norm", fetches=True)
    expect(page.locator("#explorer [data-role=caption-main]")).to_contain_text("showing norm")
    for row in shown(page):
        assert abs(sum(row) - 1) < 1e-3
