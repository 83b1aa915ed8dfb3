"""beam.top_candidates: the chunked search for a beam's best extensions finds exactly what topk
over every (row, word) sum finds."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor

from attnscope.decoding.beam import CHUNKED_FROM, CHUNKS, top_candidates


def _plain(scores: Tensor, log_probs: Tensor, groups: int, count: int) -> tuple[Tensor, Tensor]:
    return (scores[:, None] + log_probs).view(groups, -1).topk(count, dim=1)


@pytest.mark.parametrize(("groups", "width", "vocab"), [(32, 5, 8000), (32, 1, 8000), (8, 5, 8000), (4, 5, 8008), (1, 5, 8000)])
def test_the_chunked_search_finds_the_plain_topk(groups: int, width: int, vocab: int) -> None:
    """Random log-probabilities with words that can never be emitted (-inf) and a dead beam
    (score -inf): same scores and the same (row, word) indices, best first."""
    g = torch.Generator().manual_seed(groups * width + vocab)
    log_probs = torch.randn(groups * width, vocab, generator=g).mul(3).log_softmax(-1)
    log_probs[:, :3] = float("-inf")
    scores = torch.randn(groups * width, generator=g) * 4
    if width > 1:
        scores[1] = float("-inf")
    want = _plain(scores, log_probs, groups, 2 * width)
    got = top_candidates(scores, log_probs, groups, 2 * width)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


def test_best_candidates_crowded_into_one_chunk_are_all_found() -> None:
    """The ten best words of the batch all lie in one chunk of one row (words j, j + V/16, ...),
    and the second row's best is close behind: the chunked search still returns those ten."""
    groups, width, vocab = 32, 5, 8000
    assert groups * width * vocab >= CHUNKED_FROM  # the chunked path is the one under test
    log_probs = -20.0 - torch.rand(groups * width, vocab, generator=torch.Generator().manual_seed(0))
    per = vocab // CHUNKS
    crowded = 7 + per * torch.arange(CHUNKS)  # every member of chunk 7 of row 0
    log_probs[0, crowded] = -torch.arange(CHUNKS, dtype=torch.float) * 0.01
    log_probs[1, 123] = -0.05
    scores = torch.zeros(groups * width)
    want = _plain(scores, log_probs, groups, 10)
    got = top_candidates(scores, log_probs, groups, 10)
    assert torch.equal(got[0], want[0])  # every group's best scores (its filler has float ties)
    assert torch.equal(got[1][0], want[1][0])
    assert set(got[1][0].tolist()) == set(crowded[:5].tolist()) | {vocab + 123} | set(crowded[5:9].tolist())
