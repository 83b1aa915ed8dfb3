"""A decoder-only model in the views built for encoder-decoders, in a real Chromium (issue 42): the
Translate page's beam tree drawn from an LLM's search (its chosen path is the answer's output, a
picked hypothesis shows its own attention), and Compare with an LLM beside a Transformer (each
panel its own target × source heatmap, the LLM's columns its source's prompt tokens)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
from playwright.sync_api import Browser, Page, Response, expect

from attnscope.testing import running_server
from tests.browser.conftest import PageWatch, inline_attention
from tests.browser.test_pages import open_translate, translate, wait_drawn

pytestmark = pytest.mark.browser

LLM = "en-de-qwen2"
SENTENCE = "Two dogs play in the snow."


@pytest.fixture(scope="module")
def llm_url(browser_models_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The browser suite's models plus a tiny random Qwen2 imported as ``en-de-qwen2``."""
    from attnscope.hf.importer import import_model
    from tests.llm.llm_builders import build

    root = tmp_path_factory.mktemp("llm-views")
    models = root / "models"
    shutil.copytree(browser_models_dir, models)
    import_model(str(build("qwen2", root / "hf")), models / LLM, dtype="float32", pair=("en", "de"))
    with running_server(models, root / "server.log") as url:
        yield url


@pytest.fixture
def llm_page(browser: Browser, llm_url: str) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    page.set_default_timeout(60_000)
    watch = PageWatch(page, llm_url)
    yield page
    context.close()
    assert not watch.errors, f"the page raised: {watch.errors}"
    assert not watch.foreign and not watch.blocked and not watch.dialogs


def test_the_beam_tree_of_an_llm_follows_its_search_and_shows_a_picked_hypothesis(llm_page: Page, llm_url: str) -> None:
    page = llm_page
    open_translate(page, llm_url, model=LLM)
    answer = translate(page, SENTENCE, model=LLM, beam=3)
    beam = answer["beam"]
    assert beam is not None and len(beam["hypotheses"]) >= 1
    card = page.locator("#beam-card")
    expect(card).to_be_visible()
    drawn_best = card.locator("[data-role=tree-main] .node.best")
    expect(drawn_best).to_have_count(len(beam["best"]))
    ids = [int(drawn_best.nth(k).get_attribute("data-id")) for k in range(drawn_best.count())]
    assert ids == beam["best"]
    by_id = {n["id"]: n for n in beam["nodes"]}
    assert [by_id[i]["token"] for i in ids[1:]] == answer["target_tokens"]  # the chosen path is the output
    finished = card.locator("[data-role=tree-main] .hypotheses li")
    expect(finished.first).to_contain_text("chosen")
    # a node picked on the chosen path: its partial hypothesis teacher-forced, its own heatmap
    middle = ids[min(2, len(ids) - 1)]
    with page.expect_response(lambda r: r.url.endswith("/api/align") and r.request.method == "POST") as aligned:
        card.locator(f"[data-role=tree-main] .node[data-id='{middle}']").click()
    forced = inline_attention(llm_url, aligned.value.json())
    expect(card.locator("[data-role=beam-path]")).to_contain_text("Partial hypothesis")
    wait_drawn(page, "#beam-card [data-role=beam-plot]")
    z = page.eval_on_selector("#beam-card [data-role=beam-plot]", "gd => gd.data[0].z")
    source = len(answer["source_tokens"])
    assert len(z[0]) == source == len(forced["source_tokens"])  # columns: the source's prompt tokens
    assert 1 <= len(z) <= len(forced["target_tokens"])


def answers(page: Page) -> dict[tuple[str, str], dict[str, Any]]:
    seen: dict[tuple[str, str], dict[str, Any]] = {}

    def keep(response: Response) -> None:
        route = response.url.rsplit("/", 1)[-1]
        if route in ("translate", "align") and response.request.method == "POST" and response.ok:
            seen[(route, response.request.post_data_json["model"])] = response.json()

    page.on("response", keep)
    return seen


def test_compare_puts_an_llm_beside_a_transformer(llm_page: Page, llm_url: str) -> None:
    page = llm_page
    seen = answers(page)
    models = {"a": LLM, "b": "en-de-transformer"}
    page.goto(f"{llm_url}/compare?{urlencode({**models, 'text': SENTENCE, 'beam': '2'})}")
    page.wait_for_selector("body[data-ready=true]")
    for side, model in models.items():
        selector = f"#explorer-{side} [data-role=plot-main]"
        page.wait_for_function("s => document.querySelector(s)?.data?.length > 0", arg=selector)
        answer = inline_attention(llm_url, seen[("translate", model)])
        drawn = page.eval_on_selector(selector, "gd => ({z: gd.data[0].z, x: gd.layout.xaxis.ticktext})")
        panel = page.locator(f"#panel-{side}")
        expect(panel.locator("[data-role=translation]")).to_have_text(answer["translation"] or "(empty translation)")
        cross = answer["attention"]["cross"]
        assert len(drawn["z"][0]) <= len(cross[0][0][0])  # columns: source tokens (</s> may be hidden)
        assert len(drawn["z"]) >= 1
    llm_answer = seen[("translate", LLM)]
    assert llm_answer["llm"]["source_span"][1] - llm_answer["llm"]["source_span"][0] == len(llm_answer["source_tokens"])
    drawn_llm = page.eval_on_selector("#explorer-a [data-role=plot-main]", "gd => gd.data[0].z")
    assert len(drawn_llm[0]) == len(llm_answer["source_tokens"])  # no </s> column: the prompt has none there
