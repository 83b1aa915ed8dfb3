"""Per-sentence budgets and the stop hook: what a server needs to decode several requests as one
batch (each with its own ``max_length``) and to drop a decode whose client has gone."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor

from app.decoding import DecodeStopped, beam_search, greedy_decode
from app.nn.base import Seq2Seq
from app.nn.config import PAD_ID

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
