"""A page opened while the server still loads its models: an amber "loading N of M models", no
empty model list, and the page fills in on its own once the models are there (no reload).

The server here holds its loading at a gate the test opens: every folder after the first waits
while a file exists (a wrapper patches the registry's loader in the server's own process), so
"the page was opened before ready" is a fact, not a race. The same server then shows the
explorer's default views: a head trained on reading rows, and a model without alignment numbers."""

from __future__ import annotations

import html
import json
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect

from attnscope.testing import free_port
from tests.browser.conftest import REPO, PageWatch, inline_attention

pytestmark = pytest.mark.browser

SENTENCE = "A man is riding a bicycle."
READING = (0, 1)  # the head the card says was trained on reading rows
WRAPPER = '''
import sys, time
from pathlib import Path
sys.path.insert(0, {repo!r})
import attnscope.engine.registry as registry

gate = Path({gate!r})
original = registry.load_model_folder
started = []


def gated(folder, *args, **kwargs):
    started.append(folder)
    while len(started) > 1 and gate.exists():  # the first folder loads, the others wait
        time.sleep(0.05)
    return original(folder, *args, **kwargs)


registry.load_model_folder = gated
from attnscope.cli import main
sys.exit(main(sys.argv[1:]))
'''


def ready_json(url: str) -> dict[str, Any]:
    """/api/ready's JSON, which it also sends with the 503 while loading."""
    try:
        with urllib.request.urlopen(f"{url}/api/ready", timeout=5) as response:
            return dict(json.load(response))
    except urllib.error.HTTPError as err:
        return dict(json.loads(err.read()))


@dataclass
class GatedServer:
    url: str
    gate: Path

    def release(self) -> None:
        self.gate.unlink(missing_ok=True)


def models_for(root: Path, browser_models_dir: Path) -> Path:
    """The browser tests' models, the Transformer's card saying head READING was trained on
    reading rows (with its F1 on those), and a copy of it whose card has no alignment numbers."""
    models = root / "models"
    shutil.copytree(browser_models_dir, models)
    plain = models / "en-de-transformer-plain"
    shutil.copytree(models / "en-de-transformer", plain)
    card = json.loads((plain / "card.json").read_text())
    for key in ("alignment", "ablation"):
        card.pop(key, None)
    (plain / "card.json").write_text(json.dumps(card))
    path = models / "en-de-transformer" / "card.json"
    card = json.loads(path.read_text())
    layer, head = READING
    card["training"]["alignment_supervision"] = {"layer": layer, "head": head, "rows": "reads", "weight": 1.0}
    reads = [[0.1, 0.1], [0.1, 0.1]]
    reads[layer][head] = 0.95
    card["alignment_reads"] = {"split": "test2016", "f1": reads}
    path.write_text(json.dumps(card))
    return models


@pytest.fixture(scope="module")
def gated(browser_models_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatedServer]:
    root = tmp_path_factory.mktemp("gated")
    models = models_for(root, browser_models_dir)
    gate = root / "gate"
    gate.touch()
    wrapper = root / "serve.py"
    wrapper.write_text(WRAPPER.format(repo=str(REPO), gate=str(gate)))
    port = free_port()
    log = root / "server.log"
    command = [sys.executable, str(wrapper), "serve", "--host", "127.0.0.1", "--port", str(port),
               "--models-dir", str(models), "--only-models-dir", "--device", "cpu", "--workers", "1"]  # fmt: skip
    with log.open("wb") as sink:
        process = subprocess.Popen(command, cwd=REPO, stdout=sink, stderr=subprocess.STDOUT)
    server = GatedServer(f"http://127.0.0.1:{port}", gate)
    try:
        deadline = time.monotonic() + 120
        while True:  # up, the first folder loaded, the rest held at the gate
            try:
                if ready_json(server.url).get("loaded") == 1:
                    break
            except (OSError, ValueError):
                pass
            assert process.poll() is None, f"the server exited:\n{log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"the server did not start:\n{log.read_text()[-3000:]}"
            time.sleep(0.1)
        yield server
    finally:
        server.release()
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture
def gated_page(browser: Browser, gated: GatedServer) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    page.set_default_timeout(20_000)
    watch = PageWatch(page, gated.url)
    yield page
    context.close()
    assert not watch.errors, f"the page raised: {watch.errors}"
    assert not watch.foreign, f"the page fetched from elsewhere: {watch.foreign}"


