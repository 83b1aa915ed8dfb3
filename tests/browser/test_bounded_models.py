"""Bounded model memory in the pages (``--max-loaded-models 1``, two tiny models): the Models page
card and the model picker say which model is not loaded (it loads on first use)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, Page, expect

from attnscope.testing import TINY_KINDS, build_tiny_models, running_server
from tests.browser.conftest import PageWatch

pytestmark = pytest.mark.browser
LOADED, LISTED = "en-de-rnn-additive", "en-de-transformer"


@pytest.fixture(scope="module")
def bounded_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("bounded") / "models"
    build_tiny_models(root, kinds=[k for k in TINY_KINDS if k[0] in ("transformer", "rnn-additive")])
    with running_server(root, root.parent / "server.log", args=("--max-loaded-models", "1")) as url:
        yield url


@pytest.fixture
def bounded_page(browser: Browser, bounded_url: str) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    page.set_default_timeout(20_000)
    watch = PageWatch(page, bounded_url)
    yield page
    context.close()
    assert not watch.errors and not watch.blocked and not watch.foreign, (watch.errors, watch.blocked, watch.foreign)


def test_models_page_and_picker_show_the_not_loaded_model(bounded_page: Page, bounded_url: str) -> None:
    page = bounded_page
    page.goto(f"{bounded_url}/models")
    expect(page.locator(f"#model-{LISTED} .model-state")).to_have_text("State: not loaded (loads on first use)")
    expect(page.locator(f"#model-{LOADED} .model-state")).to_have_count(0)
    page.goto(f"{bounded_url}/")
    expect(page.locator(f'#model option[value="{LISTED}"]')).to_contain_text("not loaded")
    expect(page.locator(f'#model option[value="{LOADED}"]')).not_to_contain_text("not loaded")
