"""End-to-end: the pages in a real Chromium against the real server and tiny models."""

from __future__ import annotations

import json
import math
import urllib.request
from typing import Any
from urllib.parse import parse_qs, urlencode, urlparse

import pytest
from playwright.sync_api import Page, expect

pytestmark = pytest.mark.browser

SENTENCE = "A man is riding a bicycle."
TRANSFORMER = "en-de-transformer"
XSS = ["<img src=x onerror=alert(1)>", "</script><script>alert(1)</script>"]


def open_translate(page: Page, server_url: str, **params: str) -> None:
    page.goto(f"{server_url}/?{urlencode(params)}")
    page.wait_for_selector("body[data-ready=true]")


def translate(page: Page, text: str, model: str = TRANSFORMER, beam: int = 2) -> dict[str, Any]:
    """Type `text`, press Enter, and return the API's JSON once the heatmap is drawn."""
    page.select_option("#model", model)
    page.fill("#beam", str(beam))
    page.fill("#text", text)
    with page.expect_response("**/api/translate") as answer:
        page.press("#text", "Enter")
    response = answer.value.json()
    expect(page.locator("#translate-btn")).to_be_enabled()
    wait_drawn(page, "#explorer [data-role=plot-main]")
    return response


def is_align_of(target: str):  # type: ignore[no-untyped-def]
    """Matches the /api/align answer for `target` (the page also aligns the model's own output)."""

    def match(response) -> bool:  # type: ignore[no-untyped-def]
        body = response.request.post_data_json if response.request.method == "POST" else None
        return response.url.endswith("/api/align") and bool(body) and body.get("target") == target

    return match


def wait_drawn(page: Page, selector: str) -> None:
    page.wait_for_function(
        "sel => { const gd = document.querySelector(sel); return gd && gd.data && gd.data.length > 0 }",
        arg=selector,
    )


def heatmap(page: Page, selector: str = "#explorer [data-role=plot-main]") -> dict[str, Any]:
    """The drawn heatmap's matrix and tick labels, as Plotly holds them."""
    return page.eval_on_selector(
        selector,
        """gd => ({
            z: gd.data[0].z,
            x: gd.layout.xaxis.ticktext,
            y: gd.layout.yaxis.ticktext,
            ticks: [...gd.querySelectorAll('.xtick text')].map(t => t.textContent),
            cell: gd._fullLayout.xaxis._length / (gd._fullLayout.xaxis.range[1] - gd._fullLayout.xaxis.range[0]),
        })""",
    )


def sharpest(attention: list[list[list[list[float]]]]) -> tuple[int, int]:
    """(layer, head) with the lowest mean row entropy: the explorer's first view."""

    def entropy(matrix: list[list[float]]) -> float:
        return sum(-sum(p * math.log2(p) for p in row if p > 0) for row in matrix) / len(matrix)

    scored = [(entropy(m), layer, head) for layer, heads in enumerate(attention) for head, m in enumerate(heads)]
    _, layer, head = min(scored)
    return layer, head


def shape(matrix: list[list[float]]) -> tuple[int, int]:
    return len(matrix), len(matrix[0])


def test_translate_draws_a_heatmap_of_target_by_source_tokens(
    page: Page, server_url: str, shoot
) -> None:
    open_translate(page, server_url)
    response = translate(page, SENTENCE)
    plot = heatmap(page)
    assert shape(plot["z"]) == (len(response["target_tokens"]), len(response["source_tokens"]))
    assert shape(plot["z"]) == tuple(
        map(len, (response["attention"]["cross"][-1][0], response["source_tokens"]))
    )
    layer, head = sharpest(response["attention"]["cross"])
    assert plot["z"] == response["attention"]["cross"][layer][head]  # default: the sharpest head
    expect(page.locator("#explorer [data-role=caption-main]")).to_contain_text("sharpest head")
    assert plot["ticks"] == response["source_tokens"]  # every source token labelled, as typed
    assert all(math.isclose(sum(row), 1, abs_tol=1e-4) for row in plot["z"])
    expect(page.locator("#translation")).to_have_text(
        response["translation"] or "(empty translation)"
    )
    # only the kinds the model has, and the hover box names weight, tokens, layer and head
    expect(page.locator("#explorer [data-role=kind] button")).to_have_text(
        ["Cross", "Encoder self", "Decoder self"]
    )
    page.locator("#explorer [data-role=plot-main] .nsewdrag").first.hover(position={"x": 5, "y": 5})
    hover = page.locator("#explorer .hoverlayer .hovertext")
    expect(hover).to_contain_text(f"{plot['z'][0][0]:.4f}")
    expect(hover).to_contain_text(response["source_tokens"][0])
    expect(hover).to_contain_text(f"layer {layer + 1} · head {head + 1}")
    # a small multiple per layer x head (plus each layer's average), with its entropy
    thumbs = page.locator("#explorer [data-role=grid] .thumb")
    expect(thumbs).to_have_count(2 * (2 + 1))
    expect(page.locator("#explorer [data-role=sharpest] li")).to_have_count(4)
    page.mouse.move(0, 0)
    shoot(page, "translate")


