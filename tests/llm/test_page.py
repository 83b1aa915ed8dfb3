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


def test_the_explorer_translates_with_an_llm_and_draws_rollout(server: str) -> None:
    """The common explorer (/) with a decoder-only model: the cross heatmap has one column per
    source token of the prompt, every method is on, rollout and ALTI+ draw."""
    from playwright.sync_api import sync_playwright

    def drive() -> None:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
            page = browser.new_page(viewport={"width": 1200, "height": 1000})
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(f"{server}/?model=en-de-qwen2")
            page.wait_for_function("() => document.querySelector('#model').value === 'en-de-qwen2'", timeout=60_000)
            page.fill("#text", "Two dogs play.")
            page.fill("#beam", "2")
            page.click("#translate-btn")
            page.wait_for_function("() => !document.querySelector('#explorer-card').hidden || !document.querySelector('#error').hidden",
                                   timeout=60_000)  # fmt: skip
            assert page.is_hidden("#error"), page.inner_text("#error")
            answer = page.evaluate("""() => fetch('/api/translate', {method: 'POST', headers: {'Content-Type': 'application/json'},
                body: JSON.stringify({model: 'en-de-qwen2', text: 'Two dogs play.', beam_size: 2})}).then(r => r.json())""")  # fmt: skip
            assert "source (en)" in page.inner_text("#explorer-card")
            buttons = page.evaluate("() => Object.fromEntries([...document.querySelectorAll('button')]"
                                    ".filter(b => /^(norm|rollout|value zeroing|ALTI\\+)$/.test(b.textContent.trim()))"
                                    ".map(b => [b.textContent.trim(), b.disabled]))")  # fmt: skip
            assert buttons == {"norm": False, "rollout": False, "value zeroing": False, "ALTI+": False}, buttons
            page.click("button:has-text('rollout')")
            page.wait_for_function("() => document.querySelector('#explorer-card').textContent.includes('showing rollout')", timeout=60_000)
            page.click("button:has-text('ALTI+')")
            page.wait_for_function("() => document.querySelector('#explorer-card').textContent.includes('showing ALTI')", timeout=60_000)
            assert page.is_hidden("#error") and not errors, (page.inner_text("#error"), errors)
            assert len(answer["source_tokens"]) == answer["llm"]["source_span"][1] - answer["llm"]["source_span"][0]
            browser.close()

    in_own_thread(drive)


def test_the_models_page_shows_an_llm_card_with_only_the_checks_its_import_made(server: str) -> None:
    """A decoder-only import records the logits' difference (and its prompt's length), not an
    encoder-decoder's attention and greedy checks: the card says what was measured, no
    "undefined" or "±–" in their place."""
    from playwright.sync_api import sync_playwright

    def drive() -> None:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.goto(f"{server}/models")
            page.wait_for_function("() => document.body.innerText.includes('Check (float32)')", timeout=60_000)
            text = page.inner_text("body")
            assert "undefined" not in text and "±–" not in text
            assert "-token prompt" in text and "logits ±" in text
            browser.close()

    in_own_thread(drive)
