"""Per-sentence budgets and the stop hook: what a server needs to decode several requests as one
batch (each with its own ``max_length``) and to drop a decode whose client has gone."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch
from torch import Tensor

from attnscope.decoding import DecodeStopped, beam_search, greedy_decode
from attnscope.nn.base import Seq2Seq
from attnscope.nn.config import PAD_ID
from tests.decoding.conftest import A, B, Table, padded_source

BUDGETS = [3, 9, 5, 1]


@pytest.mark.parametrize("beam_size", [1, 3])
def test_each_sentence_keeps_its_own_budget(model: Seq2Seq, src: Tensor, beam_size: int) -> None:
    """A batch with budgets (3, 9, 5, 1) gives every sentence what decoding it alone with its own
    budget gives: the same tokens (so the same cut-off), log-probabilities and attention."""

    def decode(source: Tensor, max_length: int | list[int]) -> list:
        if beam_size == 1:
            return greedy_decode(model, source, max_length=max_length).hypotheses()
        return beam_search(model, source, beam_size=beam_size, max_length=max_length).hypotheses()

    together = decode(src, BUDGETS)
    assert max(len(h.tokens) for h in together) > 3, "nothing long enough to be cut"
    for i, n in enumerate(src.ne(PAD_ID).sum(1).tolist()):
        (alone,) = decode(src[i : i + 1, :n], BUDGETS[i])
        assert len(together[i].tokens) <= BUDGETS[i]
        assert together[i].tokens == alone.tokens
        torch.testing.assert_close(together[i].token_logprobs, alone.token_logprobs, atol=1e-5, rtol=1e-5)
        for kind in ("cross", "decoder_self", "encoder_self"):
            mine, theirs = getattr(together[i], kind), getattr(alone, kind)
            assert (mine is None) == (theirs is None)
            if mine is not None:
                torch.testing.assert_close(mine, theirs, atol=1e-5, rtol=1e-5)


def test_budgets_must_match_the_batch(model: Seq2Seq, src: Tensor) -> None:
    with pytest.raises(ValueError, match="max_length needs 4 positive lengths"):
        greedy_decode(model, src, max_length=[3, 4])
    with pytest.raises(ValueError, match="max_length needs 4 positive lengths"):
        beam_search(model, src, max_length=[3, 4, 0, 2])


@pytest.mark.parametrize("beam_size", [1, 4])
def test_should_stop_ends_the_decode_before_the_next_step(model: Seq2Seq, src: Tensor, beam_size: int) -> None:
    asked: list[int] = []

    def stop_at_third() -> bool:
        asked.append(1)
        return len(asked) >= 3

    with pytest.raises(DecodeStopped, match="before step 2"):
        if beam_size == 1:
            greedy_decode(model, src, max_length=20, should_stop=stop_at_third)
        else:
            beam_search(model, src, beam_size=beam_size, max_length=20, should_stop=stop_at_third)
    assert len(asked) == 3
    never = greedy_decode(model, src, max_length=6, should_stop=lambda: False)
    assert torch.equal(never.tokens, greedy_decode(model, src, max_length=6).tokens)


class NeverEnding(dict):  # type: ignore[type-arg]
    """A scripted model's table that never ends a sentence: every prefix goes on with A or B."""

    def get(self, key: object, default: object = None) -> dict[int, float]:
        return {A: 0.6, B: 0.4}


@pytest.mark.parametrize("beam_size", [1, 3])
def test_the_default_budget_is_each_sentences_own(
    scripted: Callable[[Table | list[Table]], Seq2Seq], beam_size: int
) -> None:
    """Without max_length a sentence may decode 1.5 × its own source length + 10 tokens, whatever
    its batch mates: a model that never stops is cut there, alone and in a batch alike."""
    model, src = scripted(NeverEnding()), padded_source((7, 2, 12, 4))
    lengths = src.ne(PAD_ID).sum(1).tolist()

    def decode(source: Tensor) -> list[int]:
        out = greedy_decode(model, source) if beam_size == 1 else beam_search(model, source, beam_size=beam_size)
        return [len(h.tokens) for h in out.hypotheses()]

    budgets = [math.ceil(1.5 * n) + 10 for n in lengths]
    assert decode(src) == budgets == [21, 13, 28, 16]
    assert [decode(src[i : i + 1, :n])[0] for i, n in enumerate(lengths)] == budgets


def test_a_long_prefix_widens_only_its_own_sentences_budget(
    scripted: Callable[[Table | list[Table]], Seq2Seq],
) -> None:
    model, src = scripted(NeverEnding()), padded_source((2, 2))
    out = greedy_decode(model, src, prefix=[[A] * 20, []])
    assert out.lengths.tolist() == [30, 13]  # 20 forced + 10 to finish in; 1.5 × 2 + 10
