"""The Learn tour in real Chromium, against the real server with the tiny models: every stop's
figure draws from a live answer (or says, gracefully, that its model is not loaded), at desktop
and phone widths, without sideways scrolling, reachable by keyboard; the player streams a
translation row by row."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest
from playwright.sync_api import Browser, Page

from attnscope.testing import running_server

pytestmark = pytest.mark.browser

STOPS = ["forgetting", "step", "scores", "cost", "self", "transformer", "beam", "vision", "inside"]
SENTENCE = "A man is riding a bicycle and two dogs play in the snow."


def open_tour(page: Page, server_url: str, width: int) -> None:
    page.set_viewport_size({"width": width, "height": 900})
    page.goto(f"{server_url}/learn?text={SENTENCE.replace(' ', '+')}")
    page.wait_for_selector("body[data-learn-ready='true']", timeout=60_000)


def states(page: Page) -> dict[str, str]:
    found: dict[str, str] = page.evaluate(
        "Object.fromEntries([...document.querySelectorAll('.stop')].map("
        "s => [s.dataset.stop, s.querySelector('[data-role=figure]').dataset.state]))"
    )
    return found


@pytest.mark.parametrize("width", [1400, 390])
def test_every_stop_draws_from_a_live_answer(page: Page, server_url: str, shoot, width: int) -> None:
    open_tour(page, server_url, width)
    found = states(page)
    assert list(found) == STOPS
    # The tiny models cover every text stop; no vision model is served, so that stop says so.
    assert {k: v for k, v in found.items() if k != "vision"} == {k: "ready" for k in STOPS if k != "vision"}
    assert found["vision"] == "unavailable"
    assert "No glimpse model" in page.locator("#stop-vision .figure").inner_text()
    # Heatmaps are Plotly plots holding the answers' matrices; the beam tree is an SVG.
    for stop in ("scores", "self", "transformer"):
        assert page.locator(f"#stop-{stop} .learn-heat .main-svg").count() >= 1, stop
    assert page.locator("#stop-transformer .learn-heat").count() == 2
    assert page.locator("#stop-beam svg.beam-svg").count() == 1
    assert page.locator("#stop-cost .cost-table tbody tr").count() >= 3
    assert page.locator("#stop-step .anatomy-table tbody tr").count() >= 2
    # The causal mask, checked on the model's own numbers.
    assert "0.000000" in page.locator("#stop-transformer .figure-note").first.inner_text()
    assert page.evaluate("document.documentElement.scrollWidth <= document.documentElement.clientWidth")
    shoot(page, f"learn-{width}")


def test_links_carry_the_sentence_and_model(page: Page, server_url: str) -> None:
    open_tour(page, server_url, 1400)
    href = page.locator("#stop-transformer [data-role=full]").get_attribute("href")
    assert href is not None
    query = parse_qs(urlparse(href).query)
    assert query["text"] == [SENTENCE] and query["model"] == ["en-de-transformer"] and query["kind"] == ["cross"]
    compare = parse_qs(urlparse(page.locator("#stop-forgetting [data-role=full]").get_attribute("href") or "").query)
    assert compare["a"] == ["en-de-rnn-none"] and compare["text"] == [SENTENCE]


def test_switching_head_redraws_and_step_slider_moves(page: Page, server_url: str) -> None:
    open_tour(page, server_url, 1400)
    page.select_option("#tf-head", "1")
    page.wait_for_function("() => document.querySelector('#stop-transformer [data-role=full]').href.includes('head=2')")
    slider = page.locator("#step-query")
    slider.focus()
    page.keyboard.press("ArrowRight")
    assert page.locator("#stop-step .learn-anatomy").get_attribute("data-query") == "1"


def test_the_tour_is_reachable_by_keyboard(page: Page, server_url: str) -> None:
    open_tour(page, server_url, 390)
    reached: set[str] = set()
    for _ in range(80):
        page.keyboard.press("Tab")
        reached.add(page.evaluate("document.activeElement.id || document.activeElement.textContent.trim().slice(0, 20)"))
    for wanted in ("learn-text", "learn-run", "step-query", "tf-layer", "tf-head"):
        assert wanted in reached, wanted


def test_the_player_streams_rows_one_step_at_a_time(page: Page, server_url: str, shoot) -> None:
    open_tour(page, server_url, 1400)
    player = page.locator("#stop-beam [data-role=player]")
    step = player.get_by_role("button", name="Step ›")
    with page.expect_request("**/api/translate/stream") as request:
        step.click()
    assert request.value.post_data_json["attention"] == "on_demand"  # rows fetched a step at a time
    page.wait_for_function("() => document.querySelector('[data-role=player]').dataset.rows === '1'")
    step.click()
    page.wait_for_function("() => document.querySelector('[data-role=player]').dataset.rows === '2'")
    assert player.locator(".player-plot").get_attribute("data-rows") == "2"
    # The anatomy of the step it stands on: which step, the token's top-k, the head's row.
    anatomy = player.locator("[data-role=step-anatomy]")
    assert anatomy.get_attribute("data-step") == "2"
    assert anatomy.locator(".step-title").inner_text().startswith("Step 2")
    assert anatomy.locator(".player-top .top-row").count() >= 2
    assert anatomy.locator(".anatomy-table tbody tr").count() >= 2
    # Another head of the last layer: the heatmap and the step's row follow it.
    player.get_by_label("Head", exact=True).select_option("1")
    page.wait_for_function("() => /head 2/i.test(document.querySelector('[data-role=player] [data-role=anatomy-title]').textContent)")
    assert anatomy.get_attribute("data-step") == "2"
    player.get_by_role("button", name="▶ Play").click()
    # Played to the end, the heatmap has one row per output token of the /api/translate answer.
    answer = page.evaluate(
        "async () => (await fetch('/api/translate', {method: 'POST', headers: {'Content-Type': 'application/json'},"
        f" body: JSON.stringify({json.dumps({'model': 'en-de-transformer', 'text': SENTENCE, 'beam_size': 1})})}})).json()"
    )
    rows = str(len(answer["target_tokens"]))
    page.wait_for_function(f"() => document.querySelector('[data-role=player]').dataset.rows === '{rows}'", timeout=60_000)
    assert "done:" in player.locator(".player-status").inner_text()
    # With the answer in, the last step shows the raw scores (return_scores) beside the weights.
    page.wait_for_function("() => document.querySelector('[data-role=player] [data-role=step-anatomy]').dataset.scores === 'true'")
    assert anatomy.get_attribute("data-step") == rows
    shoot(page, "learn-player")


def test_the_tour_uses_what_is_loaded(
    browser: Browser, browser_models_dir: Path, tmp_path_factory: pytest.TempPathFactory, shoot
) -> None:
    """A server with the Transformer alone: every text stop still draws (the self-attention stop
    from the Transformer's encoder, the forgetting stop without its baseline, saying so)."""
    root = tmp_path_factory.mktemp("only-transformer") / "models"
    shutil.copytree(browser_models_dir / "en-de-transformer", root / "en-de-transformer")
    with running_server(root, tmp_path_factory.mktemp("only-server") / "server.log") as url:
        context = browser.new_context(viewport={"width": 390, "height": 844})
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda err: errors.append(str(err)))
        open_tour(page, url, 390)
        found = states(page)
        assert {k: v for k, v in found.items() if k != "vision"} == {k: "ready" for k in STOPS if k != "vision"}
        assert "No no-attention model" in page.locator("#stop-forgetting .figure").inner_text()
        assert "No self-attentive RNN" in page.locator("#stop-self .figure").inner_text()
        assert page.evaluate("document.documentElement.scrollWidth <= document.documentElement.clientWidth")
        shoot(page, "learn-only-transformer")
        context.close()
        assert not errors


