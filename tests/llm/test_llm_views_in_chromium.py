"""The explorer's beam tree and the Compare page with a decoder-only model, in Debian's Chromium, on
one module-scoped server over the tiny imported Llama (its card given an alignment section whose
best head is not the default one) beside a tiny random encoder-decoder Transformer.

Beam tree (``return_beam``, beam 3): the tree draws every node of the answer's tree, its best path
spells the answer's target tokens, and clicking a node of that path draws that partial
hypothesis's target × source attention: the rows of ``/api/align`` teacher-forced on the path
(a path its text does not spell, a lone byte piece, is said so in the caption); a second beam size
draws beside it, and "continue" re-decodes with the node's path as a forced prefix.
Compare (LLM against the Transformer): both panels draw their own target × source heatmap, the
rows labelled with each answer's target tokens and the columns with its source tokens (the
LLM's: the source span of its prompt), and the LLM panel opens on its card's best head."""

from __future__ import annotations

import html
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest

from attnscope.testing import build_tiny_models, in_own_thread, running_server

CHROMIUM = os.environ.get("ATTNSCOPE_CHROMIUM", "/usr/bin/chromium")
LLM = "en-de-llama"  # 3 layers, 6 query heads over 2 key/value heads
SENTENCE = "A man is riding a bicycle."
BEST = (1, 4)  # 0-based (layer, head) of the card's best-aligned head: not the default view
F1 = [[0.1 * (layer + 1) + 0.01 * head for head in range(6)] for layer in range(3)]
F1[BEST[0]][BEST[1]] = 0.9


def alignment_card() -> dict[str, Any]:
    """Every key ``attnscope evaluate --alignment`` writes, over the Llama's 3 × 6 query heads."""
    scores = {"precision": 0.5, "recall": 0.5, "f1": 0.5, "aer": 0.5}
    return {"split": "test2016", "f1": F1, "aer": [[1 - v for v in row] for row in F1], "precision": F1, "recall": F1,
            "per_layer": [scores] * 3, "average_of_heads": scores, "diagonal": scores,
            "best_head": {"layer": BEST[0], "head": BEST[1], "f1": 0.9},
            "worst_head": {"layer": 0, "head": 0, "f1": 0.1}}  # fmt: skip


