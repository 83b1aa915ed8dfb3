"""End-to-end: the pages in a real Chromium against the real server and tiny models."""

from __future__ import annotations

import json
import math
import urllib.request
from typing import Any
from urllib.parse import parse_qs, urlencode, urlparse

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import F1, inline_attention, origin_of

pytestmark = pytest.mark.browser

SENTENCE = "A man is riding a bicycle."
TRANSFORMER = "en-de-transformer"
XSS = ["<img src=x onerror=alert(1)>", "</script><script>alert(1)</script>"]


def open_translate(page: Page, server_url: str, **params: str) -> None:
    """The Translate page; an empty ``text`` unless given skips the example a first visit
    translates (test_first_visit_explains_and_translates_at_once covers that)."""
    page.goto(f"{server_url}/?{urlencode({'text': '', **params})}")
    page.wait_for_selector("body[data-ready=true]")


def translate(page: Page, text: str, model: str = TRANSFORMER, beam: int = 2) -> dict[str, Any]:
    """Type `text`, press Enter, and return the API's JSON once the heatmap is drawn."""
    page.select_option("#model", model)
    page.fill("#beam", str(beam))
    page.fill("#text", text)
    with page.expect_response("**/api/translate") as answer:
        page.press("#text", "Enter")
    response = inline_attention(origin_of(page.url), answer.value.json())
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


def best_aligned() -> tuple[int, int]:
    """(layer, head) with the highest word-alignment F1 in the tiny Transformer's card: the
    explorer's first view (not the sharpest head, often a previous-token head)."""
    _, layer, head = max((f1, layer, head) for layer, row in enumerate(F1) for head, f1 in enumerate(row))
    return layer, head


def mean_of_all_heads(attention: list[list[list[list[float]]]]) -> list[list[float]]:
    heads = [m for layer in attention for m in layer]
    return [[sum(m[q][k] for m in heads) / len(heads) for k in range(len(heads[0][0]))] for q in range(len(heads[0]))]


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
    layer, head = best_aligned()
    assert plot["z"] == response["attention"]["cross"][layer][head]  # default: the best-aligned head
    expect(page.locator("#explorer [data-role=caption-main]")).to_contain_text(
        f"layer {layer + 1} · head {head + 1} · best-aligned head per the card: F1 {F1[layer][head]:.2f}"
    )
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
    expect(page.locator("#explorer [data-role=head-table] tbody tr")).to_have_count(4)  # every head ranked
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
        aligned = inline_attention(origin_of(page.url), answer.value.json())
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
    aligned = inline_attention(origin_of(page.url), answer.value.json())
    wait_drawn(page, "#explorer [data-role=plot-aligned]")
    plot = heatmap(page, "#explorer [data-role=plot-aligned]")
    assert shape(plot["z"]) == (len(aligned["target_tokens"]), len(aligned["source_tokens"]))
    # asked on demand, the head shown fetched: the numbers an inline answer has
    assert answer.value.request.post_data_json["attention"] == "on_demand"
    layer = int(page.input_value("#explorer [data-role=layer]"))
    head = int(page.input_value("#explorer [data-role=head]"))
    assert not page.is_checked("#explorer [data-role=avg]")
    assert plot["z"] == aligned["attention"]["cross"][layer][head]
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


SPY_EXPORT = """() => {
    const original = Plotly.toImage;
    Plotly.toImage = async (gd, options) => {
        const url = await original(gd, options);
        const image = new Image();
        image.src = url;
        await image.decode();
        const canvas = Object.assign(document.createElement("canvas"), { width: image.width, height: image.height });
        const ctx = canvas.getContext("2d");
        ctx.drawImage(image, 0, 0);
        window.exported = {
            format: options.format,
            title: gd.layout.title.text,
            x: gd.layout.xaxis.title.text,
            y: gd.layout.yaxis.title.text,
            rows: gd.data[0].z.length,
            corner: [...ctx.getImageData(2, 2, 1, 1).data],
        };
        return url;
    };
}"""