def test_switching_layer_and_head_redraws(page: Page, server_url: str) -> None:
    open_translate(page, server_url)
    response = translate(page, SENTENCE)
    cross = response["attention"]["cross"]
    page.select_option("#explorer [data-role=layer]", "1")
    page.select_option("#explorer [data-role=head]", "1")
    expect(page.locator("#explorer [data-role=caption-main]")).to_contain_text("layer 2 · head 2")
    assert heatmap(page)["z"] == cross[1][1]
    page.select_option("#explorer [data-role=layer]", "0")
    expect(page.locator("#explorer [data-role=caption-main]")).to_contain_text("layer 1 · head 2")
    assert heatmap(page)["z"] == cross[0][1]
    page.check("#explorer [data-role=avg]")
    expect(page.locator("#explorer [data-role=caption-main]")).to_contain_text("average of 2 heads")
    mean = [
        [(a + b) / 2 for a, b in zip(r0, r1, strict=True)] for r0, r1 in zip(*cross[0], strict=True)
    ]
    z = heatmap(page)["z"]
    assert all(
        math.isclose(u, v, abs_tol=1e-6)
        for zr, mr in zip(z, mean, strict=True)
        for u, v in zip(zr, mr, strict=True)
    )
    # a thumbnail opens large; other kinds have their own shapes
    page.locator("#explorer .thumb[data-layer='1'][data-head='0']").click()
    expect(page.locator("#explorer [data-role=caption-main]")).to_contain_text("layer 2 · head 1")
    assert heatmap(page)["z"] == cross[1][0]
    page.locator("#explorer [data-role=kind] button", has_text="Encoder self").click()
    expect(page.locator("#explorer [data-role=caption-main]")).to_contain_text("Encoder self")
    assert shape(heatmap(page)["z"]) == (len(response["source_tokens"]),) * 2
    page.locator("#explorer [data-role=kind] button", has_text="Decoder self").click()
    plot = heatmap(page)
    assert shape(plot["z"]) == (
        len(response["target_tokens"]),
        len(response["decoder_input_tokens"]),
    )
    assert plot["x"][0] == "&lt;s&gt;"  # Plotly's label markup, escaped: shows "<s>"
    assert plot["ticks"][0] == "<s>"


def test_merge_subwords_and_hide_eos(page: Page, server_url: str) -> None:
    open_translate(page, server_url)
    response = translate(page, SENTENCE)
    words, target_words = response["source_words"], response["target_words"]
    assert len(words) < len(response["source_tokens"])  # the tiny tokenizer splits "bicycle"
    page.check("#explorer [data-role=merge]")
    expect(page.locator("#explorer [data-role=axes-main]")).to_contain_text("words")
    plot = heatmap(page)
    assert shape(plot["z"]) == (len(target_words), len(words))
    assert plot["ticks"] == [w["text"] for w in words]
    # keys summed, queries averaged: rows still sum to one
    cross = response["attention"]["cross"][-1][0]
    first = words[1]["tokens"]
    expected = sum(cross[0][k] for k in first) if len(target_words[0]["tokens"]) == 1 else None
    if expected is not None:
        assert math.isclose(plot["z"][0][1], expected, abs_tol=1e-6)
    assert all(math.isclose(sum(row), 1, abs_tol=1e-4) for row in plot["z"])
    page.check("#explorer [data-role=eos]")
    expect(page.locator("#explorer [data-role=axes-main]")).to_contain_text("</s> hidden")
    plot = heatmap(page)
    assert shape(plot["z"]) == (len(target_words), len(words) - 1)
    assert "</s>" not in plot["ticks"]
    assert all(math.isclose(sum(row), 1, abs_tol=1e-4) for row in plot["z"])


