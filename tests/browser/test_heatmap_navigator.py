"""Finding one's way in a long heatmap, in Chromium: the overview (the whole matrix, shrunk by
block maxima, with the window framed on it; a click moves the window there) and the word search
(a token's row or column brought into the window and outlined), on a 1,000-token matrix and on
the Translate page's explorer with a long input answered on demand."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

pytestmark = pytest.mark.browser

NAV = "#explorer [data-role=nav-main]"
PLOT = "#explorer [data-role=plot-main]"

THOUSAND = """async (n) => {
  const { drawHeatmap } = await import('/static/js/heatmap.js');
  const { attachNavigator, downsample } = await import('/static/js/heatmap-navigator.js');
  const z = Array.from({ length: n }, (_, i) => {
    const row = new Array(n).fill(0.2 / n);
    row[n - 1 - i] += 0.8;  // an anti-diagonal: the overview must keep it
    return row;
  });
  const labels = Array.from({ length: n }, (_, i) => `▁w${i}`);
  const view = { z, rowLabels: labels, colLabels: labels, rowPieces: labels, colPieces: labels,
                 rowTitle: 'target', colTitle: 'source' };
  const box = document.createElement('div');
  box.id = 'nav';
  const gd = document.createElement('div');
  gd.id = 'long-plot';
  document.body.append(box, gd);
  await drawHeatmap(gd, view, { boxWidth: 1000, boxHeight: 800 });
  attachNavigator(box, gd, view);
  const small = downsample(z, 160);
  const anti = small.z.map((row, r) => row[small.cols - 1 - r]);  // the block the anti-diagonal enters
  const canvas = box.querySelector('canvas');
  return { rows: small.rows, cols: small.cols, anti, corner: small.z[0][0],
           canvas: [canvas.width, canvas.height], hidden: box.hidden };
}"""


def y_range(page: Page, selector: str) -> list[float]:
    return page.eval_on_selector(selector, "gd => gd._fullLayout.yaxis.range.slice()")


def x_range(page: Page, selector: str) -> list[float]:
    return page.eval_on_selector(selector, "gd => gd._fullLayout.xaxis.range.slice()")


def test_a_thousand_tokens_get_an_overview_and_a_search(page: Page, server_url: str) -> None:
    page.goto(f"{server_url}/?text=")
    page.wait_for_selector("body[data-ready=true]")
    found = page.evaluate(THOUSAND, 1000)
    assert not found["hidden"] and found["canvas"] == [160, 160] and found["rows"] == found["cols"] == 160
    # Block maxima: the anti-diagonal keeps its full weight in the overview; a block off it, the floor.
    assert min(found["anti"]) > 0.8 and found["corner"] == pytest.approx(0.2 / 1000)
    # Search: the last row comes into the window, outlined.
    page.fill("#nav [data-role=find]", "w999")
    page.press("#nav [data-role=find]", "Enter")
    expect(page.locator("#nav [data-role=find-status]")).to_contain_text("row 1000")
    page.wait_for_function("() => document.getElementById('long-plot')._fullLayout.yaxis.range[0] >= 999")
    shapes = page.eval_on_selector("#long-plot", "gd => gd.layout.shapes.map(s => [s.y0, s.y1])")
    assert shapes == [[998.5, 999.5]]
    # The overview frames the window; a click on its top-left corner takes the window back there.
    frame = page.locator("#nav [data-role=overview-window]")
    assert frame.get_attribute("data-rows").endswith("-999")
    page.click("#nav [data-role=overview]", position={"x": 1, "y": 1})
    page.wait_for_function("() => document.getElementById('long-plot')._fullLayout.yaxis.range[1] <= -0.5")
    assert x_range(page, "#long-plot")[0] == -0.5
    assert frame.get_attribute("data-rows").startswith("0-") and frame.get_attribute("data-cols").startswith("0-")


def test_the_explorer_navigates_a_long_answer(page: Page, server_url: str) -> None:
    words = ["a", "man", "rides", "the", "red", "bicycle", "and", "two", "dogs", "play", "in", "snow"]
    text = " ".join(words[i % len(words)] for i in range(60)) + " girl."
    page.goto(f"{server_url}/?text=")
    page.wait_for_selector("body[data-ready=true]")
    page.select_option("#model", "en-de-transformer")
    page.fill("#beam", "1")
    page.fill("#text", text)
    with page.expect_response("**/api/translate") as answered:
        page.press("#text", "Enter")
    answer = answered.value.json()
    assert answer.get("attention_id"), answer
    page.wait_for_function("s => document.querySelector(s)?.data?.[0]?.z?.length > 0", arg=PLOT)
    page.click("#explorer .seg.kind-encoder_self")  # source × source: long both ways
    expect(page.locator(f"{PLOT}[data-kind=encoder_self]")).to_have_attribute("data-windowed", "true")
    expect(page.locator(NAV)).to_be_visible()
    source = answer["source_tokens"]
    plain = [t.lstrip("▁").lower() for t in source]
    # The last source word, found by typing it: its row comes into the window and is outlined.
    word = plain[-2] if plain[-1] in ("</s>", "") else plain[-1]
    index = plain.index(word)
    assert index > int(page.eval_on_selector(PLOT, "gd => gd._fullLayout.yaxis.range[0]"))  # not yet on screen
    page.fill(f"{NAV} [data-role=find]", word)
    page.click(f"{NAV} [data-role=find-next]")
    expect(page.locator(f"{NAV} [data-role=find-status]")).to_have_text(re.compile(rf"^row {index + 1}: {re.escape(word)} \(1 of \d+\)$"))
    page.wait_for_function(
        "([s, i]) => { const r = document.querySelector(s)._fullLayout.yaxis.range; return r[1] <= i && i <= r[0]; }",
        arg=[PLOT, index],
    )
    # The overview is the whole matrix: a click at its far corner shows the last rows and columns.
    box = page.locator(f"{NAV} [data-role=overview]").bounding_box()
    assert box is not None
    page.click(f"{NAV} [data-role=overview]", position={"x": box["width"] - 1, "y": box["height"] - 1})
    n = len(source)
    page.wait_for_function("([s, n]) => document.querySelector(s)._fullLayout.yaxis.range[0] >= n - 1", arg=[PLOT, n])
    assert x_range(page, PLOT)[1] >= n - 1 and y_range(page, PLOT)[0] >= n - 1
