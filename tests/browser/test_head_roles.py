"""Head roles from a model's corpus analysis (analysis/heads.json, GET /api/models/{id}/analysis)
in real Chromium: the Models page draws a layer × head grid per attention kind coloured by role,
with the statistics on hover, only for the model that has an analysis; the explorer's head grid
puts each head's role on its thumbnail and follows the attention kind shown."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from attnscope.analysis.summary import summary_document, summary_path, write_summary
from attnscope.testing import running_server

pytestmark = pytest.mark.browser

MODEL = "en-de-transformer"
# [layer][head] roles of the tiny Transformer (2 layers x 2 heads per kind), one of each kind.
ROLES = {
    "cross": [["mixed", "alignment"], ["alignment", "rare-word"]],
    "encoder_self": [["positional-previous", "positional-next"], ["mixed", "sink"]],
    "decoder_self": [["positional-same", "sink"], ["mixed", "mixed"]],
}
SHORT = {"alignment": "align", "positional-previous": "prev", "positional-next": "next", "positional-same": "same",
         "sink": "sink", "rare-word": "rare", "mixed": "mixed"}  # fmt: skip


def head(kind: str, layer: int, h: int) -> dict[str, Any]:
    stats = {f"{name}_mean": 0.1 + 0.01 * (layer * 2 + h) for name in ("entropy", "max_weight", "eos_share", "rare_share")}
    f1 = 0.5 + 0.1 * layer + 0.01 * h if kind == "cross" else None
    return {"kind": kind, "layer": layer, "head": h, "sentences": 40, **stats, "alignment_f1": f1,
            "role": ROLES[kind][layer][h], "role_score": 0.6}  # fmt: skip


@pytest.fixture(scope="module")
def models_dir(browser_models_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The browser tests' models; the Transformer ships an analysis (written by the real writer)."""
    root = tmp_path_factory.mktemp("roles") / "models"
    shutil.copytree(browser_models_dir, root)
    heads = [head(kind, layer, h) for kind in ROLES for layer in range(2) for h in range(2)]
    meta = {"model": f"models/{MODEL}", "corpus": "/data/train.en.gz", "mode": "teacher-forced", "sentences": 40}
    path = summary_path(root / MODEL)
    path.parent.mkdir()
    write_summary(path, summary_document(meta, heads))
    return root


