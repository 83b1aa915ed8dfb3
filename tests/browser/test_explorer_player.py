"""The Translate explorer's player in real Chromium, against the real server and its stream: a
greedy and a beam translation played to the end leave the explorer showing exactly what a normal
translate shows; Step draws exactly one more row, also after a Pause; the current step is taken
apart (its token, top-k, the head's scores and weights); the controls are reached by keyboard;
nothing scrolls sideways at 390 px. Every wait is for a condition on the page, never a time."""

from __future__ import annotations

import math
from typing import Any
from urllib.parse import urlparse

import pytest
from playwright.sync_api import Page

from tests.browser.layout import page_width_settles

pytestmark = pytest.mark.browser

SENTENCE = "A man is riding a bicycle."
PLAYER = "#player"
PLOT = "#explorer [data-role=plot-main]"


def open_translated(page: Page, server_url: str, beam: int, width: int = 1400, view: str = "") -> None:
    """The Translate page with SENTENCE translated the normal way (/api/translate)."""
    page.set_viewport_size({"width": width, "height": 900})
    page.goto(f"{server_url}/?model=en-de-transformer&text={SENTENCE.replace(' ', '+')}&beam={beam}{view}")
    page.wait_for_selector("body[data-ready='true']", timeout=60_000)
    wait_idle(page)


def wait_idle(page: Page, plot: bool = True) -> None:
    """No step being drawn (and with `plot`, the heatmap drawn)."""
    page.wait_for_function(
        "(plot) => { const gd = document.querySelector('#explorer [data-role=plot-main]');"
        " return (!plot || (gd && gd.data && gd.data.length > 0 && !gd.dataset.drawing)) && !document.querySelector('#player').dataset.drawing }",
        arg=plot,
    )


def drawn(page: Page) -> dict[str, Any]:
    """What the explorer's large heatmap holds, and the translation line."""
    found: dict[str, Any] = page.evaluate(
        "() => { const gd = document.querySelector('#explorer [data-role=plot-main]');"
        " return {z: gd.data[0].z, rows: gd.data[0].y, cols: gd.data[0].x,"
        " translation: document.querySelector('#translation').textContent} }"
    )
    return found


def rows(page: Page) -> int:
    return len(page.eval_on_selector(PLOT, "gd => gd.data[0].z"))


def step_once(page: Page, expected: int, plot: bool = True) -> None:
    page.click(f"{PLAYER} [data-role=player-step]")
    page.wait_for_function(f"() => document.querySelector('{PLAYER}').dataset.rows === '{expected}'")
    wait_idle(page, plot)


def play_to_the_end(page: Page) -> None:
    page.select_option(f"{PLAYER} [data-role=player-speed]", "120")
    page.click(f"{PLAYER} [data-role=player-play]")
    page.wait_for_function(f"() => document.querySelector('{PLAYER}').dataset.state === 'done'", timeout=60_000)
    wait_idle(page)


@pytest.mark.parametrize("view", ["", "&kind=cross&layer=1&head=2", "&kind=decoder_self&layer=2&head=1"])
def test_greedy_plays_row_by_row_and_ends_on_the_translate_answer(page: Page, server_url: str, shoot, view: str) -> None:
    open_translated(page, server_url, beam=1, view=view)
    before = drawn(page)
    for count in (1, 2, 3):
        step_once(page, count)
        assert rows(page) == count  # the heatmap grows by exactly one row per step
        anatomy = page.locator("[data-role=step-anatomy]")
        assert anatomy.get_attribute("data-step") == str(count)
        assert anatomy.locator(".step-title").inner_text().startswith(f"Step {count}")
        assert anatomy.locator(".player-top .top-row").count() >= 2
        # one row per key: the source, or for decoder self-attention at least the inputs so far
        assert anatomy.locator(".anatomy-table tbody tr").count() >= (count if "decoder_self" in view else 2)
    # Play, then Pause: once the step being drawn is done, Step adds exactly one row.
    page.click(f"{PLAYER} [data-role=player-play]")
    page.wait_for_function(f"() => Number(document.querySelector('{PLAYER}').dataset.rows) >= 5")
    page.click(f"{PLAYER} [data-role=player-pause]")
    wait_idle(page)
    paused = int(page.get_attribute(PLAYER, "data-rows") or "0")
    assert page.get_attribute(PLAYER, "data-playing") == "false" and rows(page) == paused
    step_once(page, paused + 1)
    assert rows(page) == paused + 1
    if not view:
        shoot(page, "explorer-player-mid-1400")
        page.locator(PLAYER).screenshot(path="/tmp/stream-shots/explorer-player-mid-1400-player.png")
    play_to_the_end(page)
    after = drawn(page)
    assert after == before  # the same matrix, labels and translation as the normal translate
    # The last step, taken apart with the answer's scores: a softmax of them gives its weights.
    anatomy = page.locator("[data-role=step-anatomy]")
    assert anatomy.get_attribute("data-scores") == "true"
    pairs = anatomy.locator(".anatomy-table tbody tr").evaluate_all(
        "trs => trs.filter(t => t.dataset.score !== '').map(t => [Number(t.dataset.score), Number(t.dataset.weight)])"
    )
    total = sum(math.exp(s) for s, _ in pairs)
    assert all(abs(math.exp(s) / total - w) < 2e-3 for s, w in pairs)
    assert "played as it was made" in page.inner_text("#result-meta")