def test_exports_carry_title_model_sentence_and_axis_names(page: Page, server_url: str) -> None:
    open_translate(page, server_url)
    response = translate(page, SENTENCE)
    page.evaluate(SPY_EXPORT)
    with page.expect_download() as png:
        page.click("#explorer [data-role=png]")
    assert png.value.suggested_filename.endswith(".png")
    assert png.value.path().read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    exported = page.evaluate("window.exported")
    assert "Cross attention" in exported["title"] and TRANSFORMER in exported["title"]
    assert "A man is riding a bicycle." in exported["title"]  # the sentence, as words
    assert (exported["x"], exported["y"]) == ("source (en)", "target (de)")
    assert exported["corner"] == [255, 255, 255, 255]  # opaque white, not transparent
    assert exported["rows"] == len(response["target_tokens"])
    with page.expect_download() as svg:
        page.click("#explorer [data-role=svg]")
    text = svg.value.path().read_text()
    assert text.startswith("<svg") and "Cross attention" in text and "source (en)" in text
    with page.expect_download() as csv:
        page.click("#explorer [data-role=csv]")
    header, *rows = csv.value.path().read_bytes().decode().strip().split("\r\n")
    assert header.split(",")[1:] == response["source_tokens"]
    assert [r.split(",")[0] for r in rows] == response["target_tokens"]
    with page.expect_download() as raw:
        page.click("#explorer [data-role=json]")
    assert json.loads(raw.value.path().read_text()) == response
    # the accessible alternative: the same numbers as a table
    page.click("#explorer [data-role=table-main] summary")
    table = page.locator("#explorer [data-role=table-main] table")
    expect(table.locator("tbody tr")).to_have_count(len(response["target_tokens"]))
    expect(table.locator("thead th")).to_have_count(len(response["source_tokens"]) + 1)


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
    # A lacks the kind B shows: said, not silent
    expect(page.locator("#panel-a [data-role=panel-note]")).to_contain_text("no Encoder self attention")
    shoot(page, "compare")
    page.locator("#explorer-b [data-role=kind] button", has_text="Cross").click()
    # layer and head of both sides ride in the link
    page.select_option("#explorer-b [data-role=layer]", "0")
    page.select_option("#explorer-b [data-role=head]", "1")
    query = parse_qs(urlparse(page.url).query)
    assert query["blayer"] == ["1"] and query["bhead"] == ["2"]
    page.goto(page.url)
    page.wait_for_selector("body[data-ready=true]")
    wait_drawn(page, "#explorer-b [data-role=plot-main]")
    expect(page.locator("#explorer-b [data-role=caption-main]")).to_contain_text("layer 1 · head 2")
    # the same target for both: identical tokens, so a difference heatmap
    page.locator("#explorer-b [data-role=kind] button", has_text="Cross").click()
    page.fill("#compare-target", "Ein Mann fährt Fahrrad.")
    page.click("#compare-btn")
    wait_drawn(page, "#diff-card [data-role=diff-plot]")
    a, b = (heatmap(page, f"#explorer-{side} [data-role=plot-main]") for side in "ab")
    diff = heatmap(page, "#diff-card [data-role=diff-plot]")
    assert all(
        math.isclose(d, x - y, abs_tol=1e-9)
        for dr, ar, br in zip(diff["z"], a["z"], b["z"], strict=True)
        for d, x, y in zip(dr, ar, br, strict=True)
    )
    shoot(page, "compare-difference")
    # attention vs the no-attention baseline: one heatmap and a plain explanation
    page.select_option("#model-b", "en-de-rnn-none")
    page.click("#compare-btn")
    expect(page.locator("#explorer-b [data-role=empty]")).to_contain_text("no attention")
    expect(page.locator("#explorer-b [data-role=plot-main]")).to_be_hidden()
    expect(page.locator("#explorer-b [data-role=axes-main]")).to_have_text("")  # no stale token counts


def test_models_page_draws_its_plots(page: Page, server_url: str, shoot, card_markup: str) -> None:
    plotly_loads: list[str] = []
    page.on("request", lambda r: plotly_loads.append(r.url) if "plotly" in r.url else None)
    page.goto(f"{server_url}/models")
    page.wait_for_selector("body[data-ready=true]")
    expect(page.locator(".model-card")).to_have_count(4)
    expect(page.locator("[data-chart=bleu-by-length].js-plotly-plot")).to_have_count(1)
    expect(page.locator("[data-chart=val-bleu].js-plotly-plot")).to_have_count(1)
    expect(page.locator("[data-chart=curve].js-plotly-plot")).to_have_count(3)
    lines = page.eval_on_selector("[data-chart=bleu-by-length]", "gd => gd.data.map(t => t.name)")
    assert sorted(lines) == ["en-de-rnn-additive", "en-de-self-attentive", "en-de-transformer"]
    styles = page.eval_on_selector(
        "[data-chart=bleu-by-length]",
        "gd => gd.data.map(t => [t.line.color, t.line.dash, t.marker.symbol])",
    )
    assert len({s[0] for s in styles}) == len({s[1] for s in styles}) == len(styles)  # told apart
    ticks = page.eval_on_selector("[data-chart=bleu-by-length]", "gd => gd._fullLayout.yaxis.dtick")
    assert float(ticks) in (1, 2, 5, 10, 20, 50)  # round tick values
    assert len(plotly_loads) == 1  # one Plotly bundle for all the page's charts
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


def no_sideways_scroll(page: Page) -> bool:
    return bool(page.evaluate("document.documentElement.scrollWidth <= document.documentElement.clientWidth"))