@pytest.fixture(scope="module")
def server_url(models_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Overrides the session server for this module: the page fixture then opens this one."""
    with running_server(models_dir, tmp_path_factory.mktemp("roles-server") / "server.log") as url:
        yield url


def test_the_models_page_draws_roles_per_layer_and_head(page: Page, server_url: str) -> None:
    page.goto(f"{server_url}/models")
    page.wait_for_selector("body[data-ready=true]")
    section = page.locator(f"#model-{MODEL} [data-grid=roles]")
    expect(section).to_be_visible()
    expect(section).to_contain_text("train.en.gz, 40 sentences, teacher-forced")
    for kind, grid in ROLES.items():
        chart = section.locator(f"[data-chart=roles-{kind}]")
        expect(chart.locator(".main-svg").first).to_be_attached()
        trace = chart.evaluate("gd => ({text: gd.data[0].text, hover: gd.data[0].customdata, z: gd.data[0].z})")
        assert trace["text"] == [[SHORT[r] for r in row] for row in grid]
        assert len({z for row in trace["z"] for z in row}) == len({r for row in grid for r in row})  # a colour a role
        assert trace["hover"][0][0].startswith(grid[0][0]) and "entropy (nats) 0.10" in trace["hover"][0][0]
    assert "alignment F1 0.61" in section.locator("[data-chart=roles-cross]").evaluate("gd => gd.data[0].customdata[1][1]")
    legend = section.locator("[data-head-role]").evaluate_all("lis => lis.map(li => li.textContent)")
    assert "alignment: 2" in legend and "sink: 2" in legend and "mixed: 4" in legend
    # The hover shows the statistics: move onto the cross grid's L1 · H2 cell.
    cross = section.locator("[data-chart=roles-cross]")
    cross.scroll_into_view_if_needed()
    box = cross.locator(".nsewdrag").first.bounding_box()
    assert box is not None
    page.mouse.move(box["x"] + box["width"] * 0.75, box["y"] + box["height"] * 0.25)
    expect(cross.locator(".hoverlayer")).to_contain_text("alignment F1 0.51")
    # Models without an analysis show no roles section.
    expect(page.locator("#model-en-de-rnn-additive [data-grid=roles]")).to_be_hidden()


def badges(page: Page) -> dict[str, str]:
    return page.eval_on_selector_all(
        "#explorer [data-role=grid] .thumb .role-badge",
        "bs => Object.fromEntries(bs.map(b => [b.closest('.thumb').dataset.layer + ':' + b.closest('.thumb').dataset.head, b.dataset.headRole]))",
    )


def expected(kind: str) -> dict[str, str]:
    return {f"{layer}:{h}": role for layer, row in enumerate(ROLES[kind]) for h, role in enumerate(row)}


def test_the_explorer_head_grid_shows_each_heads_role(page: Page, server_url: str) -> None:
    page.goto(f"{server_url}/?text=")
    page.wait_for_selector("body[data-ready=true]")
    page.select_option("#model", MODEL)
    page.fill("#beam", "1")
    page.fill("#text", "A man is riding a bicycle.")
    with page.expect_response("**/api/translate"):
        page.press("#text", "Enter")
    expect(page.locator("#explorer [data-role=grid] .thumb .role-badge").first).to_be_visible()
    kind = page.eval_on_selector("#explorer [data-role=kind] [aria-checked=true]", "b => b.dataset.kind")
    assert badges(page) == expected(kind)
    thumb = page.locator("#explorer [data-role=grid] .thumb[data-layer='0'][data-head='1'] .role-badge")
    assert thumb.get_attribute("title").startswith(ROLES[kind][0][1])  # type: ignore[union-attr]
    page.click("#explorer [data-role=kind] [data-kind=encoder_self]")
    page.wait_for_function(
        "() => document.querySelector('#explorer [data-role=grid] .thumb[data-layer=\"0\"][data-head=\"0\"] .role-badge')"
        "?.dataset.headRole === 'positional-previous'"
    )
    assert badges(page) == expected("encoder_self")
    # The "avg" thumbnail of each layer is no head: it has no badge.
    assert page.locator("#explorer [data-role=grid] .thumb.avg .role-badge").count() == 0


def test_the_heads_card_chips_show_each_heads_role(page: Page, server_url: str) -> None:
    """Each chip of the Heads card ("L1 · H2 · F1 …") carries its cross-attention head's role
    as a badge and in its tooltip; a model without an analysis keeps plain chips."""
    page.goto(f"{server_url}/?text=")
    page.wait_for_selector("body[data-ready=true]")
    page.select_option("#model", MODEL)
    chips = page.locator("#heads-card [data-role=heads-list] [data-head]")
    expect(chips.locator(".role-badge")).to_have_count(4)
    roles = chips.evaluate_all("cs => Object.fromEntries(cs.map(c => [c.dataset.head, c.querySelector('.role-badge').dataset.headRole]))")
    assert roles == expected("cross")
    chip = page.locator("#heads-card [data-head='0:1']")
    expect(chip).to_contain_text("L1 · H2")
    expect(chip.locator(".role-badge")).to_have_text(SHORT[ROLES["cross"][0][1]])
    assert "Role over a corpus: alignment" in (chip.get_attribute("title") or "")
    chip.click()  # switching a head off redraws the chips: the roles come back
    expect(page.locator("#heads-card [data-head='0:1'][aria-pressed=true] .role-badge")).to_have_count(1)
    page.select_option("#model", "en-de-rnn-additive")
    expect(chips.first).to_be_visible()
    expect(chips.locator(".role-badge")).to_have_count(0)
