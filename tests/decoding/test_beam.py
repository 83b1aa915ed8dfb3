"""Beam search: size 1 is greedy, the attention returned with a hypothesis is the attention of
that hypothesis (its rows follow the back-pointers), and the search itself finds, ranks and stops
as it should."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

import pytest
import torch
from torch import Tensor

from attnscope.decoding import DecodeOutput, beam_search, greedy_decode, score_targets
from attnscope.nn.base import Seq2Seq
from attnscope.nn.config import EOS_ID, PAD_ID

Check = Callable[[Seq2Seq, DecodeOutput], None]
a, b, c = 4, 5, 6  # words of the scripted model


def assert_same_hypotheses(got: DecodeOutput, want: DecodeOutput) -> None:
    assert torch.equal(got.lengths, want.lengths)
    torch.testing.assert_close(got.scores, want.scores, atol=1e-4, rtol=1e-5)
    for mine, theirs in zip(got.hypotheses(), want.hypotheses(), strict=True):
        assert mine.tokens == theirs.tokens
        torch.testing.assert_close(
            torch.tensor(mine.token_logprobs),
            torch.tensor(theirs.token_logprobs),
            atol=1e-5,
            rtol=1e-5,
        )
        for name in ("cross", "encoder_self", "decoder_self"):
            x, y = getattr(mine, name), getattr(theirs, name)
            assert (x is None) == (y is None), name
            if x is not None:
                torch.testing.assert_close(x, y, atol=1e-5, rtol=1e-5)


def test_beam_size_one_is_greedy(model: Seq2Seq, src: Tensor) -> None:
    greedy = greedy_decode(model, src, max_length=10)
    beam = beam_search(model, src, beam_size=1, max_length=10)
    assert_same_hypotheses(beam, greedy)


def test_attention_is_one_normalised_row_per_token(
    model: Seq2Seq, src: Tensor, check_attention: Check
) -> None:
    out = beam_search(model, src, beam_size=3, max_length=10)
    check_attention(model, out)


def test_hypothesis_attention_is_its_teacher_forced_attention(model: Seq2Seq, src: Tensor) -> None:
    """Rescoring each returned hypothesis with the full forward pass reproduces its log-probs and
    every attention row: the rows were collected along the hypothesis's own path."""
    out = beam_search(model, src, beam_size=4, max_length=10)
    assert int(out.lengths.max()) >= 3, "too short to compare anything"
    assert_same_hypotheses(out, score_targets(model, src, out.tokens))


def test_each_sentence_alone_as_in_the_batch(model: Seq2Seq, src: Tensor) -> None:
    batch = beam_search(model, src, beam_size=3, max_length=8).hypotheses()
    for i, n in enumerate(src.ne(PAD_ID).sum(1).tolist()):
        alone = beam_search(model, src[i : i + 1, :n], beam_size=3, max_length=8).hypotheses()[0]
        assert alone.tokens == batch[i].tokens
        torch.testing.assert_close(alone.score, batch[i].score, atol=1e-4, rtol=1e-5)


def test_without_weights_same_result_and_no_attention(model: Seq2Seq, src: Tensor) -> None:
    with_weights = beam_search(model, src, beam_size=3, max_length=8)
    without = beam_search(model, src, beam_size=3, max_length=8, need_weights=False)
    assert torch.equal(with_weights.tokens, without.tokens)
    assert without.cross is None and without.encoder_self is None and without.decoder_self is None


# --- the search, on a scripted model -------------------------------------------------------------

TRAP = {  # greedy takes "a" (0.5) and ends with a a </s> (0.1575); the best is b c </s> (0.36)
    (): {a: 0.5, b: 0.4, c: 0.1},
    (a,): {a: 0.35, b: 0.35, c: 0.3},
    (b,): {c: 0.9, a: 0.1},
    (b, c): {EOS_ID: 1.0},
}


def test_beam_finds_what_greedy_misses_with_rows_of_its_own_path(
    scripted: Callable[..., Seq2Seq],
) -> None:
    model = scripted([TRAP, {(): {EOS_ID: 0.9, a: 0.1}}])
    src = torch.tensor([[7, 7, 7, 3], [7, 3, 0, 0]])
    greedy = greedy_decode(model, src, max_length=6).hypotheses()
    assert greedy[0].tokens == [a, a, EOS_ID]
    out = beam_search(model, src, beam_size=2, alpha=0.0, max_length=6)
    assert out.tokens.tolist() == [[b, c, EOS_ID], [EOS_ID, PAD_ID, PAD_ID]]
    assert out.lengths.tolist() == [3, 1]
    torch.testing.assert_close(out.scores, torch.tensor([0.4 * 0.9, 0.9]).log(), atol=1e-4, rtol=0)
    hyp = out.hypotheses()[0]
    # row t attends to sum(prefix) mod 4: (), (b), (b, c) -> positions 0, 1, 3; the "a" path that
    # led the beam at step 0 would have given 0, 0, 0
    assert hyp.cross is not None and hyp.cross.shape == (1, 1, 3, 4)
    assert hyp.cross[0, 0].argmax(-1).tolist() == [0, b % 4, (b + c) % 4]
    assert out.cross is not None and (out.cross[1, ..., 1:, :] == 0).all()  # padded rows


def test_length_penalty_ranks_finished_hypotheses(scripted: Callable[..., Seq2Seq]) -> None:
    """</s> scores log 0.5 and a </s> log 0.45: raw scores prefer the short one, while
    alpha = 1 divides by (5 + |y|) / 6 and prefers the long one."""
    model = scripted({(): {EOS_ID: 0.5, a: 0.5}, (a,): {EOS_ID: 0.9, b: 0.1}})
    src = torch.tensor([[7, 3]])
    assert beam_search(model, src, beam_size=2, alpha=0.0).hypotheses()[0].tokens == [EOS_ID]
    assert beam_search(model, src, beam_size=2, alpha=1.0).hypotheses()[0].tokens == [a, EOS_ID]


def test_live_hypotheses_finish_at_the_length_limit(scripted: Callable[..., Seq2Seq]) -> None:
    never_ends = {
        p: {c: 0.6, b: 0.4} for n in range(4) for p in itertools.product((b, c), repeat=n)
    }
    model = scripted(never_ends)
    out = beam_search(model, torch.tensor([[7, 3]]), beam_size=3, max_length=4)
    assert out.tokens.tolist() == [[c, c, c, c]] and out.lengths.tolist() == [4]
    torch.testing.assert_close(out.scores, torch.tensor([4 * math.log(0.6)]), atol=1e-4, rtol=0)


def test_beam_size_must_be_positive(scripted: Callable[..., Seq2Seq]) -> None:
    with pytest.raises(ValueError, match="beam_size must be at least 1"):
        beam_search(scripted({}), torch.tensor([[7, 3]]), beam_size=0)