@pytest.fixture(scope="module")
def mixed(llm_models: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("llm-views")
    models = root / "models"
    shutil.copytree(llm_models / LLM, models / LLM)
    card = json.loads((models / LLM / "card.json").read_text())
    (models / LLM / "card.json").write_text(json.dumps({**card, "alignment": alignment_card()}))
    build_tiny_models(models, kinds=[("transformer", "transformer", None)])
    with running_server(models, root / "server.log") as url:
        yield url


def drive(body: Any) -> None:
    """``body(page)`` in a fresh Chromium page (1200 × 1000), failing on any page error."""
    from playwright.sync_api import sync_playwright

    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail("the page test needs Chromium (apt-get install chromium, or set ATTNSCOPE_CHROMIUM)", pytrace=False)

    def run() -> None:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
            page = browser.new_page(viewport={"width": 1200, "height": 1000})
            page.set_default_timeout(60_000)
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            try:
                body(page)
            finally:
                browser.close()
            assert not errors, errors

    in_own_thread(run)


def drawn(page: Any, selector: str) -> dict[str, Any]:
    """The heatmap at ``selector`` once drawn: its matrix and tick labels, as Plotly holds them."""
    page.wait_for_function("s => document.querySelector(s)?.data?.length > 0", arg=selector)
    return page.eval_on_selector(selector, "gd => ({z: gd.data[0].z, x: gd.layout.xaxis.ticktext, y: gd.layout.yaxis.ticktext})")


def labels(page: Any, tokens: list[str]) -> list[str]:
    """The axis labels of ``tokens``: byte pieces made readable (pieces.js, tested on its own in
    tests/browser/test_byte_pieces.py), escaped for Plotly's ticktext."""
    shown = page.evaluate("""t => import("/static/js/pieces.js").then(m => m.readablePieces(t))""", tokens)
    return [html.escape(t, quote=False) for t in shown]


def same_labels(shown: list[str], wanted: list[str]) -> bool:
    """The drawn tick labels are ``wanted``, a long one cut with "…" as the heatmap cuts it."""
    return len(shown) == len(wanted) and all(s == w or (s.endswith("…") and w.startswith(s[:-1]))
                                             for s, w in zip(shown, wanted, strict=True))  # fmt: skip


def post(page: Any, route: str, body: dict[str, Any]) -> dict[str, Any]:
    """The page's own server's answer (inline attention) to ``body``."""
    answer: dict[str, Any] = page.evaluate(
        """([route, body]) => fetch(route, {method: 'POST', headers: {'Content-Type': 'application/json'},
                                             body: JSON.stringify(body)}).then(r => r.json())""",
        [route, body],
    )
    return answer


def test_the_beam_tree_of_an_llm(mixed: str) -> None:
    from playwright.sync_api import expect

    def body(page: Any) -> None:
        page.goto(f"{mixed}/?model={LLM}&text=")
        page.wait_for_function(f"() => document.querySelector('#model').value === '{LLM}'")
        page.fill("#beam", "3")
        page.fill("#text", SENTENCE)
        with page.expect_response("**/api/translate") as answer:
            page.press("#text", "Enter")
        response = answer.value.json()
        assert answer.value.status == 200, response
        tree = response["beam"]
        assert tree and tree["best"], "return_beam gave no tree"
        card = page.locator("#beam-card")
        expect(card.locator("[data-role=tree-main] .node")).to_have_count(len(tree["nodes"]))
        expect(card.locator("[data-role=tree-main] .node.best")).to_have_count(len(tree["best"]))
        nodes = {n["id"]: n for n in tree["nodes"]}
        path = [nodes[i]["token"] for i in tree["best"][1:]]  # the root plays <s>
        assert path[: len(response["target_tokens"])] == response["target_tokens"], (path, response["target_tokens"])
        # byte pieces of whole characters are sent as those characters, a lone byte as it is
        spelled = page.evaluate("""p => import("/static/js/whatif.js").then(m => m.piecesToText(p))""",
                                ["▁gr", "<0xC3>", "<0xBC>", "n", "▁", "<0xA5>"])  # fmt: skip
        assert spelled == "grün <0xA5>"
        # a node of the best path: the attention of that partial hypothesis, teacher-forced
        exact = 0
        for k in (1, 2):
            with page.expect_response("**/api/align") as aligned_answer:
                card.locator(f"[data-role=tree-main] .node[data-id='{tree['best'][k]}']").click()
            asked = aligned_answer.value.request.post_data_json
            assert asked["model"] == LLM and asked["text"] == SENTENCE
            expect(card.locator("[data-role=beam-plot]")).to_have_attribute("data-path", asked["target"])
            partial = drawn(page, "#beam-card [data-role=beam-plot]")
            aligned = post(page, "/api/align", {**asked, "attention": ["cross"]})
            rows = len(aligned["target_tokens"]) - 1  # the path's own tokens, not the stop token align adds
            assert same_labels(partial["x"], labels(page, aligned["source_tokens"]))
            assert partial["z"] == aligned["attention"]["cross"][BEST[0]][BEST[1]][:rows]  # the card's best head
            note = card.locator("[data-role=beam-caption]")
            if aligned["target_tokens"][:k] == path[:k]:  # the path's own pieces: its own rows
                exact += 1
                assert rows == k and partial["y"] == labels(page, path[:k])
                expect(note).not_to_contain_text("other pieces")
            else:  # a path its text does not spell (a lone byte): said in the caption
                expect(note).to_contain_text("other pieces than the path's")
        assert exact, "no node of the best path was teacher-forced on its own pieces"
        # two beam sizes side by side
        card.locator("[data-role=beam-other]").fill("1")
        card.locator("[data-role=beam-compare]").click()
        expect(card.locator("[data-role=tree-other] .node.best")).not_to_have_count(0)
        # continue from the first node: a what-if with its prefix, forced as that one token
        first = page.evaluate("""p => import("/static/js/whatif.js").then(m => m.piecesToText(p))""", path[:1])
        with page.expect_response("**/api/align"):
            card.locator(f"[data-role=tree-main] .node[data-id='{tree['best'][1]}']").click()
        expect(card.locator("[data-role=beam-plot]")).to_have_attribute("data-path", first)
        with page.expect_response("**/api/translate") as continued:
            card.locator("[data-role=beam-continue]").click()
        assert continued.value.request.post_data_json["prefix"] == first
        again = continued.value.json()
        assert again["forced_tokens"] == 1 and again["target_tokens"][0] == path[0], again["target_tokens"][:3]

    drive(body)


def test_compare_an_llm_with_an_encoder_decoder(mixed: str) -> None:
    from playwright.sync_api import expect

    def body(page: Any) -> None:
        seen: dict[str, dict[str, Any]] = {}

        def keep(response: Any) -> None:
            if response.url.endswith("/api/translate") and response.request.method == "POST" and response.ok:
                seen[response.request.post_data_json["model"]] = response.json()

        page.on("response", keep)
        page.goto(f"{mixed}/compare?{urlencode({'a': LLM, 'b': 'en-de-transformer', 'text': SENTENCE, 'beam': '2'})}")
        page.wait_for_selector("body[data-ready=true]")
        plots = {side: drawn(page, f"#explorer-{side} [data-role=plot-main]") for side in "ab"}
        for side, model in (("a", LLM), ("b", "en-de-transformer")):
            full = post(page, "/api/translate", {"model": model, "text": SENTENCE, "beam_size": 2, "attention": ["cross"]})
            assert seen[model]["target_tokens"] == full["target_tokens"]
            plot = plots[side]
            assert same_labels(plot["y"], labels(page, full["target_tokens"])), (side, plot["y"])
            assert same_labels(plot["x"], labels(page, full["source_tokens"])), (side, plot["x"])
            cross = full["attention"]["cross"]
            layer, head = BEST if side == "a" else (len(cross) - 1, None)
            if head is not None:
                assert plot["z"] == cross[layer][head]
                expect(page.locator(f"#explorer-{side} [data-role=caption-main]")).to_contain_text(
                    f"layer {layer + 1} · head {head + 1}")
            else:
                assert len(plot["z"]) == len(full["target_tokens"]) and len(plot["z"][0]) == len(full["source_tokens"])
        llm = post(page, "/api/translate", {"model": LLM, "text": SENTENCE, "beam_size": 2})
        s0, s1 = llm["llm"]["source_span"]
        assert same_labels(plots["a"]["x"], labels(page, llm["llm"]["prompt_tokens"][s0:s1]))  # the columns: the prompt's source span

    drive(body)