def test_a_phone_never_scrolls_sideways(page: Page, server_url: str, shoot) -> None:
    page.set_viewport_size({"width": 390, "height": 844})
    open_translate(page, server_url)
    assert no_sideways_scroll(page)  # the header wraps
    translate(page, "The man in the red shirt is cooking dinner for his family.")
    expect(page.locator("#explorer [data-role=grid] .thumb")).to_have_count(6)
    assert no_sideways_scroll(page)  # the layer x head grid scrolls in its own box
    shoot(page, "translate-390")
    page.goto(f"{server_url}/compare?{urlencode({'text': SENTENCE})}")
    page.wait_for_selector("body[data-ready=true]")
    assert no_sideways_scroll(page)
    assert all(page.locator(f"#model-{side}").bounding_box()["width"] > 250 for side in "ab")
    shoot(page, "compare-390")


def test_first_visit_explains_and_translates_at_once(page: Page, server_url: str) -> None:
    page.goto(server_url)
    page.wait_for_selector("body[data-ready=true]")
    expect(page.locator(".intro")).to_contain_text("where it looked")
    expect(page.locator("#translation")).not_to_be_empty()
    wait_drawn(page, "#explorer [data-role=plot-main]")
    expect(page.locator("#explorer [data-role=caption-main]")).to_contain_text("best-aligned head per the card")


def test_changing_the_model_retranslates_and_align_waits(page: Page, server_url: str) -> None:
    open_translate(page, server_url)
    translate(page, SENTENCE)
    held: list[Any] = []
    page.route("**/api/translate", lambda route: held.append(route))
    page.select_option("#model", "en-de-rnn-additive")
    expect(page.locator("#stale")).to_contain_text("en-de-transformer")
    expect(page.locator("#align-btn")).to_be_disabled()  # no French target on a German model...
    expect(page.locator("#copy-link")).to_be_disabled()  # ...and no link to a view not on screen
    assert parse_qs(urlparse(page.url).query)["model"] == [TRANSFORMER]
    page.wait_for_function("() => true")
    assert held, "changing the model sent no new translation"
    with page.expect_response("**/api/translate") as answer:
        for route in held:
            route.continue_()
        page.unroute("**/api/translate")
    assert answer.value.request.post_data_json["model"] == "en-de-rnn-additive"
    expect(page.locator("#stale")).to_be_hidden()
    expect(page.locator("#align-btn")).to_be_enabled()
    expect(page.locator("#result-meta")).to_contain_text("en-de-rnn-additive")
    assert parse_qs(urlparse(page.url).query)["model"] == ["en-de-rnn-additive"]


def test_each_translation_opens_on_the_best_aligned_head_until_the_user_picks_one(page: Page, server_url: str) -> None:
    """The first view of every new translation is the head the card says aligns best (the caption
    says so), also after the user looked at another model; a head the user picked stays."""
    open_translate(page, server_url)
    layer, head = best_aligned()
    for text in [SENTENCE, "Two dogs play in the snow."]:
        cross = translate(page, text)["attention"]["cross"]
        assert heatmap(page)["z"] == cross[layer][head], text
        expect(page.locator("#explorer [data-role=caption-main]")).to_contain_text(f"layer {layer + 1} · head {head + 1} · best-aligned")
    page.select_option("#explorer [data-role=layer]", "0")
    page.select_option("#explorer [data-role=head]", "0")
    cross = translate(page, SENTENCE)["attention"]["cross"]
    assert heatmap(page)["z"] == cross[0][0]
    expect(page.locator("#explorer [data-role=caption-main]")).not_to_contain_text("best-aligned")


def test_confidence_coverage_and_head_view(page: Page, server_url: str) -> None:
    open_translate(page, server_url)
    response = translate(page, f"{SENTENCE} \u2603")  # a snowman the tokenizer cannot spell
    unknown = response["source_tokens"].count("<unk>")
    assert unknown > 0
    expect(page.locator("#insight [data-role=coverage] .cover.is-unk")).to_have_count(unknown)
    chips = page.locator("#insight [data-role=confidence] .prob")
    expect(chips).to_have_count(len(response["target_tokens"]))
    ps = [float(chips.nth(i).get_attribute("data-p")) for i in range(chips.count())]
    assert ps == pytest.approx([math.exp(lp) for lp in response["target_logprobs"]], abs=1e-5)
    # coverage: column sums of the cross-attention averaged over every layer and head
    matrix = mean_of_all_heads(response["attention"]["cross"])
    covers = page.locator("#insight [data-role=coverage] .cover")
    totals = [float(covers.nth(i).get_attribute("data-total")) for i in range(covers.count())]
    assert totals == pytest.approx([sum(row[k] for row in matrix) for k in range(len(response["source_tokens"]))], abs=1e-5)
    # head view: one line colour per head; hovering a token leaves only its links lit
    card = page.locator("#headview-card")
    expect(card.locator("[data-role=head-toggles] button")).to_have_count(2)
    card.locator(".hv-token[data-side=q][data-index='0']").hover()
    lit = card.locator("line:not(.dim)")
    assert lit.count() > 0 and all(
        lit.nth(i).get_attribute("data-q") == "0" for i in range(lit.count())
    )


