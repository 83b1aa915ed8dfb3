"""`attnscope evaluate --explain`: every method's alignment F1 and IG correlation grid, written
into the card, for a Transformer (all methods) and an RNN (weights and norm)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from attnscope.cli import main
from attnscope.testing import build_tiny_models
from tests.alignment.conftest import aligned_corpus  # noqa: F401 - the fixture

GRID = {"transformer": (2, 2), "rnn-additive": (1, 1)}


@pytest.mark.parametrize("suffix", ["transformer", "rnn-additive"])
def test_cli_writes_the_method_grids_into_the_card(aligned_corpus: Path, tmp_path: Path, suffix: str) -> None:  # noqa: F811
    folder = next(p for p in build_tiny_models(tmp_path) if p.name.endswith(suffix))
    args = ["evaluate", str(folder), "--explain", "--data-dir", str(aligned_corpus), "--update-card", "--device", "cpu",
            "--ig-steps", "4", "--explain-sentences", "4"]
    assert main(args) == 0
    card = json.loads((folder / "card.json").read_text())
    found = card["explanations"]
    assert found["split"] == "test2016" and found["sentences"] == 4
    methods = found["methods"]
    expected = {"weights", "norm", "rollout", "alti", "value_zeroing"} if suffix == "transformer" else {"weights", "norm"}
    assert set(methods) == expected
    layers, heads = GRID[suffix]
    for method, scores in methods.items():
        per_head = scores["per"] == "head"
        assert per_head == (method in ("weights", "norm"))
        width = heads if per_head else 1
        f1 = scores["alignment"]["f1"]
        assert len(f1) == layers and all(len(row) == width for row in f1)
        assert all(0.0 <= v <= 1.0 for row in f1 for v in row)
        rho = scores["spearman_ig"]
        assert len(rho) == layers and all(len(row) == width for row in rho)
        assert all(v is None or -1.0 <= v <= 1.0 for row in rho for v in row)
    assert card["note"] == "tiny random model for tests"  # the rest of the card is kept
