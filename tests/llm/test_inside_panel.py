"""The explorer's "Inside the layers" panel with an imported decoder-only LLM translator, in Debian's
Chromium at 1400 and 390 px, on the session's LLM server (tests/llm/conftest.py): the lens table
has a row per point of the LLM (embed, then attn/ff per layer) and a column per written token, the
attribution grid is layers × query heads with no cross-attention grid, patching two equally long
prompts draws the head grid and a column per prompt token (the source's marked), unequal prompts
show the server's message (and no grids of the earlier pair), and nothing scrolls sideways on a
phone (an untrained LLM writes long runs without spaces)."""

from __future__ import annotations

import os
from pathlib import Path

import httpx
import pytest

from attnscope.testing import in_own_thread
from tests.browser.layout import page_width_settles

CHROMIUM = os.environ.get("ATTNSCOPE_CHROMIUM", "/usr/bin/chromium")
MODEL = "en-de-llama"  # 3 layers, 6 query heads over 2 key/value heads
CLEAN = "A man is riding a bicycle."
SWAPS = ["A dog is riding a bicycle.", "A boy is riding a bicycle.", "A girl is riding a bicycle.",
         "A man is riding a street."]  # fmt: skip


def equally_long(server: str) -> str:
    """A corrupted sentence whose prompt has as many tokens as CLEAN's (the tiny BPE decides)."""
    for corrupted in SWAPS:
        reply = httpx.post(f"{server}/api/patch", json={"model": MODEL, "clean": CLEAN, "corrupted": corrupted,
                                                         "target": "Ein Mann."}, timeout=120)  # fmt: skip
        if reply.status_code == 200:
            return corrupted
    pytest.fail(f"no swap of {CLEAN!r} has a prompt as long: {reply.json()}")


def test_the_inside_panel_with_an_llm_at_1400_and_390_px(server: str, tmp_path: Path) -> None:
    from playwright.sync_api import expect, sync_playwright

    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail("the page test needs Chromium (apt-get install chromium, or set ATTNSCOPE_CHROMIUM)", pytrace=False)
    corrupted = equally_long(server)

    def drive() -> None:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
            for width in (1400, 390):
                page = browser.new_page(viewport={"width": width, "height": 900})
                page.set_default_timeout(60_000)
                errors: list[str] = []
                page.on("pageerror", lambda e, errors=errors: errors.append(str(e)))
                page.goto(f"{server}/?model={MODEL}&text=")
                page.wait_for_function(f"() => document.querySelector('#model').value === '{MODEL}'")
                page.fill("#text", CLEAN)
                page.fill("#beam", "1")
                card = page.locator("#inside-card")
                with page.expect_response("**/api/lens") as answer:
                    card.locator("[data-role=lens-run]").click()
                out = answer.value.json()
                assert answer.value.status == 200, out
                assert out["points"] == ["embed", "1.attn", "1.ff", "2.attn", "2.ff", "3.attn", "3.ff"]
                table = card.locator("[data-role=lens-table]")
                expect(table.locator("tbody tr")).to_have_count(len(out["points"]) + 1)  # + the emergence row
                expect(table.locator("thead th")).to_have_count(len(out["target_tokens"]) + 1)
                expect(card.locator("[data-role=dla-self] tbody td")).to_have_count(3 * 6)
                expect(card.locator("[data-role=dla-cross]")).to_have_count(0)  # no cross-attention
                expect(card.locator("[data-role=lens-out]")).to_contain_text(f"Translation: {out['translation']}")
                if len(out["target_tokens"]) > 1:  # another written token redraws the grid for it
                    card.locator("[data-role=dla-position]").select_option("1")
                    expect(card.locator("[data-role=dla-self] tbody td")).to_have_count(3 * 6)

                card.locator("[data-role=clean]").fill(CLEAN)
                card.locator("[data-role=corrupted]").fill(corrupted)
                with page.expect_response("**/api/patch") as answer:
                    card.locator("[data-role=patch-run]").click()
                grids = answer.value.json()
                assert answer.value.status == 200, grids
                expect(card.locator("[data-role=patch-self] tbody td")).to_have_count(3 * 6)
                expect(card.locator("[data-role=patch-cross]")).to_have_count(0)
                positions = card.locator("[data-role=patch-positions]")
                expect(positions.locator("tbody tr")).to_have_count(3)  # embed, after 1, after 2
                expect(positions.locator("thead th")).to_have_count(len(grids["clean_tokens"]) + 1)
                start, end = grids["source_span"]  # the source's columns among the prompt's are marked
                expect(positions.locator("thead th.inside-source")).to_have_count(end - start)
                expect(card.locator("[data-role=patch-summary]")).to_contain_text("changes log p by")

                card.locator("[data-role=corrupted]").fill(CLEAN + " And two more dogs run.")
                with page.expect_response("**/api/patch"):
                    card.locator("[data-role=patch-run]").click()
                expect(card.locator("[data-role=error]")).to_contain_text("equally long")
                expect(card.locator("[data-role=patch-self]")).to_have_count(0)
                assert page_width_settles(page, width) <= width
                assert not errors, errors
                page.screenshot(path=str(tmp_path / f"inside-llm-{width}.png"), full_page=True)
                page.close()
            browser.close()

    in_own_thread(drive)
