"""The explorer's layer × head grid with the card's numbers: each head's word-alignment F1
beside its entropy, a table of heads sorted by entropy, F1 or the BLEU change with the head off,
and what a model whose card has no such numbers shows. One model's ablation is written by the
real ``attnscope evaluate --ablate --update-card``, so the pages read the shape the CLI writes."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Locator, Page, expect

from attnscope.cli import main
from attnscope.testing import TINY_PAIRS, running_server
from tests.browser.layout import page_width_settles

pytestmark = pytest.mark.browser

ABLATED = "en-de-transformer-ablated"  # a copy of the tiny Transformer: ablation, no alignment
READS = "en-de-transformer-reads"  # a copy whose head L1H0 was trained on the rows that read each word
READS_F1 = [[0.11, 0.12], [0.93, 0.14]]
TABLE = "#explorer [data-role=head-table]"


@pytest.fixture(scope="module")
def models_dir(browser_models_dir: Path, tiny_models_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The browser tests' models plus ABLATED, whose card `attnscope evaluate --ablate` wrote."""
    root = tmp_path_factory.mktemp("heads") / "models"
    shutil.copytree(browser_models_dir, root)
    shutil.copytree(tiny_models_dir / "en-de-transformer", root / ABLATED)
    corpus = tmp_path_factory.mktemp("heads-corpus")
    for side, lang in enumerate(("en", "de")):
        (corpus / f"test_2016_flickr.{lang}").write_text("".join(p[side] + "\n" for p in TINY_PAIRS))
    args = ["evaluate", str(root / ABLATED), "--data-dir", str(corpus), "--ablate", "--beam", "1", "--update-card"]
    assert main(args) == 0
    shutil.copytree(browser_models_dir / "en-de-transformer", root / READS)
    reads = card(root, READS)
    reads["training"] = {**(reads.get("training") or {}), "alignment_supervision": {"layer": 1, "head": 0, "rows": "reads"}}
    reads["alignment_reads"] = {**reads["alignment"], "f1": READS_F1, "best_head": {"layer": 1, "head": 0, "f1": 0.93}}
    (root / READS / "card.json").write_text(json.dumps(reads))
    return root


