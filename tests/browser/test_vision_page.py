"""End-to-end: the Vision page in a real Chromium against the real server (tiny random vision
models, synthetic Fashion-MNIST files): glimpses drawn as nested squares along their path, a
scrubber, class bars, and a caption whose every word has its attention overlay."""

from __future__ import annotations

import base64
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from playwright.sync_api import Page, expect

from attnscope.testing import running_server
from attnscope.vision.images import encode_png
from attnscope.vision.testing import build_tiny_vision_models, write_tiny_fashion_mnist
from tests.browser.layout import page_width_settles

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Overrides the session server for this module: vision models only, synthetic data."""
    root = tmp_path_factory.mktemp("vision-server")
    build_tiny_vision_models(root / "models")
    data = write_tiny_fashion_mnist(root / "fashion-mnist")
    before = os.environ.get("ATTNSCOPE_FASHION_MNIST_DIR")
    os.environ["ATTNSCOPE_FASHION_MNIST_DIR"] = str(data)
    try:
        with running_server(root / "models", root / "server.log") as url:
            yield url
    finally:
        if before is None:
            os.environ.pop("ATTNSCOPE_FASHION_MNIST_DIR", None)
        else:
            os.environ["ATTNSCOPE_FASHION_MNIST_DIR"] = before


def open_vision(page: Page, server_url: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Open the page; return the first glimpses and caption answers it drew."""
    with page.expect_response("**/api/vision/glimpses") as glimpses, page.expect_response("**/api/vision/caption") as caption:
        page.goto(f"{server_url}/vision")
    page.wait_for_selector("body[data-ready=true]")
    return glimpses.value.json(), caption.value.json()


def large_pixels(page: Page) -> dict[str, int]:
    """A checksum of the large attention canvas and its brightest blue value (computed in the page)."""
    return page.eval_on_selector("#sat-large", """c => {
        const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
        let sum = 0, blue = 0;
        for (let i = 0; i < d.length; i++) { sum = (sum * 31 + d[i]) % 1000000007; if (i % 4 === 2) blue = Math.max(blue, d[i]); }
        return {sum, blue};
    }""")


