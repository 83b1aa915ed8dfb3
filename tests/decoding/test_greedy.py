"""Greedy decoding: well-formed attention for a padded batch, agreement with teacher-forced
scoring of its own output, and the bookkeeping of finished sentences."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from attnscope.decoding import DecodeOutput, beam_search, greedy_decode, score_targets
from attnscope.nn.base import Seq2Seq
from attnscope.nn.config import EOS_ID

Check = Callable[[Seq2Seq, DecodeOutput], None]


def test_attention_rows_sum_to_one_and_skip_padding(
    model: Seq2Seq, src: Tensor, check_attention: Check
) -> None:
    out = greedy_decode(model, src, max_length=10)
    check_attention(model, out)


def test_equals_teacher_forced_scoring_of_its_output(model: Seq2Seq, src: Tensor) -> None:
    """Stepping the decoder (greedy) and the full forward pass over the greedy output
    (score_targets) give the same log-probabilities and the same attention."""
    out = greedy_decode(model, src, max_length=10)
    assert int(out.lengths.max()) >= 3, "too short to compare anything"
    forced = score_targets(model, src, out.tokens)
    assert torch.equal(forced.lengths, out.lengths)
    torch.testing.assert_close(forced.token_logprobs, out.token_logprobs, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(forced.scores, out.scores, atol=1e-4, rtol=1e-5)
    for mine, theirs in zip(out.hypotheses(), forced.hypotheses(), strict=True):
        assert mine.tokens == theirs.tokens
        for name in ("cross", "encoder_self", "decoder_self"):
            a, b = getattr(mine, name), getattr(theirs, name)
            assert (a is None) == (b is None)
            if a is not None:
                torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_each_token_is_the_most_likely_one(model: Seq2Seq, src: Tensor) -> None:
    out = greedy_decode(model, src, max_length=8)
    tgt = out.tokens
    bos = torch.full_like(tgt[:, :1], model.config.bos_id)
    logits = model(src, torch.cat([bos, tgt[:, :-1]], 1)).logits
    logits[..., [model.config.pad_id, model.config.bos_id]] = float("-inf")  # never emitted
    real = torch.arange(tgt.size(1))[None, :] < out.lengths[:, None]
    assert torch.equal(logits.argmax(-1)[real], tgt[real])


def test_without_weights_same_tokens_and_no_attention(model: Seq2Seq, src: Tensor) -> None:
    with_weights = greedy_decode(model, src, max_length=8)
    without = greedy_decode(model, src, max_length=8, need_weights=False)
    assert torch.equal(with_weights.tokens, without.tokens)
    assert without.cross is None and without.encoder_self is None and without.decoder_self is None


def test_each_sentence_decodes_alone_as_in_the_batch(model: Seq2Seq, src: Tensor) -> None:
    batch = greedy_decode(model, src, max_length=8).hypotheses()
    for b, n in enumerate(src.ne(0).sum(1).tolist()):
        alone = greedy_decode(model, src[b : b + 1, :n], max_length=8).hypotheses()[0]
        assert alone.tokens == batch[b].tokens
        if alone.cross is not None:
            torch.testing.assert_close(alone.cross, batch[b].cross, atol=1e-6, rtol=1e-5)


def test_finished_sentences_stop_and_are_padded(scripted: Callable[..., Seq2Seq]) -> None:
    a, b, c = 4, 5, 6
    model = scripted(
        [
            {(): {a: 0.6, b: 0.4}, (a,): {b: 0.7, EOS_ID: 0.3}, (a, b): {EOS_ID: 1.0}},
            {(): {EOS_ID: 0.8, c: 0.2}},  # an empty translation
            {(): {c: 1.0}, (c,): {c: 1.0}, (c, c): {c: 1.0}, (c, c, c): {c: 1.0}},  # never ends
        ]
    )
    src = torch.tensor([[7, 7, 3], [7, 3, 0], [3, 0, 0]])
    out = greedy_decode(model, src, max_length=4)
    assert out.tokens.tolist() == [[a, b, EOS_ID, 0], [EOS_ID, 0, 0, 0], [c, c, c, c]]
    assert out.lengths.tolist() == [3, 1, 4]
    assert out.token_logprobs[0, 3] == 0 and (out.token_logprobs[1, 1:] == 0).all()
    torch.testing.assert_close(out.scores, out.token_logprobs.sum(1))
    torch.testing.assert_close(
        out.scores[0], torch.tensor(0.6 * 0.7 * 1.0).log(), atol=1e-4, rtol=0
    )
    assert [len(h.tokens) for h in out.hypotheses()] == [3, 1, 4]
    # the decoding stops as soon as every sentence has finished
    assert greedy_decode(model, src[:2], max_length=9).tokens.size(1) == 3


def test_default_budget_is_ratio_times_longest_source_plus_offset(
    scripted: Callable[..., Seq2Seq],
) -> None:
    c = 6
    never_ends = scripted({tuple([c] * i): {c: 1.0} for i in range(20)})
    src = torch.tensor([[7, 7, 3], [7, 3, 0]])
    assert greedy_decode(never_ends, src, max_len_ratio=2.0, max_len_offset=1).tokens.size(1) == 7
    assert greedy_decode(never_ends, src, max_len_ratio=1.5, max_len_offset=0).tokens.size(1) == 5


def test_padding_and_bos_are_never_emitted(model: Seq2Seq, src: Tensor) -> None:
    embed = model.get_submodule("embed")
    assert isinstance(embed, torch.nn.Embedding)
    with torch.no_grad():  # make <s> and <pad> the most likely tokens everywhere
        embed.weight[model.config.bos_id] *= 50
        embed.weight[model.config.pad_id] = embed.weight[model.config.bos_id]
    for out in (
        greedy_decode(model, src, max_length=8),
        beam_search(model, src, beam_size=3, max_length=8),
    ):
        emitted = out.tokens[torch.arange(out.tokens.size(1))[None, :] < out.lengths[:, None]]
        assert not emitted.eq(model.config.bos_id).any()
        assert not emitted.eq(model.config.pad_id).any()
