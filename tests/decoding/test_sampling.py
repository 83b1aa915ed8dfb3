"""Sampling as a decoding option of the encoder-decoder families (attnscope.decoding.sampling):
reproducible from its seed, independent of batch-mates, greedy at temperature 0 and top_k 1, and
restricted by top-k/top-p, on tiny random models of every family and on a scripted distribution."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from attnscope.decoding import DecodeOptions, greedy_decode
from attnscope.decoding.sampling import Sampling, probabilities
from attnscope.nn.base import Seq2Seq
from attnscope.nn.config import EOS_ID
from tests.decoding.conftest import MODEL_KINDS, A, B, C, build_tiny, padded_source

KINDS = [k for k in MODEL_KINDS if k[1] in ("additive", "dot")]  # every family, two RNN scores


def _tokens(model: Seq2Seq, src: torch.Tensor, sampling: Sampling | None, **kw: object) -> list[list[int]]:
    out = greedy_decode(model, src, DecodeOptions(beam_size=1, sampling=sampling, max_length=12, **kw))  # type: ignore[arg-type]
    return [row[:n] for row, n in zip(out.tokens.tolist(), out.lengths.tolist(), strict=True)]


@pytest.mark.parametrize("kind", KINDS, ids=[f"{a}-{s}" for a, s in KINDS])
def test_same_seed_same_sample_and_greedy_limits(kind: tuple[str, str]) -> None:
    model = build_tiny(*kind)
    src = padded_source((7, 4, 6))
    hot = Sampling(temperature=3.0, seed=11)
    first = _tokens(model, src, hot)
    assert first == _tokens(model, src, hot)  # same seed, same draws
    assert _tokens(model, src[1:2, :4], hot) == first[1:2]  # a sentence's sample ignores its batch-mates
    greedy = _tokens(model, src, None)
    assert _tokens(model, src, Sampling(temperature=0.0, seed=5)) == greedy
    assert _tokens(model, src, Sampling(temperature=2.0, top_k=1, seed=5)) == greedy
    assert _tokens(model, src, Sampling(temperature=1e-4, seed=5)) == greedy  # temperature -> 0
    seeds = {str(_tokens(model, src, Sampling(temperature=5.0, seed=s))) for s in range(8)}
    assert len(seeds) > 1  # at temperature 5 a random model's draws differ between seeds


def test_flat_distribution_draws_differ_with_the_seed(scripted: Callable[..., Seq2Seq]) -> None:
    """Three equally likely words then </s>: every seed's draw is one of them, seeds 0..9 draw
    more than one, and top_k / top_p cut the tail they must cut."""
    model = scripted({(): {A: 0.3, B: 0.3, C: 0.3, EOS_ID: 0.1}, **{(w,): {EOS_ID: 1.0} for w in (A, B, C)}})
    src = torch.tensor([[A, B, EOS_ID]])
    draws = [_tokens(model, src, Sampling(seed=s))[0] for s in range(10)]
    assert {tuple(d) for d in draws} <= {(A, EOS_ID), (B, EOS_ID), (C, EOS_ID), (EOS_ID,)}
    assert len({d[0] for d in draws}) > 1
    skewed = scripted({(): {A: 0.55, B: 0.3, C: 0.15}, **{(w,): {EOS_ID: 1.0} for w in (A, B, C)}})
    top2 = {_tokens(skewed, src, Sampling(top_k=2, seed=s))[0][0] for s in range(30)}
    assert top2 == {A, B}
    assert {_tokens(skewed, src, Sampling(top_p=0.5, seed=s))[0][0] for s in range(30)} == {A}
    assert {_tokens(skewed, src, Sampling(top_p=0.8, seed=s))[0][0] for s in range(30)} == {A, B}


def test_filtered_probabilities_by_hand() -> None:
    log_probs = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    p = probabilities(log_probs, Sampling(temperature=0.5, top_k=3, top_p=0.9, seed=0))
    # temperature 0.5 squares then renormalises: .25, .09, .0225 over top 3; top_p .9 keeps the first two
    # (mass before the third is (.25+.09)/.3625 = .938 >= .9)
    expected = torch.tensor([[0.25, 0.09, 0.0, 0.0]]) / 0.34
    assert torch.allclose(p, expected, atol=1e-6)


def test_sampling_needs_one_output() -> None:
    with pytest.raises(ValueError, match="beam_size 1"):
        DecodeOptions(beam_size=3, sampling=Sampling(seed=1))
    with pytest.raises(ValueError, match="top_p"):
        Sampling(top_p=0.0)