def test_user_text_stays_text(page: Page, server_url: str) -> None:
    for payload in XSS:
        open_translate(page, server_url)
        response = translate(page, payload)
        expect(page.locator("#text")).to_have_value(payload)
        assert heatmap(page)["ticks"] == response["source_tokens"]  # "<unk>" pieces shown as typed
        page.fill("#target", payload)
        with page.expect_response(is_align_of(payload)) as answer:
            page.click("#align-btn")
        aligned = answer.value.json()
        wait_drawn(page, "#explorer [data-role=plot-aligned]")
        chips = page.locator("#probs [data-role=target-probs] .prob-token")
        expect(chips).to_have_text(aligned["target_tokens"])
        assert page.locator("img").count() == 0
        assert page.locator("main script").count() == 0
        # ...and through the shareable URL too
        open_translate(page, server_url, model=TRANSFORMER, text=payload, target=payload)
        expect(page.locator("#text")).to_have_value(payload)
        expect(page.locator("#target")).to_have_value(payload)
        wait_drawn(page, "#explorer [data-role=plot-aligned]")
        assert page.locator("img").count() == 0
        assert page.evaluate("document.title") == "Translate · attnscope"
    assert not page.watch.dialogs  # type: ignore[attr-defined]


def test_own_target_shows_teacher_forced_attention_and_probabilities(
    page: Page, server_url: str, shoot
) -> None:
    open_translate(page, server_url)
    translate(page, SENTENCE)
    page.fill("#target", "Ein Mann fährt Fahrrad.")
    with page.expect_response(is_align_of("Ein Mann fährt Fahrrad.")) as answer:
        page.press("#target", "Enter")
    aligned = answer.value.json()
    wait_drawn(page, "#explorer [data-role=plot-aligned]")
    plot = heatmap(page, "#explorer [data-role=plot-aligned]")
    assert shape(plot["z"]) == (len(aligned["target_tokens"]), len(aligned["source_tokens"]))
    chips = page.locator("#probs [data-role=target-probs] .prob")
    expect(chips).to_have_count(len(aligned["target_logprobs"]))
    first_p = math.exp(aligned["target_logprobs"][0])
    expect(chips.first.locator(".prob-value")).to_have_text(
        "1.00" if first_p >= 0.995 else f"{first_p:.2f}"
    )
    # the model's own attention stays beside it
    expect(page.locator("#explorer [data-role=plot-main]")).to_be_visible()
    shoot(page, "translate-own-target")


def test_view_lives_in_a_shareable_url(page: Page, server_url: str) -> None:
    open_translate(page, server_url)
    response = translate(page, SENTENCE, beam=3)
    page.select_option("#explorer [data-role=layer]", "0")
    page.select_option("#explorer [data-role=head]", "1")
    page.check("#explorer [data-role=merge]")
    query = parse_qs(urlparse(page.url).query)
    assert (
        query["model"] == [TRANSFORMER] and query["text"] == [SENTENCE] and query["beam"] == ["3"]
    )
    assert query["layer"] == ["1"] and query["head"] == ["2"] and query["merge"] == ["1"]
    shared = page.url
    page.goto("about:blank")
    page.goto(shared)
    page.wait_for_selector("body[data-ready=true]")
    wait_drawn(page, "#explorer [data-role=plot-main]")
    expect(page.locator("#text")).to_have_value(SENTENCE)
    expect(page.locator("#explorer [data-role=caption-main]")).to_contain_text("layer 1 · head 2")
    expect(page.locator("#explorer [data-role=merge]")).to_be_checked()
    assert shape(heatmap(page)["z"]) == (
        len(response["target_words"]),
        len(response["source_words"]),
    )


def test_api_errors_show_their_message(page: Page, server_url: str) -> None:
    open_translate(page, server_url, model="no-such-model", text=SENTENCE)
    warning = page.locator("#model-warning")
    expect(warning).to_contain_text("no-such-model")
    expect(page.locator("#translation")).not_to_be_empty()  # it translated with another model...
    expect(warning).to_be_visible()  # ...and the warning stayed
    page.fill("#text", "")
    page.press("#text", "Enter")
    expect(page.locator("#error")).to_contain_text("Type a sentence")
    long_text = " ".join(["bicycle"] * 400)  # more tokens than the API accepts
    page.fill("#text", long_text)
    with page.expect_response("**/api/translate") as answer:
        page.press("#text", "Enter")
    assert answer.value.status == 422
    error = page.locator("#error")
    expect(error).to_be_visible()
    expect(error).to_contain_text("422")
    assert len(error.inner_text()) > len("Error 422: ")


