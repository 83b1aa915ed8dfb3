"""The Models page with an imported model (#46): its card shows where it came from, its family,
languages, per-stack sizes and conversion checks, without empty BLEU/curve boxes; and the page
asks no analysis the model list says does not exist (no 404 in the console). Served the way a
user serves theirs: the repository's models plus ``--models-dir`` with the import."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect

from attnscope.testing import TINY_KINDS, build_tiny_models, running_server
from tests.browser.conftest import PageWatch

pytest.importorskip("transformers")
sys.path.insert(0, str(Path(__file__).parents[1] / "hf"))
from builders import marian_folder  # noqa: E402

from attnscope.hf.importer import import_model  # noqa: E402

pytestmark = pytest.mark.browser
IMPORTED = "en-fr-marian"


@pytest.fixture(scope="module")
def imported_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("imported")
    build_tiny_models(root / "shipped", kinds=[k for k in TINY_KINDS if k[0] == "transformer"])
    source = marian_folder(root / "source", decoder_heads=6, decoder_ff_dim=112)
    import_model(str(source), root / "mine" / IMPORTED, dtype="float32", pair=("en", "fr"))
    with running_server(root / "shipped", root / "server.log", args=("--models-dir", str(root / "mine"))) as url:
        yield url


@pytest.fixture
def imported_page(browser: Browser, imported_url: str) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    page.set_default_timeout(30_000)
    watch = PageWatch(page, imported_url)
    yield page
    context.close()
    assert not watch.errors and not watch.blocked and not watch.foreign, (watch.errors, watch.blocked, watch.foreign)


def test_imported_card_shows_origin_family_languages_sizes_and_checks(imported_page: Page, imported_url: str) -> None:
    page = imported_page
    failed: list[str] = []
    console: list[str] = []
    page.on("response", lambda r: failed.append(r.url) if r.status >= 400 else None)
    page.on("console", lambda m: console.append(m.text) if m.type == "error" else None)
    asked: list[str] = []
    page.on("request", lambda r: asked.append(r.url) if "/analysis" in r.url else None)
    page.goto(f"{imported_url}/models")
    expect(page.locator("body[data-ready=true]")).to_have_count(1)
    card = page.locator(f"#model-{IMPORTED}")
    facts = card.locator("[data-role=imported]")
    expect(facts).to_contain_text("Imported from")
    expect(facts).to_contain_text("Marian (marian)")
    expect(facts).to_contain_text("en → fr")
    expect(facts).to_contain_text("3 layers × 3 heads, feed-forward 80")  # the encoder
    expect(facts).to_contain_text("2 layers × 6 heads, feed-forward 112")  # the decoder, sized apart
    expect(facts).to_contain_text("greedy 4/4 equal")
    expect(facts).to_contain_text("4 check sentences split as the original")
    expect(card.locator(".bleu-table")).to_have_count(0)
    expect(card).not_to_contain_text("Learning curve")
    section = page.locator("section.pair-section[aria-label='en → fr']")
    expect(section.locator("[data-box]")).to_have_count(0)  # no empty BLEU-by-length / validation boxes
    shipped = page.locator("section.pair-section[aria-label='en → de']")
    expect(shipped.locator("[data-box=bleu-by-length]")).to_have_count(1)  # the shipped models' pair keeps its
    assert not failed and not console, (failed, console)
    assert not asked  # neither model has an analysis, and the cards say so