def test_glimpse_path_scrubber_class_bars_and_uploads(page: Page, server_url: str, shoot, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    glimpses, _ = open_vision(page, server_url)
    expect(page.locator("#vision-error")).to_be_hidden()
    assert page.input_value("#ram-model") == "vision-ram-cluttered"  # the RAM comes first
    steps = glimpses["glimpses"]
    assert len(steps) == 3
    view = page.locator("#glimpse-view")
    expect(view.locator("circle.glimpse-dot")).to_have_count(3)
    expect(view.locator("polyline.glimpse-path")).to_have_count(1)
    squares = view.locator("rect.glimpse-square")
    expect(squares).to_have_count(3)
    last = steps[-1]
    for k, side in enumerate(last["scales"]):  # nested squares around the last glimpse
        box = squares.nth(k)
        assert float(box.get_attribute("width")) == pytest.approx(side)
        assert float(box.get_attribute("x")) == pytest.approx(last["x"] - side / 2, abs=1e-3)
        assert float(box.get_attribute("y")) == pytest.approx(last["y"] - side / 2, abs=1e-3)
    assert view.locator("image").get_attribute("href").startswith("data:image/png;base64,")
    expect(page.locator("#glimpse-label")).to_have_text("3 of 3")
    bars = page.locator("#class-probs .bar-row")
    expect(bars).to_have_count(10)
    expect(page.locator("#class-probs .bar-row.best")).to_have_count(1)
    expect(page.locator("#ram-answer")).to_contain_text(f"Answer: {glimpses['prediction']}")
    expect(page.locator("#vm-table tbody tr")).to_have_count(5)  # every model's card, and curves
    expect(page.locator("#vm-table")).to_contain_text("tiny random model for tests")
    page.wait_for_function("() => document.querySelector('#vm-curve-classify').data?.length === 3")
    shoot(page, "vision-1400")

    page.locator("#glimpse-step").fill("0")  # scrub back to the first glimpse
    expect(view.locator("circle.glimpse-dot")).to_have_count(1)
    expect(page.locator("#glimpse-label")).to_have_text("1 of 3")
    first = glimpses["class_probs"][0]
    best = glimpses["classes"][first.index(max(first))]
    expect(page.locator("#class-probs .bar-row.best")).to_have_attribute("data-cls", best)
    assert float(squares.nth(0).get_attribute("x")) == pytest.approx(steps[0]["x"] - 6, abs=1e-3)

    page.set_viewport_size({"width": 390, "height": 900})
    shoot(page, "vision-390")
    assert page_width_settles(page, 390) <= 390  # no sideways scroll on a phone, once the charts have resized
    page.set_viewport_size({"width": 1400, "height": 900})

    bad = tmp_path / "not-a-png.png"  # uploads: a clear error, then a non-square PNG
    bad.write_text("hello")
    page.set_input_files("#ram-upload", str(bad))
    expect(page.locator("#vision-error")).to_contain_text("not a PNG")
    image = np.zeros((90, 120))
    image[20:60, 30:80] = 1
    good = tmp_path / "drawn.png"
    good.write_bytes(base64.b64decode(encode_png(image).split(",", 1)[1]))
    with page.expect_response("**/api/vision/glimpses") as answer:
        page.set_input_files("#ram-upload", str(good))
    assert answer.value.status == 200
    expect(page.locator("#vision-error")).to_be_hidden()
    assert page.locator("#glimpse-view").get_attribute("viewBox") == "0 0 120 90"

    page.click("#ram details summary")  # the drawing pad
    pad = page.locator("#draw-pad").bounding_box()
    assert pad is not None
    page.mouse.move(pad["x"] + 60, pad["y"] + 60)
    page.mouse.down()
    page.mouse.move(pad["x"] + 180, pad["y"] + 180, steps=8)
    page.mouse.up()
    with page.expect_response("**/api/vision/glimpses") as answer:
        page.click("#draw-use")
    assert answer.value.status == 200 and answer.value.json()["width"] == 240
    expect(page.locator("#ram-answer")).not_to_contain_text("true class")


def test_caption_with_per_word_attention_overlays(page: Page, server_url: str) -> None:
    _, caption = open_vision(page, server_url)
    expect(page.locator("nav a[aria-current=page]")).to_have_text("Vision")
    expect(page.locator("nav a[href='/vision']")).to_have_count(1)
    # the model table: a captioner's test BLEU with chrF beside it (the tiny cards' made-up numbers)
    expect(page.locator("#vm-table tr", has_text="vision-sat-scenes")).to_contain_text("BLEU 12.5 · chrF 40.25 · exact match 10")
    tokens = caption["tokens"]
    words = page.locator("#caption-words .word")
    expect(words).to_have_count(len(tokens))
    assert words.all_inner_texts() == tokens
    maps = page.locator("#attention-maps canvas.attention-map")
    expect(maps).to_have_count(len(tokens))
    for i in range(len(tokens)):  # each map drawn from its own word's attention
        assert maps.nth(i).get_attribute("data-word") == tokens[i]
        top = max(max(row) for row in caption["attention"][i])
        assert float(maps.nth(i).get_attribute("data-max")) == pytest.approx(top, abs=1e-4)
    words.nth(min(1, len(tokens) - 1)).hover()
    expect(page.locator("#sat-large")).to_have_attribute("data-word", tokens[min(1, len(tokens) - 1)])
    with_overlay = large_pixels(page)
    page.uncheck("#sat-overlay")
    without = large_pixels(page)
    assert with_overlay != without  # the overlay is drawn on top of the image
    assert without["blue"] > 0  # the image itself is there (its blue channel, untinted)

    with page.expect_response("**/api/vision/caption") as answer:  # the twin without attention
        page.select_option("#sat-model", "vision-noattn-scenes")
    assert answer.value.json()["uses_attention"] is False
    expect(page.locator("#attention-maps .note")).to_contain_text("no attention")


def canvas_reds(page: Page, selector: str) -> list[dict[str, int]]:
    """Per canvas matched: the largest and smallest red value of its pixels (computed in the page)."""
    return page.eval_on_selector_all(selector, """cs => cs.map(c => {
        const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
        let max = 0, min = 255;
        for (let i = 0; i < d.length; i += 4) { max = Math.max(max, d[i]); min = Math.min(min, d[i]); }
        return {max, min};
    })""")


def upload_black_scene(page: Page, tmp_path: Path) -> dict[str, Any]:
    """Caption an all-black scene: each overlay pixel's red is then the overlay's own opacity."""
    black = tmp_path / "black.png"
    black.write_bytes(base64.b64decode(encode_png(np.zeros((84, 84))).split(",", 1)[1]))
    with page.expect_response("**/api/vision/caption") as answer:
        page.set_input_files("#sat-upload", str(black))
    page.wait_for_function("() => document.querySelector('#attention-maps canvas') !== null")
    expect(page.locator("#vision-error")).to_be_hidden()
    return answer.value.json()


def test_caption_overlays_share_one_colour_scale(page: Page, server_url: str, tmp_path: Path, shoot) -> None:  # type: ignore[no-untyped-def]
    _, caption = open_vision(page, server_url)
    caption = upload_black_scene(page, tmp_path)
    rows, cols = caption["grid"]
    attention = np.array(caption["attention"])
    top = max(attention.max(), 2 / (rows * cols))  # the scale's top, said on the page
    scale = page.locator("#sat-scale")
    expect(scale).to_be_visible()
    assert float(scale.get_attribute("data-top")) == pytest.approx(top, abs=1e-5)
    expect(page.locator("#sat-scale-max")).to_have_text(f"{top:.3f}")
    expect(page.locator("#sat-scale-caption")).to_contain_text("one scale for every word")
    maps = page.locator("#attention-maps canvas.attention-map")
    expect(maps).to_have_count(len(caption["tokens"]))
    # On black, a pixel's red is the overlay's opacity: 200 x weight / top, so a word's brightest
    # cell shows its largest weight against the caption's scale, not against its own maximum.
    for i, reds in enumerate(canvas_reds(page, "#attention-maps canvas.attention-map")):
        assert reds["max"] == pytest.approx(200 * attention[i].max() / top, abs=10), f"word {i}"
    shoot(page, "vision-scale")

    with page.expect_response("**/api/vision/caption") as answer:  # no attention: even, so flat and faint
        page.select_option("#sat-model", "vision-noattn-scenes")
    assert answer.value.json()["uses_attention"] is False
    page.wait_for_function("() => document.querySelector('#attention-maps .note') !== null")
    for reds in canvas_reds(page, "#attention-maps canvas.attention-map"):
        assert reds["max"] == pytest.approx(100, abs=3) and reds["max"] - reds["min"] <= 3
    expect(page.locator("#sat-scale-caption")).to_contain_text("twice an even spread")


def test_colour_pngs_and_jpegs_upload(page: Page, server_url: str, tmp_path: Path) -> None:
    from PIL import Image

    open_vision(page, server_url)
    rgb = np.zeros((84, 84, 3), dtype=np.uint8)
    rgb[10:50, 20:60] = (250, 120, 40)  # an orange item on black
    for name, fmt, route, upload in (("item.jpg", "JPEG", "glimpses", "#ram-upload"), ("scene.png", "PNG", "caption", "#sat-upload"),
                                     ("scene.jpeg", "JPEG", "caption", "#sat-upload")):
        path = tmp_path / name
        Image.fromarray(rgb).save(path, format=fmt)
        with page.expect_response(f"**/api/vision/{route}") as answer:
            page.set_input_files(upload, str(path))
        assert answer.value.status == 200, answer.value.text()
        expect(page.locator("#vision-error")).to_be_hidden()
    gif = tmp_path / "anim.gif"  # still unusable: a clear message, not a stack trace
    Image.fromarray(rgb).save(gif, format="GIF")
    with page.expect_response("**/api/vision/glimpses") as answer:
        page.set_input_files("#ram-upload", str(gif))
    assert answer.value.status == 422
    expect(page.locator("#vision-error")).to_contain_text("not a PNG or JPEG")
