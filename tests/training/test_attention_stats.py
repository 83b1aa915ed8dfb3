"""Attention entropy: hand-worked rows, and the mean over a corpus counts every real target
position of every layer and head, stays within the uniform bound, and is None without attention."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from attnscope.repository import load_model_folder
from attnscope.testing import TINY_PAIRS
from attnscope.training.attention_stats import cross_attention_entropy, row_entropy
from attnscope.translator import Translator


def test_row_entropy_of_hand_worked_rows() -> None:
    rows = torch.tensor(
        [
            [1.0, 0.0, 0.0, 0.0],  # one-hot: 0
            [0.25, 0.25, 0.25, 0.25],  # uniform over 4: log 4
            [0.5, 0.5, 0.0, 0.0],  # uniform over 2, zero-padded: log 2
        ]
    )
    assert torch.allclose(row_entropy(rows), torch.tensor([0.0, math.log(4), math.log(2)]))
    assert row_entropy(rows.view(3, 1, 4)).shape == (3, 1)


@pytest.mark.parametrize(("suffix", "layers_x_heads"), [("rnn-additive", 1), ("transformer", 4)])
def test_corpus_entropy_counts_every_row_and_stays_below_uniform(
    tiny_models_dir: Path, suffix: str, layers_x_heads: int
) -> None:
    translator = Translator(load_model_folder(tiny_models_dir / f"en-de-{suffix}"))
    pairs = TINY_PAIRS[:5]
    result = cross_attention_entropy(translator, pairs, batch_size=2)
    assert result is not None
    tokenizer = translator.loaded.tokenizer
    target_positions = sum(len(tokenizer.encode(t)) + 1 for _, t in pairs)  # + EOS
    assert result["rows"] == target_positions * layers_x_heads
    longest = max(len(tokenizer.encode(s)) + 1 for s, _ in pairs)
    assert 0 < result["mean"] <= math.log(longest)
    assert 0 < result["normalized"] <= 1
    # A random tiny model attends almost evenly: near the uniform bound, far from one-hot.
    assert result["normalized"] > 0.5


def test_no_attention_no_entropy(tiny_models_dir: Path) -> None:
    translator = Translator(load_model_folder(tiny_models_dir / "en-de-rnn-none"))
    assert cross_attention_entropy(translator, TINY_PAIRS[:2]) is None