def test_the_player_fetches_only_the_head_it_shows_for_each_step(page: Page, server_url: str) -> None:
    """The stream is asked on demand, so its step events carry no rows: each step drawn costs one
    fetch, of that step's rows of the head shown (by the step's own id), and the rows drawn are
    the normal translate's; another head fetches that head for the steps drawn, nothing more."""
    open_translated(page, server_url, beam=1, view="&kind=cross&layer=2&head=2")
    before = drawn(page)
    fetched: list[list[str]] = []  # [id, kind, layer, head] (or [id, kind]: a layer average)
    page.on("request", lambda r: "/api/attention/" in r.url and fetched.append(urlparse(r.url).path.split("/")[3:]))
    with page.expect_request("**/api/translate/stream") as request:
        step_once(page, 1)
    assert request.value.post_data_json["attention"] == "on_demand"
    for count in (2, 3):
        step_once(page, count)
    assert drawn(page)["z"] == before["z"][:3]  # exactly the answer's first rows
    # one fetch a step drawn, and (the answer came in meanwhile) one of the final answer's same
    # head, for the step's raw scores; never an id twice, never another head
    assert [f[1:] for f in fetched] == [["cross", "1", "1"]] * len(fetched) and len(fetched) in (3, 4)
    assert len({f[0] for f in fetched}) == len(fetched)
    ids = [f[0] for f in fetched]
    page.select_option("#explorer [data-role=head]", "0")
    page.wait_for_function("() => document.querySelector('[data-role=step-anatomy] [data-role=anatomy-title]').textContent.includes('head 1')")
    wait_idle(page)
    other = fetched[len(ids):]
    assert [f[1:] for f in other] == [["cross", "1", "0"]] * len(other) and len({f[0] for f in other}) == len(other)
    assert len({f[0] for f in other} ^ set(ids)) <= 1  # the same steps (the answer's at most once more)
    page.check("#explorer [data-role=avg]")
    page.wait_for_function("() => /average of/.test(document.querySelector('#explorer [data-role=caption-main]').textContent)")
    wait_idle(page)
    assert sorted(f[1:] for f in fetched[2 * len(ids):]) == [["cross"]] * 3  # each step's layer averages
    assert len(drawn(page)["z"]) == 3


def test_beam_grows_the_tree_and_ends_on_the_translate_answer(page: Page, server_url: str, shoot) -> None:
    open_translated(page, server_url, beam=3, width=390)
    before = drawn(page)
    answer = page.evaluate(
        "async (body) => (await fetch('/api/translate', {method: 'POST', headers: {'Content-Type': 'application/json'},"
        " body: JSON.stringify(body)})).json()",
        {"model": "en-de-transformer", "text": SENTENCE, "beam_size": 3, "return_beam": True, "protect": False},
    )
    step_once(page, 1)
    tree = page.locator("#player-tree svg.beam-svg g.node")
    assert tree.count() == 1 + 3  # <s> and the three hypotheses kept after step 1
    step_once(page, 2)
    assert rows(page) == 2 and tree.count() >= 1 + 3 + 3  # three more kept after step 2
    step_once(page, 3)
    assert "leading hypothesis" in page.inner_text("[data-role=step-anatomy] .step-title")
    assert page_width_settles(page, 390) <= 390
    shoot(page, "explorer-player-mid-390")
    page.locator(PLAYER).screenshot(path="/tmp/stream-shots/explorer-player-mid-390-player.png")
    play_to_the_end(page)
    assert drawn(page) == before
    assert tree.count() == len(answer["beam"]["nodes"])
    assert page_width_settles(page, 390) <= 390


