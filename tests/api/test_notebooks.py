"""docs/notebooks run top to bottom against this checkout (nbclient, a real kernel), and their
outputs are what they say: the translation, the shapes, the widgets, the tables; the first
notebook's exported heatmap opens in Chromium with the answer's shape."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import nbformat
import pytest
from nbclient import NotebookClient

from attnscope.config import REPO_ROOT
from tests.browser.conftest import chromium_path

pytestmark = pytest.mark.browser  # nbclient kernels and Chromium: minutes on a busy machine

NOTEBOOKS = REPO_ROOT / "docs" / "notebooks"
WIDGET = "application/vnd.jupyter.widget-view+json"


def execute(name: str, workdir: Path, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Run the notebook in ``workdir`` (the checkout importable, as an installed package would
    be); its code cells."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]))
    book = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    NotebookClient(book, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(workdir)}}).execute()
    return [cell for cell in book.cells if cell.cell_type == "code"]


def text(cell: Any) -> str:
    """What a cell printed and displayed, as text."""
    parts = []
    for output in cell.outputs:
        parts.append(output.get("text", ""))
        parts.append(output.get("data", {}).get("text/plain", ""))
    return "".join(parts)


def test_first_look(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cells = execute("first-look", tmp_path, monkeypatch)
    printed = text(cells[1])
    assert "</s>" in printed and len(printed.strip().splitlines()) == 3
    shapes = text(cells[2])
    assert "cross (3, 8," in shapes and "rows sum to one: True" in shapes
    assert "weight" in cells[4].outputs[0]["data"]["text/html"]
    for widget_cell in cells[5:8]:
        assert any(WIDGET in output.get("data", {}) for output in widget_cell.outputs)
    assert "wrote first-look.html" in text(cells[8])
    # the exported view, in Chromium: a heatmap of cross layer 1 head 1 with the answer's shape
    from playwright.sync_api import sync_playwright

    answer_rows = printed.strip().splitlines()
    targets = eval(answer_rows[2])  # noqa: S307 - the notebook printed a list of str
    sources = eval(answer_rows[1])  # noqa: S307
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium_path(), args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page()
        page.goto((tmp_path / "first-look.html").as_uri())
        page.wait_for_selector("[data-role=heatmap][data-drawn='cross/0/0']", timeout=30_000)
        z = page.evaluate("() => document.querySelector('[data-role=heatmap]').data[0].z")
        browser.close()
    assert [len(z), len(z[0])] == [len(targets), len(sources)]


def test_score_functions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cells = execute("score-functions", tmp_path, monkeypatch)
    summary = cells[2].outputs[0]["data"]["text/plain"]
    for score in ("additive", "dot", "general", "concat", "scaled_dot", "cosine", "location", "query_key"):
        assert score in summary
    assert "compared 8 score functions on 5 sentences" in text(cells[-1])


def test_imported_heads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cells = execute("imported-heads", tmp_path, monkeypatch)
    assert "transformer 2 layers x 4 heads" in text(cells[1])
    table = text(cells[2])
    assert "precision" in table and "f1" in table
    assert "best head: layer" in text(cells[3])
    assert any(WIDGET in output.get("data", {}) for output in cells[4].outputs)


def test_more_calls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cells = execute("more-calls", tmp_path, monkeypatch)
    translation = text(cells[0]).strip()
    for widget_cell in cells[1:3]:  # the step anatomy and the comparison
        assert any(WIDGET in output.get("data", {}) for output in widget_cell.outputs)
    assert (tmp_path / "cross.svg").read_text(encoding="utf-8").startswith("<svg")
    assert (tmp_path / "difference.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "step-anatomy.js" in (tmp_path / "anatomy.html").read_text(encoding="utf-8")
    assert "wrote anatomy.html" in text(cells[3])
    summary = text(cells[4])
    assert summary.startswith("<HeadAnalysis en-de-transformer: 8 sentences (greedy);") and "role" in summary
    assert "layers x heads: (3, 8)" in text(cells[5])
    glimpses = text(cells[6])
    assert "probabilities per glimpse: (7, 10)" in glimpses
    assert "attention [token, row, col]: (" in text(cells[7]) and "each sums to [1.0" in text(cells[7])
    assert translation  # the notebook's first answer
