"""The first paint of a heatmap in Chromium (static/js/heatmap-raster.js): on the Translate page
the matrix's window is painted on a canvas before Plotly lays out its labels, cell by cell in
the colours Plotly then draws, and Plotly's interactive heatmap replaces it (no canvas left over,
hover and labels as before); a redraw (another head) paints over the previous plot the same way."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page

pytestmark = pytest.mark.browser

PLOT = "#explorer [data-role=plot-main]"
# Before the page's scripts: for every raster put into the plot, whether Plotly had drawn there
# yet, and the colour of each visible cell's centre as painted (read at once: it goes soon).
WATCH = """
window.__rasters = [];
new MutationObserver((records) => {
  for (const record of records) for (const node of record.addedNodes) {
    if (!(node instanceof HTMLCanvasElement) || !node.classList.contains("heatmap-raster")) continue;
    const gd = node.parentElement;
    const { left, top, cellWidth, cellHeight, rows, cols } = Object.fromEntries(Object.entries(node.dataset).map(([k, v]) => [k, Number(v)]));
    const ctx = node.getContext("2d");
    const ratio = node.width / parseFloat(node.style.width);
    const cells = [];
    for (let i = 0; i < rows; i++) for (let j = 0; j < cols; j++) {
      const p = ctx.getImageData(Math.round((left + (j + 0.5) * cellWidth) * ratio), Math.round((top + (i + 0.5) * cellHeight) * ratio), 1, 1).data;
      cells.push([i, j, [p[0], p[1], p[2]]]);
    }
    window.__rasters.push({ plotted: Boolean(gd.data), cells, rows, cols });
  }
}).observe(document, { childList: true, subtree: true });
"""


def test_the_heatmap_is_painted_before_plotly_and_replaced_by_it(page: Page, server_url: str) -> None:
    page.add_init_script(WATCH)
    page.goto(f"{server_url}/?model=en-de-transformer&text=A+man+is+riding+a+bicycle.&beam=1&kind=cross&layer=2&head=2")
    page.wait_for_selector("body[data-ready='true']", timeout=60_000)
    page.wait_for_function("s => document.querySelector(s)?.data?.length > 0 && !document.querySelector(s + ' canvas.heatmap-raster')", arg=PLOT)
    first = page.evaluate("window.__rasters[0]")
    assert first["plotted"] is False  # painted before Plotly had drawn anything there
    z = page.eval_on_selector(PLOT, "gd => gd.data[0].z")
    window = page.eval_on_selector(PLOT, "gd => [gd.layout.yaxis.range[0] + 0.5, gd.layout.xaxis.range[1] + 0.5]")
    assert [first["rows"], first["cols"]] == window and first["rows"] <= len(z) and first["cols"] == len(z[0])
    expected = page.evaluate(
        "async (z) => { const { colorOf } = await import('/static/js/heatmap.js');"
        " return z.map((row) => row.map((v) => colorOf(v))) }", z,
    )  # fmt: skip
    for i, j, rgb in first["cells"]:
        assert all(abs(a - b) <= 1 for a, b in zip(rgb, expected[i][j], strict=True)), (i, j, rgb, expected[i][j])
    assert page.eval_on_selector(PLOT, "gd => gd.querySelectorAll('.xtick text').length") >= first["cols"]  # Plotly's labels
    # another head: painted over the plot shown, then Plotly's again, nothing left over
    page.select_option("#explorer [data-role=head]", "0")
    page.wait_for_function("() => window.__rasters.length >= 2")
    page.wait_for_function("s => !document.querySelector(s + ' canvas.heatmap-raster')", arg=PLOT)
    assert page.evaluate("window.__rasters.at(-1).plotted") is True
    assert page.eval_on_selector_all(f"{PLOT} .plot-container", "els => els.length") == 1