def test_a_page_opened_while_models_load_says_so_and_fills_in_without_reload(gated_page: Page, gated: GatedServer, shoot) -> None:  # type: ignore[no-untyped-def]
    page = gated_page
    state = ready_json(gated.url)
    assert state["status"] == "loading" and state["loaded"] == 1 and state["total"] == 5 and state["models"] == 1
    page.goto(gated.url)
    health = page.locator("#health")
    expect(health).to_have_text("loading 1 of 5 models")
    expect(health).to_have_attribute("data-state", "loading")  # amber, not the green "ok"
    expect(page.locator("#model option")).to_have_text(["loading models… (1 of 5)"])
    heads = page.locator("#heads-card [data-role=heads-list]")
    expect(heads).to_contain_text("once the models have loaded")
    expect(heads).not_to_contain_text("no cross-attention heads")
    expect(page.locator("body")).not_to_have_attribute("data-ready", "true")
    shoot(page, "loading")
    page.evaluate("window.__sameDocument = true")  # gone if the page reloads
    models_page = page.context.new_page()
    models_page.goto(f"{gated.url}/models")
    expect(models_page.locator("#health")).to_have_text("loading 1 of 5 models")
    expect(models_page.locator("#no-models")).to_be_hidden()  # not "no models found" while loading
    gated.release()
    expect(page.locator("body")).to_have_attribute("data-ready", "true", timeout=60_000)
    expect(health).to_have_text("ok · cpu · 5 models")
    expect(health).to_have_attribute("data-state", "ok")
    expect(page.locator("#translation")).not_to_be_empty()  # the first visit's example, translated
    assert page.evaluate("window.__sameDocument") is True
    assert ready_json(gated.url) == {"status": "ready", "models": 5, "unavailable": 0, "loaded": 5, "total": 5}
    # the cards, missing from a page rendered while loading, were fetched: F1 on the heads
    page.select_option("#model", "en-de-transformer")
    expect(page.locator("#heads-card [data-head='1:1']")).to_contain_text("L2 · H2 · F1")
    shoot(page, "loaded")
    expect(models_page.locator(".model-card")).to_have_count(5, timeout=60_000)  # drawn with the cards
    expect(models_page.locator("#health")).to_have_text("ok · cpu · 5 models")


def plot_rows(page: Page) -> list[str]:
    selector = "#explorer [data-role=plot-main]"
    page.wait_for_function("s => { const gd = document.querySelector(s); return gd && gd.data && gd.data.length }", arg=selector)
    return [html.unescape(t) for t in page.eval_on_selector(selector, "gd => gd.layout.yaxis.ticktext")]


def test_a_head_trained_on_reading_rows_is_labelled_by_the_word_each_step_reads(gated_page: Page, gated: GatedServer) -> None:
    gated.release()
    page = gated_page
    with page.expect_response("**/api/translate") as answer:
        page.goto(f"{gated.url}/?model=en-de-transformer&text={SENTENCE}&beam=2")
    response = inline_attention(gated.url, answer.value.json())
    page.wait_for_selector("body[data-ready=true]")
    caption = page.locator("#explorer [data-role=caption-main]")
    layer, head = READING
    # its F1 on reading rows (0.95) is the card's best: it opens first, rows shifted to line up
    expect(caption).to_contain_text(f"layer {layer + 1} · head {head + 1} · best-aligned head per the card: F1 0.95")
    expect(caption).to_contain_text("rows labelled by the word each step reads")
    assert plot_rows(page) == ["<s>", *response["target_tokens"][:-1]]
    page.select_option("#explorer [data-role=layer]", "1")  # any other head: rows are the words written
    expect(caption).not_to_contain_text("each step reads")
    assert plot_rows(page) == response["target_tokens"]


def test_a_model_without_alignment_numbers_opens_on_the_average_of_heads(gated_page: Page, gated: GatedServer) -> None:
    gated.release()
    page = gated_page
    with page.expect_response("**/api/translate") as answer:
        page.goto(f"{gated.url}/?model=en-de-transformer-plain&text={SENTENCE}&beam=2")
    cross = inline_attention(gated.url, answer.value.json())["attention"]["cross"]
    page.wait_for_selector("body[data-ready=true]")
    caption = page.locator("#explorer [data-role=caption-main]")
    expect(caption).to_contain_text(f"layer {len(cross)} · average of 2 heads · shown first: the model's card has no alignment numbers")
    z = page.eval_on_selector("#explorer [data-role=plot-main]", "gd => gd.data[0].z")
    last = cross[-1]
    mean = [[(a + b) / 2 for a, b in zip(r0, r1, strict=True)] for r0, r1 in zip(*last, strict=True)]
    assert len(z) == len(mean)
    for row, expected in zip(z, mean, strict=True):
        assert row == pytest.approx(expected, abs=1e-6)