def test_long_input_keeps_labels_and_colour_bar_in_view(page: Page, server_url: str, shoot) -> None:
    open_translate(page, server_url)
    text = " ".join(["Two dogs play in the snow."] * 12)  # ~150 subword tokens
    response = translate(page, text, beam=1)
    source = response["source_tokens"]
    gd = page.locator("#explorer [data-role=plot-main]")
    plot = heatmap(page)
    assert len(plot["x"]) == len(source) > 100  # every token has its label...
    assert plot["cell"] >= 14  # ...at a legible size, so a window of the matrix is shown
    assert gd.get_attribute("data-windowed") == "true"
    first = plot["ticks"]
    assert 3 < len(first) < len(source) and first == source[: len(first)]
    expect(page.locator("#explorer [data-role=window-main]")).to_contain_text("of 157 columns".replace("157", str(len(source))))
    # scrolling over the plot moves the window; the labels and the colour bar stay drawn
    gd.hover()
    page.mouse.wheel(1200, 0)
    page.wait_for_function(
        "t => document.querySelector('#explorer [data-role=plot-main] .xtick text').textContent !== t",
        arg=first[0],
    )
    moved = heatmap(page)["ticks"]
    start = next(i for i in range(1, len(source)) if source[i : i + len(moved)] == moved)
    assert start > 0 and len(moved) == len(first)
    assert gd.locator(".colorbar").count() == 1
    assert page.evaluate("document.documentElement.scrollWidth <= document.documentElement.clientWidth")
    shoot(page, "translate-long")


def test_export_png_and_json(page: Page, server_url: str) -> None:
    open_translate(page, server_url)
    response = translate(page, SENTENCE)
    with page.expect_download() as png:
        page.click("#explorer [data-role=png]")
    assert png.value.suggested_filename.endswith(".png")
    assert png.value.path().read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with page.expect_download() as raw:
        page.click("#explorer [data-role=json]")
    assert json.loads(raw.value.path().read_text()) == response


def test_compare_shows_two_heatmaps(page: Page, server_url: str, shoot) -> None:
    params = urlencode({"a": "en-de-rnn-additive", "b": TRANSFORMER, "text": SENTENCE, "beam": "2"})
    page.goto(f"{server_url}/compare?{params}")
    page.wait_for_selector("body[data-ready=true]")
    for side in "ab":
        wait_drawn(page, f"#explorer-{side} [data-role=plot-main]")
    assert page.locator("#compare-grid .heatmap.js-plotly-plot").count() == 2
    rnn, transformer = (heatmap(page, f"#explorer-{side} [data-role=plot-main]") for side in "ab")
    assert len(rnn["ticks"]) == len(transformer["ticks"])  # the same source sentence
    expect(page.locator("#panel-a [data-role=model-name]")).to_have_text("RNN, additive attention")
    # the kind follows across panels where the other model has it
    page.locator("#explorer-b [data-role=kind] button", has_text="Encoder self").click()
    expect(page.locator("#explorer-b [data-role=caption-main]")).to_contain_text("Encoder self")
    expect(page.locator("#explorer-a [data-role=caption-main]")).to_contain_text("Cross")
    shoot(page, "compare")
    # attention vs the no-attention baseline: one heatmap and a plain explanation
    page.select_option("#model-b", "en-de-rnn-none")
    page.click("#compare-btn")
    expect(page.locator("#explorer-b [data-role=empty]")).to_contain_text("no attention")
    expect(page.locator("#explorer-b [data-role=plot-main]")).to_be_hidden()


def test_models_page_draws_its_plots(page: Page, server_url: str, shoot, card_markup: str) -> None:
    page.goto(f"{server_url}/models")
    page.wait_for_selector("body[data-ready=true]")
    expect(page.locator(".model-card")).to_have_count(4)
    expect(page.locator("[data-chart=bleu-by-length].js-plotly-plot")).to_have_count(1)
    expect(page.locator("[data-chart=val-bleu].js-plotly-plot")).to_have_count(1)
    expect(page.locator("[data-chart=curve].js-plotly-plot")).to_have_count(3)
    lines = page.eval_on_selector("[data-chart=bleu-by-length]", "gd => gd.data.map(t => t.name)")
    assert sorted(lines) == ["en-de-rnn-additive", "en-de-self-attentive", "en-de-transformer"]
    partial = page.locator("#model-en-de-rnn-none")
    expect(partial).to_contain_text("No learning curve")
    expect(partial).to_contain_text("RNN, no attention")
    expect(page.locator("#model-en-de-transformer .bleu-table tbody tr").first).to_contain_text(
        "test 2016"
    )
    expect(page.locator("#model-en-de-transformer")).to_contain_text(f"trained by {card_markup}")
    assert page.locator("img").count() == 0
    shoot(page, "models")


def test_plotly_comes_from_this_server(server_url: str) -> None:
    with urllib.request.urlopen(f"{server_url}/") as response:
        html = response.read().decode()
    assert "/vendor/plotly.min.js" in html and "cdn" not in html.lower()
    with urllib.request.urlopen(f"{server_url}/vendor/plotly.min.js?v=1") as response:
        assert "max-age=31536000" in response.headers["Cache-Control"]
        assert b"plotly" in response.read(2000).lower()
