"""Byte pieces in the explorer: a byte-fallback model spells 🍕 as <0xF0> <0x9F> <0x8D> <0x95>;
the heatmap labels those "🍕 1/4" … "🍕 4/4", and "🍕" once subwords are merged into words.
Runs its own server over tiny byte-fallback models (the other pages' tests use older ones)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from attnscope.testing import running_server

pytestmark = pytest.mark.browser

PLOT = "#explorer [data-role=plot-main]"


@pytest.fixture(scope="module")
def server_url(byte_models_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Overrides the session server for this module: the page fixture then opens this one."""
    with running_server(byte_models_dir, tmp_path_factory.mktemp("byte-server") / "server.log") as url:
        yield url


def ticks(page: Page) -> list[str]:
    page.wait_for_function("sel => document.querySelector(sel)?.data?.length > 0", arg=PLOT)
    return page.eval_on_selector(PLOT, "gd => [...gd.querySelectorAll('.xtick text')].map(t => t.textContent)")


def test_readable_labels_for_byte_pieces(page: Page, server_url: str) -> None:
    page.goto(server_url)
    labels = page.evaluate(
        """tokens => import("/static/js/pieces.js").then(m => m.readablePieces(tokens))""",
        ["\u2581A", "\u2581", "<0xF0>", "<0x9F>", "<0x8D>", "<0x95>", "<0x31>", "<0x09>", "<0xC3>", "\u2581x", "<0x80>", "</s>"],
    )
    assert labels == [
        "\u2581A", "\u2581", "🍕 1/4", "🍕 2/4", "🍕 3/4", "🍕 4/4", "1", "U+0009",
        "byte C3", "\u2581x", "byte 80", "</s>",
    ]  # fmt: skip


def test_explorer_labels_an_emoji_readably(page: Page, server_url: str, shoot: Any) -> None:
    page.goto(server_url)
    page.wait_for_selector("body[data-ready=true]")
    page.select_option("#model", "en-de-transformer")
    page.fill("#beam", "1")
    page.fill("#text", "A 🍕 for 12 dogs.")
    with page.expect_response("**/api/translate") as answer:
        page.press("#text", "Enter")
    response = answer.value.json()
    assert response["source_tokens"].count("<0xF0>") == 1
    shown = ticks(page)
    assert ["🍕 1/4", "🍕 2/4", "🍕 3/4", "🍕 4/4"] == [t for t in shown if t.startswith("🍕")]
    assert not any(t.startswith("<0x") for t in shown)
    page.check("#explorer [data-role=merge]")
    expect(page.locator("#explorer [data-role=axes-main]")).to_contain_text("words")
    assert ticks(page) == [w["text"] for w in response["source_words"]]
    assert "🍕" in ticks(page) and "12" in ticks(page)
    shoot(page, "byte-pieces-merged")
