"""The Test sets page in Chromium: run a job on uploaded sentences, sort by BLEU, filter by a word,
open a row in the Translate explorer; at 1400 and 390 px the page does not overflow sideways."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from attnscope.testing import TINY_PAIRS

pytestmark = pytest.mark.browser


def run_upload(page: Page, server_url: str) -> None:
    page.goto(f"{server_url}/testsets")
    expect(page.locator("body")).to_have_attribute("data-ready", "true", timeout=60_000)
    page.select_option("#ts-model", "en-de-transformer")
    page.select_option("#ts-split", "upload")
    page.fill("#ts-sources", "\n".join(s for s, _ in TINY_PAIRS))
    page.fill("#ts-references", "\n".join(t for _, t in TINY_PAIRS))
    page.click("#ts-run")
    expect(page.locator("#ts-table tbody tr")).to_have_count(len(TINY_PAIRS), timeout=60_000)


def column(page: Page, key: str) -> list[float]:
    return [float(t) for t in page.locator(f"#ts-table tbody td[data-col={key}]").all_inner_texts()]


def test_sort_filter_and_open_a_row(page: Page, server_url: str) -> None:
    run_upload(page, server_url)
    expect(page.locator("#ts-status")).to_contain_text(f"{len(TINY_PAIRS)} / {len(TINY_PAIRS)} sentences · done")
    page.click("#ts-table button.sort[data-key=chrf]")
    chrf = column(page, "chrf")
    assert chrf == sorted(chrf)
    page.click("#ts-table button.sort[data-key=chrf]")
    assert column(page, "chrf") == sorted(chrf, reverse=True)
    page.fill("#ts-filter", "dogs")
    expect(page.locator("#ts-table tbody tr")).to_have_count(1)
    expect(page.locator("#ts-summary")).to_contain_text(f"1 of {len(TINY_PAIRS)} sentences")
    link = page.locator("#ts-table tbody tr a").first
    source = link.inner_text()
    assert "dogs" in source
    link.click()
    page.wait_for_url("**/?*")
    expect(page.locator("#text")).to_have_value(source)
    assert "model=en-de-transformer" in page.url


def test_narrow_screen_keeps_the_table_inside(page: Page, server_url: str) -> None:
    page.set_viewport_size({"width": 390, "height": 800})
    run_upload(page, server_url)
    overflow = page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")
    assert overflow <= 1


def test_two_models_with_uploaded_alignments(page: Page, server_url: str) -> None:
    """Compare mode: A, B and Δ = B − A columns, sortable; the best head and its AER grid; slices by
    length partition the set; a reload lists the finished jobs under Earlier results."""
    pairs = TINY_PAIRS[:6]
    page.goto(f"{server_url}/testsets")
    expect(page.locator("body")).to_have_attribute("data-ready", "true", timeout=60_000)
    page.select_option("#ts-model", "en-de-transformer")
    page.select_option("#ts-model-b", "en-de-rnn-additive")
    page.select_option("#ts-split", "upload")
    page.fill("#ts-sources", "\n".join(s for s, _ in pairs))
    page.fill("#ts-references", "\n".join(t for _, t in pairs))
    page.fill("#ts-alignments", "\n".join("0-0 1?1" for _ in pairs))
    page.click("#ts-run")
    expect(page.locator("#ts-table tbody tr")).to_have_count(len(pairs), timeout=60_000)
    a, b, delta = column(page, "a_bleu"), column(page, "b_bleu"), column(page, "delta_bleu")
    assert delta == [round(y - x, 2) for x, y in zip(a, b, strict=True)]
    page.click("#ts-table button.sort[data-key=delta_bleu]")
    assert column(page, "delta_bleu") == sorted(delta)
    expect(page.locator("#ts-best")).to_contain_text("chosen on the held-out part")
    expect(page.locator("#ts-heads td[data-best=true]")).to_have_count(1)
    counts = [int(t) for t in page.locator("#ts-slices tbody td[data-col=sentences]").all_inner_texts()]
    assert sum(counts[::2]) == sum(counts[1::2]) == len(pairs)  # A and B columns, each a partition
    page.reload()
    expect(page.locator("body")).to_have_attribute("data-ready", "true", timeout=60_000)
    assert page.locator("#ts-earlier option", has_text="en-de-rnn-additive").count() >= 1