def test_the_player_grows_the_beam_tree(page: Page, server_url: str, shoot) -> None:
    open_tour(page, server_url, 390)
    player = page.locator("#stop-beam [data-role=player]")
    player.get_by_label("What to play").select_option("3")
    player.get_by_role("button", name="Step ›").click()
    page.wait_for_function("() => document.querySelector('[data-role=player]').dataset.rows === '1'")
    assert player.locator("svg.beam-svg g.node").count() == 1 + 3  # <s> and the 3 kept after step 1
    assert player.locator(".player-top .top-row").count() >= 2
    player.get_by_role("button", name="▶ Play").click()
    page.wait_for_function("() => document.querySelector('[data-role=player] .player-status').textContent.includes('done:')", timeout=60_000)
    body = {"model": "en-de-transformer", "text": SENTENCE, "beam_size": 3, "return_beam": True, "attention": ["cross"]}
    answer = page.evaluate(
        "async (body) => (await fetch('/api/translate', {method: 'POST', headers: {'Content-Type': 'application/json'},"
        " body: JSON.stringify(body)})).json()",
        body,
    )
    assert player.locator("svg.beam-svg g.node").count() == len(answer["beam"]["nodes"])
    assert page.evaluate("document.documentElement.scrollWidth <= document.documentElement.clientWidth")
    shoot(page, "learn-player-beam")


def test_typed_markup_stays_text(page: Page, server_url: str, card_markup: str) -> None:
    """The sentence comes from the URL and the box: it reaches the figures as text only (the
    page fixture fails on any dialog or script error)."""
    page.goto(f"{server_url}/learn")
    page.wait_for_selector("body[data-learn-ready='true']", timeout=60_000)
    page.fill("#learn-text", f"A dog {card_markup} runs.")
    page.click("#learn-run")
    page.wait_for_function("() => document.querySelector('#stop-beam .figure').dataset.state === 'ready'")
    page.wait_for_function("() => [...document.querySelectorAll('.stop .figure')].every(f => f.dataset.state !== 'loading')")
    assert page.locator("#stop-forgetting img").count() == 0 and page.locator("main script").count() == 0