@pytest.fixture(scope="module")
def server_url(models_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Overrides the session server for this module: the page fixture then opens this one."""
    with running_server(models_dir, tmp_path_factory.mktemp("heads-server") / "server.log") as url:
        yield url


def explore(page: Page, server_url: str, model: str) -> None:
    """Open the Translate page with `model` and translate a sentence (greedy)."""
    page.goto(f"{server_url}/?text=")
    page.wait_for_selector("body[data-ready=true]")
    page.select_option("#model", model)
    page.fill("#beam", "1")
    page.fill("#text", "A man is riding a bicycle.")
    with page.expect_response("**/api/translate"):
        page.press("#text", "Enter")
    expect(page.locator("#explorer-card")).to_be_visible()
    expect(page.locator("#explorer [data-role=caption-main]")).not_to_be_empty()


def rows(page: Page) -> list[dict[str, Any]]:
    """The head table's rows, top to bottom: layer, head and the numbers shown."""
    return page.eval_on_selector_all(
        f"{TABLE} tbody tr",
        "trs => trs.map(tr => ({layer: +tr.dataset.layer, head: +tr.dataset.head, entropy: +tr.dataset.entropy,"
        " cells: [...tr.children].map(c => c.textContent)}))",
    )


def sort_button(page: Page, key: str) -> Locator:
    return page.locator(f"{TABLE} [data-sort={key}]")


def signed(value: float) -> str:
    """A BLEU change as the page writes it: "+0.25", "−5.00" (a real minus), "0.00"."""
    text = f"{abs(value):.2f}"
    return text if float(text) == 0 else ("−" if value < 0 else "+") + text


def card(models_dir: Path, model: str) -> dict[str, Any]:
    return json.loads((models_dir / model / "card.json").read_text())


def test_head_grid_shows_each_heads_f1_beside_its_entropy_and_sorts_by_it(page: Page, server_url: str, models_dir: Path, shoot) -> None:  # type: ignore[no-untyped-def]
    crafted = card(models_dir, "en-de-transformer")  # alignment and ablation as in conftest.py
    f1_grid, ablation = crafted["alignment"]["f1"], crafted["ablation"]
    explore(page, server_url, "en-de-transformer")
    for layer, row in enumerate(f1_grid):  # every thumbnail: its entropy and the card's F1
        for head, f1 in enumerate(row):
            thumb = page.locator(f"#explorer .thumb[data-layer='{layer}'][data-head='{head}']")
            expect(thumb).to_have_attribute("data-f1", str(f1))
            expect(thumb.locator(".thumb-f1 .f1")).to_have_text(f"{f1:.2f}")
            expect(thumb.locator(".bits")).to_have_text(f"{float(thumb.get_attribute('data-entropy')):.2f}")
    for layer, per_layer in enumerate(crafted["alignment"]["per_layer"]):  # a layer's average of heads
        expect(page.locator(f"#explorer .thumb[data-layer='{layer}'][data-head='avg']")).to_have_attribute("data-f1", str(per_layer["f1"]))
    # the table starts sharpest first, and every row shows entropy, F1 and the BLEU change
    expect(page.locator(f"{TABLE} tbody tr")).to_have_count(4)
    shown = rows(page)
    assert [r["entropy"] for r in shown] == sorted(r["entropy"] for r in shown)
    expect(page.locator(f"{TABLE} th[aria-sort=ascending]")).to_contain_text("Entropy")
    for r in shown:
        without = ablation["bleu_without_head"]["cross"][r["layer"]][r["head"]]
        assert r["cells"] == [
            f"L{r['layer'] + 1} · H{r['head'] + 1}",
            f"{r['entropy']:.2f}",
            f"{f1_grid[r['layer']][r['head']]:.2f}",
            signed(without - ablation["baseline"]),
        ]
    # sorting by F1: best first, then (keyboard: Enter on the focused header) worst first
    sort_button(page, "f1").click()
    by_f1 = sorted(((f1, layer, head) for layer, row in enumerate(f1_grid) for head, f1 in enumerate(row)), reverse=True)
    assert [(r["layer"], r["head"]) for r in rows(page)] == [(la, h) for _, la, h in by_f1]
    expect(page.locator(f"{TABLE} th[aria-sort=descending]")).to_contain_text("F1")
    expect(sort_button(page, "f1")).to_be_focused()
    page.keyboard.press("Enter")
    assert [(r["layer"], r["head"]) for r in rows(page)] == [(la, h) for _, la, h in reversed(by_f1)]
    expect(page.locator(f"{TABLE} th[aria-sort=ascending]")).to_contain_text("F1")
    # sorting by the BLEU change puts the head whose loss costs most first
    sort_button(page, "delta").click()
    assert (rows(page)[0]["layer"], rows(page)[0]["head"]) == (1, 0)  # 25.0 against 30.0
    # a row opens its head (keyboard: Enter, and the focus stays on the row), the caption gives its F1
    row_button = page.locator(f"{TABLE} tbody tr[data-layer='1'][data-head='1'] button")
    row_button.focus()
    page.keyboard.press("Enter")
    expect(row_button).to_be_focused()
    caption = page.locator("#explorer [data-role=caption-main]")
    expect(caption).to_contain_text("layer 2 · head 2")
    expect(caption).to_contain_text("alignment F1 0.88 (test2016, from the card)")
    expect(page.locator(f"{TABLE} tr.selected")).to_have_attribute("data-layer", "1")
    expect(page.locator("#explorer [data-role=count-hint]")).to_contain_text("layer 2 · head 2 here is L1H1 there")
    shoot(page, "explorer-heads-1400")
    page.set_viewport_size({"width": 390, "height": 844})
    expect(page.locator(f"{TABLE} tbody tr")).to_have_count(4)
    assert page_width_settles(page, 390) <= 390  # no sideways scroll on a phone, once the charts have resized
    shoot(page, "explorer-heads-390")
    # other kinds have no alignment F1: the column goes, a note says why
    page.locator("#explorer [data-role=kind] button", has_text="Encoder self").click()
    expect(page.locator("#explorer [data-role=heads-note]")).to_contain_text("cross-attention heads only")
    expect(sort_button(page, "f1")).to_have_count(0)
    expect(page.locator("#explorer .thumb[data-f1]")).to_have_count(0)
    expect(page.locator(f"{TABLE} th[aria-sort=ascending]")).to_contain_text("Entropy")  # F1 sort falls back


def test_a_card_without_alignment_says_f1_not_measured_and_shows_the_clis_ablation(page: Page, server_url: str, models_dir: Path) -> None:
    written = card(models_dir, ABLATED)
    ablation = written["ablation"]
    assert "alignment" not in written and set(ablation["bleu_without_head"]) == {"cross", "encoder_self", "decoder_self"}
    explore(page, server_url, ABLATED)
    expect(page.locator("#explorer [data-role=heads-note]")).to_contain_text("F1: not measured")
    expect(page.locator("#explorer [data-role=caption-main]")).to_contain_text("alignment F1 not measured")
    expect(sort_button(page, "f1")).to_have_count(0)
    expect(page.locator("#explorer .thumb-f1")).to_have_count(0)
    for r in rows(page):  # the ΔBLEU column is the card's numbers
        delta = ablation["bleu_without_head"]["cross"][r["layer"]][r["head"]] - ablation["baseline"]
        assert r["cells"][-1] == signed(delta)
    # a one-head RNN has no grid: its caption says it
    page.select_option("#model", "en-de-rnn-additive")
    expect(page.locator("#explorer [data-role=caption-main]")).to_contain_text("alignment F1 not measured")
    expect(page.locator("#explorer [data-role=grid-section]")).to_be_hidden()


def test_models_page_draws_the_ablation_grids_the_cli_wrote(page: Page, server_url: str, shoot) -> None:  # type: ignore[no-untyped-def]
    page.goto(f"{server_url}/models")
    expect(page.locator("body")).to_have_attribute("data-ready", "true", timeout=60_000)
    grids = page.locator(f"#model-{ABLATED} [data-grid=ablation]")
    expect(grids.locator("h5")).to_have_text(["Cross", "Encoder self", "Decoder self"])
    for kind in ("cross", "encoder_self", "decoder_self"):
        expect(grids.locator(f"[data-chart=ablation-{kind}] svg").first).to_be_visible()
    expect(page.locator(f"#model-{ABLATED} [data-grid=alignment]")).to_have_count(0)
    grids.scroll_into_view_if_needed()
    shoot(page, "models-ablation-cli")


def test_a_head_trained_on_reading_rows_shows_that_f1_and_its_own_grid(page: Page, server_url: str, models_dir: Path) -> None:
    produced = card(models_dir, READS)["alignment"]["f1"]
    explore(page, server_url, READS)
    for layer, head in ((1, 0), (0, 0), (1, 1)):  # the trained head: its reading-row F1; the others as before
        want = READS_F1[1][0] if (layer, head) == (1, 0) else produced[layer][head]
        expect(page.locator(f"#explorer .thumb[data-layer='{layer}'][data-head='{head}']")).to_have_attribute("data-f1", str(want))
    expect(page.locator("#explorer [data-role=heads-note]")).to_contain_text(
        "Layer 2, head 1 was trained to align on the step that reads each word"
    )
    page.goto(f"{server_url}/models")
    expect(page.locator("body")).to_have_attribute("data-ready", "true", timeout=60_000)
    grid = page.locator(f"#model-{READS} [data-grid=alignment-reads]")
    expect(grid).to_contain_text("on the step that reads them")
    expect(grid).to_contain_text("best head L2 · H1 0.93")  # the card's 0-based L1H0, counted from 1 on the page
    expect(grid.locator("svg").first).to_be_visible()
    expect(page.locator(f"#model-{READS} [data-grid=alignment]")).to_have_count(1)
    expect(page.locator("#model-en-de-transformer [data-grid=alignment-reads]")).to_have_count(0)