def test_the_player_is_reached_and_driven_by_keyboard(page: Page, server_url: str) -> None:
    open_translated(page, server_url, beam=1, width=390)
    page.focus("#text")
    reached: list[str] = []
    for _ in range(60):
        page.keyboard.press("Tab")
        name = page.evaluate("document.activeElement.dataset.role || document.activeElement.id || ''")
        reached.append(name)
        if name == "player-step":
            break
    assert "player-play" in reached and reached[-1] == "player-step"
    page.keyboard.press("Enter")
    page.wait_for_function(f"() => document.querySelector('{PLAYER}').dataset.rows === '1'")
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.dataset.role") == "player-speed"
    page.keyboard.press("Shift+Tab")
    page.keyboard.press("Space")
    page.wait_for_function(f"() => document.querySelector('{PLAYER}').dataset.rows === '2'")


@pytest.mark.parametrize(("model", "beam"), [("en-de-rnn-additive", 2), ("en-de-self-attentive", 1), ("en-de-rnn-none", 1)])
def test_every_family_plays_and_the_view_can_change_while_it_plays(page: Page, server_url: str, model: str, beam: int) -> None:
    """The RNNs too; switching the kind between steps redraws the heatmap and the step's
    anatomy from the rows so far (the page fixture fails on any script error)."""
    page.goto(f"{server_url}/?model={model}&text={SENTENCE.replace(' ', '+')}&beam={beam}")
    page.wait_for_selector("body[data-ready='true']", timeout=60_000)
    has_attention = model != "en-de-rnn-none"
    if has_attention:
        wait_idle(page)
        before = drawn(page)
    step_once(page, 1, has_attention)
    step_once(page, 2, has_attention)
    anatomy = page.locator("[data-role=step-anatomy]")
    assert anatomy.get_attribute("data-step") == "2"
    if model == "en-de-self-attentive":
        page.click("#explorer [data-kind=encoder_self]")
        page.wait_for_function("() => document.querySelector('#explorer [data-role=plot-main]').dataset.kind === 'encoder_self'")
        assert "computed once" in anatomy.inner_text()  # the step's row is the cross-attention's
        page.click("#explorer [data-kind=cross]")
    if not has_attention:
        assert "no attention" in anatomy.inner_text()
    step_once(page, 3, has_attention)
    assert anatomy.get_attribute("data-step") == "3"
    if has_attention:
        play_to_the_end(page)
        assert drawn(page) == before


def test_a_refused_stream_says_why(page: Page, server_url: str) -> None:
    open_translated(page, server_url, beam=1)
    page.fill("#text", "dog " * 600)
    page.click(f"{PLAYER} [data-role=player-play]")
    page.wait_for_function(f"() => document.querySelector('{PLAYER}').dataset.state === 'error'")
    assert "422" in page.inner_text(f"{PLAYER} .player-status")


def test_the_player_asks_for_the_explanation_shown(page: Page, server_url: str) -> None:
    """With an explanation method on, Play streams the normal request's fields, `explain`
    included, and the answer it ends with draws that method as the normal translate did."""
    open_translated(page, server_url, beam=1)
    with page.expect_response("**/api/translate"):
        page.click("#explorer [data-role=explain-switch] [data-method=norm]")
    page.wait_for_function("() => /showing norm/.test(document.querySelector('#explorer [data-role=caption-main]').textContent)")
    wait_idle(page)  # the norm view drawn (its caption is written as its draw starts), not the weights before it
    before = drawn(page)
    with page.expect_request("**/api/translate/stream") as request:
        play_to_the_end(page)
    body = request.value.post_data_json
    assert "norm" in body["explain"] and (body["model"], body["text"], body["beam_size"]) == ("en-de-transformer", SENTENCE, 1)
    assert page.get_attribute("#explorer [data-role=explain-switch] [data-method=norm]", "aria-checked") == "true"
    # the final answer's explanation is drawn after the player says done (one more redraw on a
    # loaded machine): wait for the heatmap to settle on it, then compare everything
    page.wait_for_function(
        "(want) => { const gd = document.querySelector('#explorer [data-role=plot-main]');"
        " return gd && gd.data && gd.data.length > 0 && JSON.stringify(gd.data[0].z) === JSON.stringify(want) }",
        arg=before["z"], timeout=30_000,
    )  # fmt: skip
    assert drawn(page) == before