def test_anatomy_of_a_step_matches_the_heatmap_row(page: Page, server_url: str, shoot) -> None:
    open_translate(page, server_url)
    translate(page, SENTENCE)
    plot = heatmap(page)
    row = 1
    gd = page.locator("#explorer [data-role=plot-main] .nsewdrag").first
    gd.scroll_into_view_if_needed()
    box = gd.bounding_box()
    with page.expect_response("**/api/translate") as answer:
        page.mouse.click(box["x"] + plot["cell"] / 2, box["y"] + plot["cell"] * (row + 0.5))
    assert answer.value.request.post_data_json["return_scores"] is True
    rows = page.locator("#anatomy-card .anatomy-table tbody tr")
    expect(rows).to_have_count(len(plot["z"][row]))
    weights = [float(rows.nth(i).get_attribute("data-weight")) for i in range(rows.count())]
    assert weights == pytest.approx(plot["z"][row], abs=1e-6)
    scores = torch_free_softmax([float(rows.nth(i).get_attribute("data-score")) for i in range(rows.count())])
    assert scores == pytest.approx(weights, abs=1e-5)
    expect(page.locator("#anatomy-card")).to_contain_text("q · kᵢ / √d_k (d_k = 8")
    expect(page.locator("#anatomy-card .context-bars .ccol")).to_have_count(8)  # d_k = 16 / 2 heads
    shoot(page, "anatomy")


def torch_free_softmax(xs: list[float]) -> list[float]:
    top = max(xs)
    exps = [math.exp(x - top) for x in xs]
    return [e / sum(exps) for e in exps]


def test_beam_tree_and_what_if(page: Page, server_url: str, shoot) -> None:
    open_translate(page, server_url)
    response = translate(page, SENTENCE, beam=3)
    tree = response["beam"]
    card = page.locator("#beam-card")
    expect(card.locator("[data-role=tree-main] .node")).to_have_count(len(tree["nodes"]))
    expect(card.locator("[data-role=tree-main] .node.best")).to_have_count(len(tree["best"]))
    # a node: the attention of that partial hypothesis
    second = tree["best"][2]
    with page.expect_response("**/api/align") as answer:
        card.locator(f"[data-role=tree-main] .node[data-id='{second}']").click()
    aligned = inline_attention(origin_of(page.url), answer.value.json())
    wait_drawn(page, "#beam-card [data-role=beam-plot]")
    partial = heatmap(page, "#beam-card [data-role=beam-plot]")
    layer, head = best_aligned()
    rows = len(aligned["target_tokens"]) - 1  # the path's own tokens, not the </s> align adds
    assert partial["z"] == aligned["attention"]["cross"][layer][head][:rows]
    assert partial["y"] == aligned["target_tokens"][:rows]
    # two beam sizes side by side
    card.locator("[data-role=beam-other]").fill("1")
    card.locator("[data-role=beam-compare]").click()
    expect(card.locator("[data-role=tree-other] .node.best")).not_to_have_count(0)
    shoot(page, "beam")
    # continue from the node: a what-if with that prefix
    path = page.locator("#beam-card [data-role=beam-plot]").get_attribute("data-path")
    with page.expect_response("**/api/translate") as answer:
        card.locator("[data-role=beam-continue]").click()
    assert answer.value.request.post_data_json["prefix"] == path
    assert answer.value.json()["forced_tokens"] == rows
    # what-if: another token at position 1 changes the translation, the original stays in view
    with page.expect_response("**/api/translate") as first:
        page.locator("#whatif-original [data-role=original-back]").click()
    original = inline_attention(origin_of(page.url), first.value.json())
    page.locator("#insight [data-role=confidence] .prob").nth(0).click()
    choice = page.locator("#whatif .chip.alt:not([disabled])[data-token^='▁']").first  # a whole word
    token = choice.get_attribute("data-token")
    with page.expect_response("**/api/translate") as answer:
        choice.click()
    changed = inline_attention(origin_of(page.url), answer.value.json())
    assert changed["target_tokens"][0] == token != original["target_tokens"][0]
    assert changed["forced_tokens"] == 1
    expect(page.locator("#translation")).to_have_text(changed["translation"] or "(empty translation)")
    expect(page.locator("#whatif-original [data-role=original-text]")).to_have_text(original["translation"])
    shoot(page, "what-if")
