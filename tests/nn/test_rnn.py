"""RNN encoder-decoder specifics: ``concat`` alignments ignore the decoder state, ``location``
never looks past the source and refuses sources longer than its positions, ``none`` has no
attention at all."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import Tensor

from attnscope.nn.base import Seq2Seq
from attnscope.nn.rnn import RNNState

ModelFactory = Callable[..., Seq2Seq]
SourceFactory = Callable[..., Tensor]


def test_concat_alignment_is_the_same_for_every_decoder_state(
    make_model: ModelFactory, src: Tensor, tgt_in: Tensor
) -> None:
    model = make_model("rnn", "concat")
    cross = model(src, tgt_in, need_weights=True).cross  # (B, 1, 1, T, S)
    assert cross is not None
    first = cross[:, :, :, :1].expand_as(cross)
    torch.testing.assert_close(cross, first, atol=1e-6, rtol=0)  # every target word, same row

    enc = model.encode(src)
    tokens = tgt_in[:, 0]
    reference, _ = model.step(tokens, model.init_state(enc), enc, need_weights=True)
    for seed in range(3):
        g = torch.Generator().manual_seed(seed)
        hidden = torch.randn(src.size(0), model.config.hidden_dim, generator=g) * (seed + 1)
        step, _ = model.step(tokens, RNNState(hidden), enc, need_weights=True)
        # the state did matter for the prediction, but not for the alignment
        assert not torch.allclose(step.log_probs, reference.log_probs)
        torch.testing.assert_close(step.cross, reference.cross, atol=1e-6, rtol=0)


@pytest.mark.parametrize("length", [1, 2, 5, 8])
def test_location_never_attends_past_the_source(
    make_model: ModelFactory, make_source: SourceFactory, tgt_in: Tensor, length: int
) -> None:
    model = make_model("rnn", "location", max_source_positions=8)
    src = make_source((length, 8, length), width=8)
    cross = model(src, tgt_in, need_weights=True).cross
    assert cross is not None and cross.shape[-1] == 8
    assert (cross[[0, 2], ..., length:] == 0).all()
    assert (cross[[0, 2], ..., :length] > 0).all()
    torch.testing.assert_close(cross.sum(-1), torch.ones(cross.shape[:-1]), atol=1e-5, rtol=0)


def test_location_refuses_sources_beyond_its_positions(
    make_model: ModelFactory, make_source: SourceFactory, tgt_in: Tensor
) -> None:
    model = make_model("rnn", "location", max_source_positions=8)
    with pytest.raises(ValueError, match="source has 9 tokens; the location score covers 8"):
        model(make_source((9, 4, 2)), tgt_in)


def test_no_attention_model_reads_only_the_final_encoder_state(
    make_model: ModelFactory, src: Tensor, tgt_in: Tensor
) -> None:
    model = make_model("rnn", "none")
    out = model(src, tgt_in, need_weights=True)
    assert out.cross is None and out.encoder_self is None and out.decoder_self is None
    enc = model.encode(src)
    step, _ = model.step(tgt_in[:, 0], model.init_state(enc), enc, need_weights=True)
    assert step.cross is None
    enc.memory = torch.randn_like(enc.memory)  # only enc.final may matter
    again, _ = model.step(tgt_in[:, 0], model.init_state(enc), enc, need_weights=True)
    assert torch.equal(step.log_probs, again.log_probs)
