"""The /llm page in Debian's Chromium: it opens on the target × source view of the answer, one
row per output token and one column per source token, and switches to the full causal matrix."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from attnscope.testing import in_own_thread

CHROMIUM = os.environ.get("ATTNSCOPE_CHROMIUM", "/usr/bin/chromium")


def test_the_page_shows_target_by_source_then_the_full_matrix(server: str, tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail("the page test needs Chromium (apt-get install chromium, or set ATTNSCOPE_CHROMIUM)", pytrace=False)

    def drive() -> None:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
            page = browser.new_page(viewport={"width": 1200, "height": 900})
            page.goto(f"{server}/llm")
            page.wait_for_function("sel => document.querySelector(sel).value !== ''", arg="#llm-model")
            page.select_option("#llm-model", "en-de-qwen2")
            assert "{source}" in page.input_value("#llm-template")
            page.fill("#llm-text", "<script>alert(1)</script> A dog.")
            page.click("#llm-go")
            errors: list[str] = []
            page.on("console", lambda m: errors.append(m.text))
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.wait_for_function(
                "([plot, box]) => document.querySelector(plot) || !document.querySelector(box).hidden",
                arg=["#llm-plot .main-svg", "#llm-error"], timeout=60_000,
            )
            assert page.is_hidden("#llm-error"), (page.inner_text("#llm-error"), errors)
            page.wait_for_selector("#llm-plot .main-svg", timeout=30_000)
            assert page.input_value("#llm-view") == "target_source"
            assert "outside the source" in page.inner_text("#llm-note")
            z = page.evaluate("id => document.getElementById(id).data[0].z", "llm-plot")
            answer = page.evaluate("url => fetch(url).then(r => r.json())", "/api/llm/models")
            assert answer["models"] and len(z) >= 1
            source_columns = len(z[0])
            page.select_option("#llm-view", "full")
            page.wait_for_function("id => document.getElementById(id).textContent.includes('attention sink')", arg="llm-note")
            full = page.evaluate("id => document.getElementById(id).data[0].z", "llm-plot")
            assert len(full) == len(full[0]) > source_columns + len(z)  # prompt + output - 1 positions
            assert page.evaluate("sel => document.querySelectorAll(sel).length", "script[src*=alert]") == 0
            page.screenshot(path=str(tmp_path / "llm.png"))
            browser.close()

    in_own_thread(drive)
