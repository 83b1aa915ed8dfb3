"""The alignment score functions: every one gives rows that sum to one with exactly zero weight on
padding, each computes the formula of its row in the table, and the two odd ones (``concat``,
``location``) behave as documented."""

from __future__ import annotations

import math

import pytest
import torch

from attnscope.nn.scores import (
    AdditiveScore,
    CosineScore,
    DotScore,
    GeneralScore,
    QueryKeyScore,
    build_score,
    masked_softmax,
)

DIM, MAX_POSITIONS = 8, 12


def _inputs(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """query (3, D), keys (3, 6, D) and a mask with 6, 2 and 4 real keys."""
    g = torch.Generator().manual_seed(seed)
    query, keys = torch.randn(3, DIM, generator=g), torch.randn(3, 6, DIM, generator=g)
    mask = torch.arange(6)[None, :] < torch.tensor([6, 2, 4])[:, None]
    return query, keys, mask


def test_masked_softmax_zeroes_padding_and_renormalises() -> None:
    scores = torch.tensor([[1.0, 2.0, 3.0, 50.0]])
    mask = torch.tensor([[True, True, True, False]])
    weights = masked_softmax(scores, mask)
    assert weights[0, 3].item() == 0.0
    torch.testing.assert_close(weights[:, :3], torch.softmax(scores[:, :3], -1))


def test_every_score_gives_normalised_rows_with_zero_on_padding(score_name: str) -> None:
    torch.manual_seed(0)
    score = build_score(score_name, DIM, max_positions=MAX_POSITIONS)
    query, keys, mask = _inputs()
    raw = score(query, keys)
    assert raw.shape == (3, 6)
    assert torch.isfinite(raw).all()
    weights = masked_softmax(raw, mask)
    torch.testing.assert_close(weights.sum(-1), torch.ones(3), atol=1e-5, rtol=0)
    assert (weights[~mask] == 0).all()
    assert (weights[mask] > 0).all()


def test_unknown_score_name() -> None:
    with pytest.raises(ValueError, match="unknown score function 'bilinear'"):
        build_score("bilinear", DIM)


def test_scores_follow_their_formulas() -> None:
    torch.manual_seed(0)
    s, h, _ = _inputs()
    expected_dot = torch.einsum("nd,nsd->ns", s, h)
    torch.testing.assert_close(DotScore(DIM)(s, h), expected_dot)
    torch.testing.assert_close(DotScore(DIM, scaled=True)(s, h), expected_dot / math.sqrt(DIM))

    general = GeneralScore(DIM)
    torch.testing.assert_close(general(s, h), torch.einsum("nd,de,nse->ns", s, general.w.weight, h))

    qk = QueryKeyScore(DIM)
    q, k = s @ qk.w_query.weight.T, h @ qk.w_key.weight.T
    torch.testing.assert_close(qk(s, h), torch.einsum("nk,nsk->ns", q, k))

    add = AdditiveScore(DIM)
    hidden = torch.tanh((s @ add.w_query.weight.T)[:, None] + add.w_key(h))
    torch.testing.assert_close(add(s, h), (hidden @ add.v.weight.T).squeeze(-1))

    cos = torch.nn.functional.cosine_similarity(h, s[:, None], dim=-1)
    torch.testing.assert_close(CosineScore(DIM)(s, h), 10.0 * cos)


def test_concat_weights_do_not_depend_on_the_decoder_state() -> None:
    torch.manual_seed(0)
    concat = build_score("concat", DIM)
    query, keys, mask = _inputs()
    reference = masked_softmax(concat(query, keys), mask)
    for seed in range(1, 6):
        other = torch.randn(query.shape, generator=torch.Generator().manual_seed(seed)) * seed
        weights = masked_softmax(concat(other, keys), mask)
        torch.testing.assert_close(weights, reference, atol=1e-6, rtol=0)
    # ...while the raw scores do move with it (the state term is a shift, not absent).
    assert not torch.allclose(concat(query, keys), concat(query + 1.0, keys))


@pytest.mark.parametrize("length", [1, 3, 7, MAX_POSITIONS])
def test_location_never_attends_past_the_source(length: int) -> None:
    torch.manual_seed(0)
    location = build_score("location", DIM, max_positions=MAX_POSITIONS)
    query = torch.randn(2, DIM)
    keys = torch.randn(2, MAX_POSITIONS, DIM)
    mask = torch.arange(MAX_POSITIONS)[None, :] < length
    weights = masked_softmax(location(query, keys), mask.expand(2, -1))
    assert (weights[:, length:] == 0).all()
    torch.testing.assert_close(weights.sum(-1), torch.ones(2), atol=1e-5, rtol=0)
    # where to look comes from the state alone: other key contents give the same weights
    other = masked_softmax(location(query, torch.randn_like(keys)), mask.expand(2, -1))
    assert torch.equal(weights, other)


def test_location_rejects_sources_longer_than_its_positions() -> None:
    location = build_score("location", DIM, max_positions=MAX_POSITIONS)
    with pytest.raises(ValueError, match=f"13 tokens; the location score covers {MAX_POSITIONS}"):
        location(torch.randn(1, DIM), torch.randn(1, MAX_POSITIONS + 1, DIM))
