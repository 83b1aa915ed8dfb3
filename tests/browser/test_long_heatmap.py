"""Long inputs on the Translate page in Chromium: a 1,000 × 1,000 attention matrix (a
thousand-token input) drawn by the page's heatmap (the call returns, the plot holds every row and
column and shows a window of them, the keyboard moves it), and the page saying when an input is
longer than anything the model was trained on (its card's training cap)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from attnscope.testing import running_server

pytestmark = pytest.mark.browser
CAPPED = "en-de-transformer-capped"  # a copy whose card says it was trained on pairs of at most 8 tokens


@pytest.fixture(scope="module")
def server_url(browser_models_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Overrides the session server for this module: the browser models plus CAPPED."""
    root = tmp_path_factory.mktemp("long") / "models"
    shutil.copytree(browser_models_dir, root)
    shutil.copytree(browser_models_dir / "en-de-transformer", root / CAPPED)
    card = json.loads((root / CAPPED / "card.json").read_text())
    card["hyperparameters"] = {"training": {"max_train_tokens": 8}}
    (root / CAPPED / "card.json").write_text(json.dumps(card))
    with running_server(root, tmp_path_factory.mktemp("long-server") / "server.log") as url:
        yield url


def translate(page: Page, server_url: str, model: str, text: str) -> None:
    page.goto(f"{server_url}/?text=")
    page.wait_for_selector("body[data-ready=true]")
    page.select_option("#model", model)
    page.fill("#beam", "1")
    page.fill("#text", text)
    with page.expect_response("**/api/translate"):
        page.press("#text", "Enter")
    expect(page.locator("#explorer [data-role=caption-main]")).not_to_be_empty()


def test_an_input_longer_than_the_training_says_so(page: Page, server_url: str) -> None:
    translate(page, server_url, CAPPED, "A man is riding a bicycle down the street.")
    warning = page.locator("#length-warning")
    expect(warning).to_be_visible()
    expect(warning).to_contain_text("never trained on inputs over 8 tokens")
    translate(page, server_url, CAPPED, "A man.")
    expect(warning).to_be_hidden()
    translate(page, server_url, "en-de-transformer", "A man is riding a bicycle down the street.")
    expect(warning).to_be_hidden()  # a card without the number says nothing

DRAW = """async (n) => {
  const { drawHeatmap } = await import('/static/js/heatmap.js');
  const z = Array.from({ length: n }, (_, i) => {
    const row = new Array(n).fill(0.5 / n);
    row[i] += 0.5;
    return row;
  });
  const labels = Array.from({ length: n }, (_, i) => `▁w${i}`);
  const view = { z, rowLabels: labels, colLabels: labels, rowPieces: labels, colPieces: labels,
                 rowTitle: 'target', colTitle: 'source' };
  const gd = document.createElement('div');
  gd.id = 'long-plot';
  document.body.append(gd);
  const shown = await drawHeatmap(gd, view, { boxWidth: 1000, boxHeight: 800 });
  return { ...shown, traceRows: gd.data[0].z.length, windowed: gd.dataset.windowed };
}"""


def test_a_thousand_tokens_are_drawn_as_a_window(page: Page, server_url: str) -> None:
    page.goto(f"{server_url}/?text=")
    page.wait_for_selector("body[data-ready=true]")
    shown = page.evaluate(DRAW, 1000)
    assert shown["rows"] == shown["cols"] == shown["traceRows"] == 1000
    assert shown["windowed"] == "true" and 0 < shown["visibleRows"] < 1000 and 0 < shown["visibleCols"] < 1000
    before = page.eval_on_selector("#long-plot", "gd => gd._fullLayout.yaxis.range.slice()")
    page.focus("#long-plot")
    page.keyboard.press("PageDown")
    page.wait_for_function(
        "top => document.getElementById('long-plot')._fullLayout.yaxis.range[1] > top", arg=before[1]
    )
