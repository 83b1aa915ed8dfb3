"""The Test sets page in Chromium: run a job on uploaded sentences, sort by BLEU, filter by a word,
open a row in the Translate explorer; at 1400 and 390 px the page does not overflow sideways."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from playwright.sync_api import Browser, Page, expect

from attnscope.config import Settings
from attnscope.engine import testsets
from attnscope.serving.main import create_app
from attnscope.testing import TINY_PAIRS, free_port, until
from attnscope.translator import Translator

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


@pytest.fixture
def gated_server(tiny_models_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, threading.Event]]:
    """The real app over HTTP (uvicorn on a thread of this process), whose test-set jobs score
    their first batch and then wait for the returned gate: a job is surely still running when the
    page reloads, with no timing involved."""
    gate, real = threading.Event(), testsets.score_batch

    def gated(translator: Translator, batch: testsets.Batch) -> list[dict[str, Any]]:
        if batch.start > 0 and not gate.wait(120):
            raise RuntimeError("the test never opened the gate")
        return real(translator, batch)

    monkeypatch.setattr(testsets, "score_batch", gated)
    settings = Settings(models_dir=tiny_models_dir, testsets_dir=tmp_path / "results", device="cpu", torch_threads=1)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(settings), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, name="gated-server", daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    try:
        until(lambda: _ready(url), "the gated server never became ready", bound_s=120)
        yield url, gate
    finally:
        gate.set()
        server.should_exit = True
        thread.join(60)


def _ready(url: str) -> bool:
    try:
        return httpx.get(f"{url}/api/ready", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def test_a_reload_mid_job_follows_it_to_its_table_and_can_cancel_it(
    browser: Browser, gated_server: tuple[str, threading.Event]
) -> None:
    """Issue 48: jobs survive a page reload and can be cancelled. Each job here has two batches and
    is held after the first, so the reload always lands mid-job: the new page shows the same job's
    progress and Cancel, then its table once it finishes; a second job, cancelled from a reloaded
    page, ends cancelled with no table, and the server keeps no result for it."""
    url, gate = gated_server
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    page.set_default_timeout(60_000)
    errors: list[str] = []
    page.on("pageerror", lambda err: errors.append(str(err)))
    pairs = TINY_PAIRS * 2  # 20 sentences: a batch of 16, then the held one of 4
    status = page.locator("#ts-status")

    def start_job() -> None:
        page.goto(f"{url}/testsets")
        expect(page.locator("body")).to_have_attribute("data-ready", "true")
        page.select_option("#ts-model", "en-de-transformer")
        page.select_option("#ts-split", "upload")
        page.fill("#ts-sources", "\n".join(s for s, _ in pairs))
        page.fill("#ts-references", "\n".join(t for _, t in pairs))
        page.click("#ts-run")
        expect(status).to_have_text("upload on en-de-transformer: 16 / 20 sentences · running")

    def reload_mid_job() -> None:
        page.reload()
        expect(page.locator("body")).to_have_attribute("data-ready", "true")
        expect(status).to_have_text("upload on en-de-transformer: 16 / 20 sentences · running")
        expect(page.locator("#ts-cancel")).to_be_visible()
        expect(page.locator("#ts-run")).to_be_disabled()
        assert page.locator("#ts-progress").evaluate("p => [p.value, p.max]") == [16, 20]

    try:
        start_job()
        reload_mid_job()
        gate.set()
        expect(page.locator("#ts-table tbody tr")).to_have_count(len(pairs))
        expect(status).to_have_text("upload on en-de-transformer: 20 / 20 sentences · done")
        assert page.evaluate("sessionStorage.getItem('attnscope-testset-job')") is None
        finished = {j["id"] for j in httpx.get(f"{url}/api/testsets/jobs").json()["jobs"] if j["state"] == "done"}
        assert len(finished) == 1

        gate.clear()
        start_job()
        reload_mid_job()
        page.click("#ts-cancel")
        expect(status).to_contain_text("· cancelling")
        gate.set()
        expect(status).to_have_text("upload on en-de-transformer: 20 / 20 sentences · cancelled")
        expect(page.locator("#ts-run")).to_be_enabled()
        expect(page.locator("#ts-cancel")).to_be_hidden()
        jobs = httpx.get(f"{url}/api/testsets/jobs").json()["jobs"]
        assert sorted(j["state"] for j in jobs) == ["cancelled", "done"]
        cancelled = next(j for j in jobs if j["state"] == "cancelled")
        assert httpx.get(f"{url}/api/testsets/jobs/{cancelled['id']}/rows").status_code == 409
        assert {j["id"] for j in jobs if j["state"] == "done"} == finished
        assert not errors, errors
    finally:
        context.close()
