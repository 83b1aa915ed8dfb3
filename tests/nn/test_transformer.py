"""Transformer specifics: both norm placements decode incrementally like the full pass, the
key/value cache grows one position per step, and positions past ``max_positions`` are refused."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import Tensor

from attnscope.nn.base import Seq2Seq
from attnscope.nn.transformer import Transformer

ModelFactory = Callable[..., Seq2Seq]
SourceFactory = Callable[..., Tensor]


@pytest.mark.parametrize("pre_norm", [True, False], ids=["pre-norm", "post-norm"])
def test_incremental_equals_forward_for_both_norm_placements(
    make_model: ModelFactory, src: Tensor, tgt_in: Tensor, pre_norm: bool
) -> None:
    model = make_model(
        "transformer", pre_norm=pre_norm, encoder_layers=3, decoder_layers=2, heads=4
    )
    assert isinstance(model, Transformer)
    full = model(src, tgt_in, need_weights=True)
    fused = model(src, tgt_in, need_weights=False)
    torch.testing.assert_close(fused.logits, full.logits, atol=1e-5, rtol=1e-5)
    assert (
        full.encoder_self is not None and full.cross is not None and full.decoder_self is not None
    )
    assert full.encoder_self.shape == (3, 3, 4, 7, 7)  # encoder layers, not decoder layers
    assert full.cross.shape == (3, 2, 4, 5, 7)
    enc = model.encode(src, need_weights=True)
    torch.testing.assert_close(enc.encoder_self, full.encoder_self)
    state = model.init_state(enc)
    expected = torch.log_softmax(full.logits, -1)
    for t in range(tgt_in.size(1)):
        step, state = model.step(tgt_in[:, t], state, enc, need_weights=True)
        assert state.position == t + 1
        assert state.self_kv is not None
        assert all(k.size(2) == t + 1 and v.size(2) == t + 1 for k, v in state.self_kv)
        torch.testing.assert_close(step.log_probs, expected[:, t], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(step.cross, full.cross[:, :, :, t], atol=1e-6, rtol=1e-5)
        torch.testing.assert_close(
            step.decoder_self, full.decoder_self[:, :, :, t, : t + 1], atol=1e-6, rtol=1e-5
        )


def test_reorder_keeps_position_and_selects_cache_rows(
    make_model: ModelFactory, src: Tensor, tgt_in: Tensor
) -> None:
    model = make_model("transformer")
    assert isinstance(model, Transformer)
    enc = model.encode(src)
    state = model.init_state(enc)
    for t in range(3):
        _, state = model.step(tgt_in[:, t], state, enc)
    index = torch.tensor([1, 1, 0])
    moved = state.reorder(index)
    assert moved.position == state.position == 3
    assert state.self_kv is not None and moved.self_kv is not None
    for (k, v), (k2, v2) in zip(state.self_kv, moved.self_kv, strict=True):
        assert torch.equal(k2, k[index]) and torch.equal(v2, v[index])
    for (k, v), (k2, v2) in zip(state.cross_kv, moved.cross_kv, strict=True):
        assert torch.equal(k2, k[index]) and torch.equal(v2, v[index])


def test_positions_beyond_the_table_are_refused(
    make_model: ModelFactory, make_source: SourceFactory
) -> None:
    model = make_model("transformer", max_positions=6)
    with pytest.raises(ValueError, match="sequence of 7 tokens exceeds max_positions"):
        model.encode(make_source((7, 3)))
    enc = model.encode(make_source((6, 3)))
    state = model.init_state(enc)
    tokens = torch.full((2,), model.config.bos_id)
    for _ in range(6):
        _, state = model.step(tokens, state, enc)
    with pytest.raises(ValueError, match="exceeds max_positions"):
        model.step(tokens, state, enc)


def test_output_layer_is_the_embedding_matrix(
    make_model: ModelFactory, src: Tensor, tgt_in: Tensor
) -> None:
    """Moving the embedding of a token the inputs do not use moves that token's logit, and only it."""
    model = make_model("transformer")
    assert isinstance(model, Transformer)
    unused = next(i for i in range(4, model.config.vocab_size) if i not in src and i not in tgt_in)
    before = model(src, tgt_in).logits
    with torch.no_grad():
        model.embed.weight[unused] += 1.0
    after = model(src, tgt_in).logits
    assert not torch.allclose(before[..., unused], after[..., unused])
    others = torch.arange(model.config.vocab_size) != unused
    assert torch.equal(before[..., others], after[..., others])
