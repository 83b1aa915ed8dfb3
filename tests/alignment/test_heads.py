"""Attention scored as an aligner: merging pieces into words, an identity-aligned head scores
F1 1.0, the diagonal baseline scores what it should, and the CLI writes the card entries."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from attnscope.alignment.heads import HeadScores, WordMap, aligning_rows, word_attention
from attnscope.alignment.links import parse_pharaoh
from attnscope.cli import main
from attnscope.testing import build_tiny_models

# source words 0 1 2 with pieces [w0 w0 w1 w2] + </s>; target words 0 1 2 with pieces [w0 w1 w1 w2] + </s>
WORDS = WordMap(source=[0, 0, 1, 2], target=[0, 1, 1, 2], n_source=3, n_target=3)


def aligned_head(pairs: dict[int, int]) -> torch.Tensor:
    """(1, 1, 5, 5) attention: each target piece of word j attends to the pieces of source word
    pairs[j] (spread evenly); the </s> row attends to </s>."""
    attn = torch.zeros(1, 1, 5, 5)
    for t, j in enumerate(WORDS.target):
        cols = [s for s, w in enumerate(WORDS.source) if w == pairs[j]]
        attn[0, 0, t, cols] = 1.0 / len(cols)
    attn[0, 0, 4, 4] = 1.0
    return attn


def test_word_attention_sums_source_pieces_and_averages_target_pieces() -> None:
    attn = torch.rand(5, 5).softmax(-1)
    merged = word_attention(attn, WORDS)
    assert merged.shape == (3, 3)
    assert torch.allclose(merged[0, 0], attn[0, 0] + attn[0, 1])  # word 0 has source pieces 0, 1
    assert torch.allclose(merged[1, 2], (attn[1, 3] + attn[2, 3]) / 2)  # target word 1: pieces 1, 2


def test_an_identity_head_scores_one_and_the_diagonal_what_it_should() -> None:
    scores = HeadScores(1, 1)
    scores.add(aligned_head({0: 0, 1: 1, 2: 2}), WORDS, parse_pharaoh("0-0 1-1 2-2"))
    report = scores.report()
    assert report["f1"] == [[1.0]] and report["aer"] == [[0.0]]
    assert report["diagonal"]["f1"] == 1.0  # 3 x 3: the diagonal is the identity
    crossed = HeadScores(1, 1)
    crossed.add(aligned_head({0: 0, 1: 1, 2: 2}), WORDS, parse_pharaoh("0-0 2-1 1-2"))
    report = crossed.report()
    assert report["f1"] == [[round(1 / 3, 4)]]  # only 0-0 is right
    assert report["diagonal"]["f1"] == round(1 / 3, 4)
    assert report["average_of_heads"] == report["per_layer"][0]  # one head: all averages agree


def reading_head(pairs: dict[int, int]) -> torch.Tensor:
    """The aligned head of :func:`aligned_head` one step later: each piece's links on the row of
    the step that reads it (row t + 1), the first row (reading <s>) on </s>."""
    produced = aligned_head(pairs)
    attn = torch.zeros_like(produced)
    attn[..., 1:, :] = produced[..., :-1, :]
    attn[..., 0, 4] = 1.0
    return attn


def test_the_reads_convention_scores_the_next_row() -> None:
    head, links = reading_head({0: 2, 1: 0, 2: 1}), parse_pharaoh("2-0 0-1 1-2")
    reads, produces = HeadScores(1, 1, "reads"), HeadScores(1, 1)
    reads.add(head, WORDS, links)
    produces.add(head, WORDS, links)
    assert reads.report()["f1"] == [[1.0]] and reads.report()["rows"] == "reads"
    # One row early, each word gets the previous word's links (here one of three ties right).
    assert produces.report()["f1"][0][0] < 0.5
    assert produces.report()["rows"] == "produces"
    # the diagonal baseline does not depend on rows
    assert reads.report()["diagonal"] == produces.report()["diagonal"]


def test_aligning_rows_shifts_by_one_and_keeps_the_last_producing_row_when_nothing_read_it() -> None:
    attn = torch.arange(5 * 2, dtype=torch.float).view(5, 2)  # 5 steps
    assert torch.equal(aligning_rows(attn, "produces", 3), attn[:3])
    assert torch.equal(aligning_rows(attn, "reads", 3), attn[1:4])
    assert torch.equal(aligning_rows(attn, "reads", 5), torch.cat([attn[1:5], attn[4:5]]))  # no </s> step
    with pytest.raises(ValueError, match="row convention"):
        aligning_rows(attn, "next", 3)  # type: ignore[arg-type]


def test_cli_writes_alignment_and_ablation_into_the_card(
    aligned_corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = next(p for p in build_tiny_models(tmp_path) if p.name.endswith("transformer"))
    common = ["--data-dir", str(aligned_corpus), "--update-card", "--device", "cpu"]
    for extra in (["--alignment"], ["--ablate", "--ablate-kinds", "cross", "--beam", "1"]):
        assert main(["evaluate", str(folder), *extra, *common]) == 0
    card = json.loads((folder / "card.json").read_text())
    alignment = card["alignment"]
    assert alignment["split"] == "test2016" and alignment["sentences"] == 6
    assert len(alignment["f1"]) == 2 and all(len(row) == 2 for row in alignment["f1"])
    assert 0.0 <= alignment["diagonal"]["f1"] <= 1.0
    ablation = card["ablation"]
    assert set(ablation["bleu_without_head"]) == {"cross"}
    assert len(ablation["bleu_without_head"]["cross"]) == 2
    assert card["note"] == "tiny random model for tests"  # the rest of the card is kept
    assert main(["evaluate", str(folder), "--alignment", "--data-dir", str(tmp_path)]) == 2
    assert "error" in capsys.readouterr().err
