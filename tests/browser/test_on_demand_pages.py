"""Compare and the Learn tour with attention on demand, in Chromium against the real server: every
translate and align they send asks for "on_demand" (or for no attention where nothing is drawn),
the matrices come from GET /api/attention, and what each heatmap draws equals what the same request
answered inline gives (the numbers the pages drew before)."""

from __future__ import annotations

import json
import urllib.request
from typing import Any
from urllib.parse import urlencode

import pytest
from playwright.sync_api import Page, Request

pytestmark = pytest.mark.browser

SENTENCE = "A man is riding a bicycle."
TARGET = "Ein Mann fährt Fahrrad."
MODELS = {"a": "en-de-rnn-additive", "b": "en-de-transformer"}


def posted(page: Page) -> list[tuple[str, dict[str, Any]]]:
    """(route, body) of every translate and align the page sends."""
    seen: list[tuple[str, dict[str, Any]]] = []

    def keep(request: Request) -> None:
        route = request.url.rsplit("/", 1)[-1]
        if request.method == "POST" and route in ("translate", "align"):
            seen.append((route, request.post_data_json))

    page.on("request", keep)
    return seen


def inline(server_url: str, route: str, body: dict[str, Any]) -> dict[str, Any]:
    """The same request answered as the pages asked it before: every matrix inline."""
    asked = {k: v for k, v in body.items() if k != "attention"}
    request = urllib.request.Request(
        f"{server_url}/api/{route}", data=json.dumps(asked).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=60) as reply:
        return json.loads(reply.read())


def z_of(page: Page, selector: str) -> list[list[float]]:
    return page.eval_on_selector(selector, "gd => gd.data[0].z")


def shown_view(page: Page, explorer: str) -> tuple[str, int, int]:
    """(kind, layer, head) the explorer shows (its controls)."""
    kind = page.get_attribute(f"{explorer} [data-role=plot-main]", "data-kind")
    layer = int(page.input_value(f"{explorer} [data-role=layer]"))
    head = int(page.input_value(f"{explorer} [data-role=head]"))
    assert not page.is_checked(f"{explorer} [data-role=avg]")
    return kind or "", layer, head


@pytest.mark.parametrize("target", ["", TARGET])
def test_compare_fetches_what_it_draws(page: Page, server_url: str, target: str) -> None:
    sent = posted(page)
    params = {**MODELS, "text": SENTENCE, "beam": "1", "target": target, "layer": "2", "head": "2", "blayer": "2", "bhead": "2"}
    page.goto(f"{server_url}/compare?{urlencode(params)}")
    page.wait_for_selector("body[data-ready=true]")
    for side in "ab":
        page.wait_for_function("s => document.querySelector(s)?.data?.[0]?.z?.length > 0", arg=f"#explorer-{side} [data-role=plot-main]")
    drawn_route = "align" if target else "translate"
    for route, body in sent:  # what is drawn on demand; an own translation beside a target: none
        assert body["attention"] == ("on_demand" if route == drawn_route else []), (route, body)
    bodies = {body["model"]: body for route, body in sent if route == drawn_route}
    for side, model in MODELS.items():
        explorer = f"#explorer-{side}"
        kind, layer, head = shown_view(page, explorer)
        before = inline(server_url, drawn_route, bodies[model])
        assert z_of(page, f"{explorer} [data-role=plot-main]") == before["attention"][kind][layer][head]
    # Moving B to another head fetches it and draws the inline numbers again.
    page.select_option("#explorer-b [data-role=head]", "0")
    page.wait_for_function("() => document.querySelector('#explorer-b [data-role=caption-main]').textContent.includes('head 1')")
    kind, layer, head = shown_view(page, "#explorer-b")
    assert z_of(page, "#explorer-b [data-role=plot-main]") == inline(server_url, drawn_route, bodies[MODELS["b"]])["attention"][kind][layer][head]


def test_the_tour_fetches_what_it_draws(page: Page, server_url: str) -> None:
    sent = posted(page)
    fetched: list[str] = []
    page.on("request", lambda r: fetched.append(r.url) if "/api/attention/" in r.url else None)
    page.goto(f"{server_url}/learn?text={SENTENCE.replace(' ', '+')}")
    page.wait_for_selector("body[data-learn-ready='true']", timeout=60_000)
    # No stop asks for inline matrices: on demand, or none at all (the no-attention model, the beam tree).
    assert sent and all(body.get("attention") in ("on_demand", []) for _, body in sent), sent
    assert fetched, "the tour drew nothing from the attention routes"
    by_model = {body["model"]: body for _, body in sent if body.get("attention") == "on_demand" and body["text"] == SENTENCE}
    # Encoder self-attention (stop 5): head 1 of layer 1 of the model it names.
    self_model = page.locator("#stop-self .learn-heat figcaption").inner_text().rsplit("(", 1)[1].rstrip(")")
    before = inline(server_url, "translate", by_model[self_model])
    assert z_of(page, "#stop-self .learn-plot") == before["attention"]["encoder_self"][0][0]
    # The Transformer (stop 6): its masked decoder self-attention and cross-attention, last layer, head 1.
    before = inline(server_url, "translate", by_model[MODELS["b"]])
    last = len(before["attention"]["cross"]) - 1
    plots = page.locator("#stop-transformer .learn-plot")
    assert plots.nth(0).evaluate("gd => gd.data[0].z") == before["attention"]["decoder_self"][last][0]
    assert plots.nth(1).evaluate("gd => gd.data[0].z") == before["attention"]["cross"][last][0]
    # Another head is fetched when chosen, and is the inline one.
    old = plots.nth(1).element_handle()
    page.select_option("#tf-head", "1")
    page.wait_for_function("gd => !gd.isConnected", arg=old)
    page.wait_for_function(
        "() => [...document.querySelectorAll('#stop-transformer .learn-plot')].filter(gd => gd.data?.[0]?.z?.length > 0).length === 2"
    )
    assert page.locator("#stop-transformer .learn-plot").nth(1).evaluate("gd => gd.data[0].z") == before["attention"]["cross"][last][1]
