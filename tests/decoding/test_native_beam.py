"""The decoders' native bookkeeping (attnscope/nn/native/beam.cpp): the candidate selection finds the
same candidates as the PyTorch one (the same sums, ties to the lower index, banned words never
chosen), greedy's choice is PyTorch's ``max``, and the cache reordering copies the same rows;
beam search and greedy decoding through them give what they give through PyTorch
(ATTNSCOPE_NATIVE=0)."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor

from attnscope.decoding import beam_search, greedy_decode
from attnscope.decoding.beam import CHUNKED_FROM, top_candidates
from attnscope.decoding.output import never_emit
from attnscope.nn import native
from attnscope.nn.base import Seq2Seq
from attnscope.nn.kv_cache import KVCache, select_all
from attnscope.nn.native import library

from .conftest import build_tiny, padded_source

PAD, BOS = 0, 2
NEG_INF = float("-inf")


@pytest.fixture(scope="module", autouse=True)
def built() -> None:
    library.build()  # what `make install` did (a no-op when it did)
    assert native.ops() is not None, "the native operations must build here (a C++ compiler and ninja)"


def _reference(scores: Tensor, log_probs: Tensor, groups: int, count: int) -> tuple[Tensor, Tensor, Tensor]:
    """What beam search computes without the native operation."""
    masked = never_emit(log_probs, PAD, BOS)
    values, index = top_candidates(scores, masked, groups, count)
    return values, index, masked.view(groups, -1).gather(1, index)


@pytest.mark.parametrize(
    ("groups", "width", "vocab", "count"),
    [(1, 1, 9, 2), (1, 5, 300, 10), (3, 4, 50, 8), (2, 3, 4, 12), (4, 2, 7, 1), (32, 5, 1000, 10)],
)
@pytest.mark.parametrize("dead", [False, True], ids=["live", "dead-rows"])
def test_the_native_selection_finds_the_pytorch_candidates(
    groups: int, width: int, vocab: int, count: int, dead: bool
) -> None:
    g = torch.Generator().manual_seed(groups * 100 + vocab)
    rows = groups * width
    log_probs = (torch.randn(rows, vocab, generator=g) * 4).log_softmax(-1)
    scores = torch.randn(rows, generator=g) * 3
    if dead:  # beam search's dead slots: a sentence with fewer live hypotheses than beams
        scores[1::2] = NEG_INF
    got = native.top_candidates(scores, log_probs, groups, count, (PAD, BOS))
    assert got is not None
    want = _reference(scores, log_probs, groups, count)
    assert torch.equal(got[0], want[0])  # the same float sums, best first
    live = want[0] > NEG_INF  # among -inf candidates any order is right (beam search skips them)
    assert torch.equal(got[1][live], want[1][live])
    assert torch.equal(got[2][live], want[2][live])
    words = got[1] % vocab
    assert not ((words == PAD) | (words == BOS))[live].any()
    assert torch.isinf(got[2][(words == PAD) | (words == BOS)]).all()  # banned: log-probability -inf


def test_the_native_selection_equals_the_chunked_search_on_large_batches() -> None:
    """32 sentences x 5 beams x 8,000 words: the PyTorch side takes its chunked shortcut."""
    g = torch.Generator().manual_seed(3)
    log_probs = torch.randn(160, 8000, generator=g).log_softmax(-1)
    scores = torch.randn(160, generator=g)
    assert log_probs.numel() >= CHUNKED_FROM
    got = native.top_candidates(scores, log_probs, 32, 10, (PAD, BOS))
    assert got is not None
    want = _reference(scores, log_probs, 32, 10)
    for a, b in zip(got, want, strict=True):
        assert torch.equal(a, b)


def test_ties_go_to_the_lower_index_and_banned_words_come_last() -> None:
    log_probs = torch.full((2, 6), -1.0)  # every word equally likely in both rows
    got = native.top_candidates(torch.zeros(2), log_probs, 1, 10, (PAD, BOS))
    assert got is not None
    values, index, chosen = got
    assert index[0, :8].tolist() == [1, 3, 4, 5, 7, 9, 10, 11]  # row 0's words, then row 1's
    assert values[0, :8].tolist() == [-1.0] * 8 and chosen[0, :8].tolist() == [-1.0] * 8
    assert sorted(index[0, 8:].tolist()) == [0, 2]  # only a banned word is left to fill the count
    assert values[0, 8:].tolist() == [NEG_INF, NEG_INF]


def test_the_native_selection_steps_aside_where_it_does_not_apply(monkeypatch: pytest.MonkeyPatch) -> None:
    scores, log_probs = torch.zeros(2), torch.randn(2, 5).log_softmax(-1)
    assert native.top_candidates(scores.double(), log_probs.double(), 1, 2, (PAD,)) is None
    monkeypatch.setenv("ATTNSCOPE_NATIVE", "0")
    assert native.top_candidates(scores, log_probs, 1, 2, (PAD,)) is None


def test_native_cache_reordering_equals_select(monkeypatch: pytest.MonkeyPatch) -> None:
    g = torch.Generator().manual_seed(0)
    caches = [KVCache().append(torch.randn(2, 4, 3, n, 6, generator=g)) for n in (5, 5, 2)]
    caches[2] = caches[2].append(torch.randn(2, 4, 3, 1, 6, generator=g))  # lengths may differ
    index = torch.tensor([3, 0, 0, 2, 1])
    got = select_all(caches, index)
    for new, old in zip(got, caches, strict=True):
        want = old.select(index)
        assert new.length == want.length and new.buffer is not None and want.buffer is not None
        assert new.buffer.data.shape == want.buffer.data.shape  # room for more positions kept
        assert torch.equal(new.keys, want.keys) and torch.equal(new.values, want.values)
        assert new.buffer.data.data_ptr() != old.buffer.data.data_ptr()  # type: ignore[union-attr]
    with pytest.raises(RuntimeError, match="out of range"):
        select_all(caches, torch.tensor([4]))
    monkeypatch.setenv("ATTNSCOPE_NATIVE", "0")  # switched off: KVCache.select, the same contents
    assert all(torch.equal(a.keys, b.keys) for a, b in zip(select_all(caches, index), got, strict=True))


@pytest.mark.parametrize(("architecture", "score"), [("transformer", "additive"), ("rnn", "general")])
@pytest.mark.parametrize("coverage", [0.0, 0.4])
def test_beam_search_natively_equals_beam_search_in_pytorch(
    monkeypatch: pytest.MonkeyPatch, architecture: str, score: str, coverage: float
) -> None:
    model: Seq2Seq = build_tiny(architecture, score, seed=5)
    src = padded_source((7, 4, 6, 2))

    def decode() -> list:  # type: ignore[type-arg]
        with torch.inference_mode():
            out = beam_search(model, src, beam_size=4, max_length=12, coverage_penalty=coverage, return_tree=True)
        return out.hypotheses()

    fast = decode()
    monkeypatch.setenv("ATTNSCOPE_NATIVE", "0")
    slow = decode()
    assert [h.tokens for h in fast] == [h.tokens for h in slow]
    for a, b in zip(fast, slow, strict=True):
        assert a.score == b.score
        assert torch.equal(a.cross, b.cross)
        assert a.tree is not None and b.tree is not None
        assert [h.tokens for h in a.tree.hypotheses] == [h.tokens for h in b.tree.hypotheses]


def test_greedy_choice_is_the_pytorch_max() -> None:
    g = torch.Generator().manual_seed(1)
    log_probs = (torch.randn(33, 500, generator=g) * 3).log_softmax(-1)
    log_probs[3, PAD] = log_probs[4, BOS] = 0.0  # a banned word the likeliest: never chosen
    log_probs[5, 7] = log_probs[5, 9] = 1.0  # a tie: the lower word, as max returns
    got = native.best_words(log_probs, (PAD, BOS))
    assert got is not None
    want = never_emit(log_probs, PAD, BOS).max(dim=-1)
    assert torch.equal(got[0], want.values) and torch.equal(got[1], want.indices)
    assert got[1][5] == 7


@pytest.mark.parametrize(("architecture", "score"), [("transformer", "additive"), ("rnn", "dot")])
def test_greedy_decoding_natively_equals_greedy_in_pytorch(
    monkeypatch: pytest.MonkeyPatch, architecture: str, score: str
) -> None:
    model: Seq2Seq = build_tiny(architecture, score, seed=6)
    src = padded_source((7, 4, 6, 2))

    def decode() -> list:  # type: ignore[type-arg]
        with torch.inference_mode():
            return greedy_decode(model, src, max_length=12, prefix=[[5], [], [9, 9], []]).hypotheses()

    fast = decode()
    monkeypatch.setenv("ATTNSCOPE_NATIVE", "0")
    slow = decode()
    assert [h.tokens for h in fast] == [h.tokens for h in slow]
    assert [h.tokens[:2] for h in fast][2] == [9, 9]  # the prefix forced
    for a, b in zip(fast, slow, strict=True):
        assert a.score == b.score and torch.equal(a.cross, b.cross)
