"""Teacher-forced scoring of given targets: the log-probability of each target token under the
full forward pass, padding that changes nothing, attention in the decoders' format."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from attnscope.decoding import DecodeOutput, score_targets
from attnscope.nn.base import Seq2Seq
from attnscope.nn.config import BOS_ID, EOS_ID, PAD_ID

Check = Callable[[Seq2Seq, DecodeOutput], None]


def _targets() -> Tensor:
    """Four targets of 5, 2, 3 and 1 tokens, each ending with EOS, right-padded."""
    rows = [[9, 8, 7, 6, EOS_ID], [11, EOS_ID], [12, 13, EOS_ID], [EOS_ID]]
    return torch.tensor([r + [PAD_ID] * (5 - len(r)) for r in rows])


def test_log_probs_of_the_given_tokens(model: Seq2Seq, src: Tensor) -> None:
    tgt = _targets()
    out = score_targets(model, src, tgt)
    assert out.lengths.tolist() == [5, 2, 3, 1]
    assert out.source_lengths.tolist() == [7, 4, 6, 2]
    assert torch.equal(out.tokens, tgt)
    for i, n in enumerate(out.lengths.tolist()):
        tgt_in = torch.cat([torch.tensor([BOS_ID]), tgt[i, : n - 1]])[None]
        n_src = int(out.source_lengths[i])
        log_probs = torch.log_softmax(model(src[i : i + 1, :n_src], tgt_in).logits[0], -1)
        expected = log_probs.gather(-1, tgt[i, :n, None]).squeeze(-1)
        torch.testing.assert_close(out.token_logprobs[i, :n], expected, atol=1e-5, rtol=1e-5)
        assert (out.token_logprobs[i, n:] == 0).all()
    torch.testing.assert_close(out.scores, out.token_logprobs.sum(1))
    assert (out.token_logprobs <= 0).all()


def test_attention_rows_sum_to_one_and_skip_padding(
    model: Seq2Seq, src: Tensor, check_attention: Check
) -> None:
    check_attention(model, score_targets(model, src, _targets()))


def test_no_weights_asked(model: Seq2Seq, src: Tensor) -> None:
    with_weights = score_targets(model, src, _targets())
    out = score_targets(model, src, _targets(), need_weights=False)
    assert out.cross is None and out.encoder_self is None and out.decoder_self is None
    torch.testing.assert_close(
        out.token_logprobs, with_weights.token_logprobs, atol=1e-5, rtol=1e-5
    )
