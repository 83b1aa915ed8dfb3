"""A 1,000 × 1,000 attention matrix (a thousand-token input) drawn by the page's heatmap in
Chromium: the call returns, the plot holds every row and column, shows a window of them with the
labels legible, and moving the window with the keyboard works."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page

pytestmark = pytest.mark.browser

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
