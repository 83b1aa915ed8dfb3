"""The Translate page with attention on demand, in Chromium against the real server: the
translation comes back without matrices, the explorer fetches the one head it shows and draws it
while the grid's layers are still on their way (held here), a head the user moves to is fetched
once, a head already fetched is not fetched again, and what is drawn equals the inline answer."""

from __future__ import annotations

import re
from urllib.parse import urlparse

import pytest
from playwright.sync_api import Page, Route, expect

pytestmark = pytest.mark.browser

PLOT = "#explorer [data-role=plot-main]"
EXPLORER = "#explorer"
LAYER_ROUTE = re.compile(r"/api/attention/[^/]+/[a-z_]+/\d+(\?.*)?$")  # every head of a layer


def attention_paths(urls: list[str]) -> list[str]:
    """What each /api/attention request asked for: "cross/1/1", "cross/0", "cross"."""
    return [urlparse(u).path.split("/", 4)[4] for u in urls if "/api/attention/" in u]


def drawn(page: Page) -> list[list[float]]:
    return page.eval_on_selector(PLOT, "gd => gd.data[0].z")


def test_the_explorer_fetches_the_heads_it_shows(page: Page, server_url: str) -> None:
    asked: list[str] = []
    page.on("request", lambda r: asked.append(r.url))
    held: list[Route] = []
    page.route(LAYER_ROUTE, lambda route: held.append(route))  # the grid's and head view's layers wait
    page.goto(f"{server_url}/?text=")
    page.wait_for_selector("body[data-ready=true]")
    page.select_option("#model", "en-de-transformer")
    page.fill("#beam", "1")
    text = "A man is riding a bicycle."
    page.fill("#text", text)
    with page.expect_response("**/api/translate") as answered:
        page.press("#text", "Enter")
    answer = answered.value.json()
    assert answer["attention"] == {} and answer["attention_id"]
    page.wait_for_function("s => document.querySelector(s)?.data?.[0]?.z?.length > 0", arg=PLOT)
    # The card's best-aligned head (layer 2, head 2: F1 0.875) is drawn, fetched alone.
    heads = [p for p in attention_paths(asked) if p.count("/") == 2]
    assert heads == ["cross/1/1"]
    assert held, "the grid asks for its layers after the first heatmap"
    inline = page.evaluate(
        "body => fetch('/api/translate', {method: 'POST', headers: {'Content-Type': 'application/json'},"
        " body: JSON.stringify(body)}).then(r => r.json())",
        {"model": "en-de-transformer", "text": text, "beam_size": 1, "return_beam": True},
    )
    assert drawn(page) == inline["attention"]["cross"][1][1]
    # Moving to another head fetches that head once; moving back fetches nothing.
    page.select_option(f"{EXPLORER} [data-role=head]", "0")
    expect(page.locator(f"{EXPLORER} [data-role=caption-main]")).to_contain_text("head 1")
    assert drawn(page) == inline["attention"]["cross"][1][0]
    page.select_option(f"{EXPLORER} [data-role=head]", "1")
    expect(page.locator(f"{EXPLORER} [data-role=caption-main]")).to_contain_text("head 2")
    page.select_option(f"{EXPLORER} [data-role=head]", "0")
    expect(page.locator(f"{EXPLORER} [data-role=caption-main]")).to_contain_text("head 1")
    heads = [p for p in attention_paths(asked) if p.count("/") == 2]
    assert heads == ["cross/1/1", "cross/1/0"]
    # Released, the grid's layers come in and every thumbnail is drawn; no head is asked twice.
    for route in held:
        route.continue_()
    page.unroute(LAYER_ROUTE)
    expect(page.locator(f"{EXPLORER} .thumb.unfetched")).to_have_count(0)
    paths = attention_paths(asked)
    assert len(paths) == len(set(paths)), paths
    assert set(paths) <= {"cross", "cross/0", "cross/1", "cross/1/1", "cross/1/0"}
