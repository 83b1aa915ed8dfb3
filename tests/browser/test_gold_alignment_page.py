"""The Models page shows chrF beside BLEU, and a card's gold-alignment scores (written by ``evaluate --alignment-gold`` on a
tiny model and a tiny gold file) beside the published lines, cited as such, and the diagonal baseline."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, expect

from attnscope.explain.gold import evaluate_gold
from attnscope.repository import load_model_folder, write_card
from attnscope.testing import running_server

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def gold_server(tiny_models_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict]]:
    root = tmp_path_factory.mktemp("gold-models")
    folder = shutil.copytree(tiny_models_dir / "en-de-transformer", root / "en-de-transformer")
    gold = tmp_path_factory.mktemp("gold")
    (gold / "test.uc.de").write_text("Ein Mann fährt Fahrrad .\nZwei Hunde spielen .\n", encoding="utf-8")
    (gold / "test.uc.en").write_text("A man rides a bicycle .\nTwo dogs play .\n", encoding="utf-8")
    (gold / "alignment.talp").write_text("1-1 2-2 3-3 4-5 4p4 5-6\n1-1 2-2 3-3 4-4\n", encoding="utf-8")
    loaded = load_model_folder(folder)
    result = evaluate_gold(loaded, gold, name="tiny-gold", methods=False, progress=False)
    bleu = {"test2016": {"cased": 30.0, "lowercase_13a": 31.0}, "test2017": {"cased": 25.0, "lowercase_13a": 26.0}}
    chrf = {"test2016": {"score": 57.25, "signature": "nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no"},
            "test2017": {"score": 50.0, "signature": "nrefs:1", "bleu_same_run": {"cased": 25.02, "lowercase_13a": 26.0}}}
    write_card(folder, {**loaded.card, "alignment_gold": result, "bleu": bleu, "chrf": chrf})
    with running_server(root, tmp_path_factory.mktemp("server") / "server.log") as url:
        yield url, json.loads((folder / "card.json").read_text())["alignment_gold"]


def test_models_page_shows_gold_aer_beside_published_lines(browser: Browser, gold_server: tuple[str, dict]) -> None:
    url, gold = gold_server
    errors: list[str] = []
    for width in (1400, 390):
        context = browser.new_context(viewport={"width": width, "height": 900})
        page = context.new_page()
        page.on("pageerror", lambda err: errors.append(str(err)))
        page.goto(f"{url}/models")
        expect(page.locator("body")).to_have_attribute("data-ready", "true", timeout=60_000)
        table = page.locator("#model-en-de-transformer [data-grid=alignment-gold]")
        expect(table).to_contain_text("tiny-gold, en-de, 2 sentences")
        best = gold["methods"]["weights"]["produces"]["best_head"]
        ours = table.locator("tr[data-kind=ours]").first
        expect(ours).to_contain_text("raw attention weights, step that produces the word: best head")
        expect(ours).to_contain_text(f"{100 * best['aer']:.1f}")
        expect(table.locator("tr[data-kind=baseline]")).to_contain_text(f"{100 * gold['baselines']['diagonal']['aer']:.1f}")
        published = table.locator("tr[data-kind=published]")
        expect(published).to_have_count(6)
        expect(published.nth(0)).to_contain_text("fast_align")
        expect(published.nth(0)).to_contain_text("27.0")
        expect(published.nth(0)).to_contain_text("published:")
        # four lines of ours: best head and best layer average at both reading steps
        expect(table.locator("tr[data-kind=ours]")).to_have_count(4)
        chrf = page.locator("#model-en-de-transformer .bleu-table").first
        expect(chrf.locator("th").nth(3)).to_have_text("chrF")
        expect(chrf.locator("td[data-metric=chrf]")).to_have_text(["57.3", "50.0 †"])  # beside BLEU 30.0 / 31.0
        # scripts/card_chrf.py kept both: the card's BLEU and that of the translations chrF scored
        expect(chrf.locator("td[data-metric=chrf]").nth(1)).to_have_attribute("title", re.compile("cased 25.02, lowercase 26.00"))
        context.close()
        assert not errors, errors
