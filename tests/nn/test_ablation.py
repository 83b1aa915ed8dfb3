"""Switching heads off: nothing changes when none is, every head of a layer off changes the
output, one Transformer head off equals zeroing its slice of the output projection, and the
choice stays inside its block."""

from __future__ import annotations

import pytest
import torch

from attnscope.decoding import greedy_decode
from attnscope.nn.ablation import disabled_heads

from .conftest import build_tiny, padded_source, random_targets

KINDS = [("transformer", "cross"), ("transformer", "encoder_self"), ("transformer", "decoder_self"),
         ("rnn", "cross"), ("self_attentive_rnn", "cross"), ("self_attentive_rnn", "encoder_self")]


@pytest.mark.parametrize(("architecture", "kind"), KINDS)
def test_all_heads_of_a_layer_off_changes_the_output_and_none_off_does_not(architecture: str, kind: str) -> None:
    model = build_tiny(architecture)
    src, tgt = padded_source([6, 4]), random_targets(2, 5)
    base = model(src, tgt).logits
    with disabled_heads(model, []):
        assert torch.equal(model(src, tgt).logits, base)
    heads = range(model.config.num_heads)
    with disabled_heads(model, [(kind, 0, h) for h in heads]):
        off = model(src, tgt).logits
        decoded = greedy_decode(model, src, need_weights=True, max_length=6)
    assert not torch.allclose(off, base, atol=1e-4)
    assert torch.equal(model(src, tgt).logits, base)  # the block is over: nothing is left switched off
    assert decoded.cross is not None  # attention still comes back while heads are off


def test_a_transformer_head_off_equals_zeroing_its_output_projection_slice() -> None:
    model = build_tiny("transformer")
    src, tgt = padded_source([6, 4]), random_targets(2, 5)
    with disabled_heads(model, [("cross", 1, 1)]):
        ablated = model(src, tgt).logits
        fused = model(src, tgt, need_weights=False).logits
        eager = model(src, tgt, need_weights=True).logits
    attn = model.decoder_layers[1].cross_attn  # type: ignore[index]
    dh = attn.head_dim
    with torch.no_grad():
        attn.out_proj.weight[:, dh : 2 * dh] = 0.0
    assert torch.allclose(model(src, tgt).logits, ablated, atol=1e-5)
    assert torch.allclose(fused, eager, atol=1e-5)  # the fused and the weight-returning paths agree


def test_incremental_decoding_sees_the_same_ablation_as_the_full_pass() -> None:
    """Greedy decoding's attention under ablation equals the teacher-forced pass on its output."""
    from attnscope.decoding import score_targets

    model = build_tiny("transformer")
    src = padded_source([7])
    with disabled_heads(model, [("cross", 0, 0), ("decoder_self", 1, 1)]):
        out = greedy_decode(model, src, need_weights=True, max_length=6)
        forced = score_targets(model, src, out.tokens)
    assert out.cross is not None and forced.cross is not None
    t = int(out.lengths[0])
    assert torch.allclose(out.cross[0, :, :, :t], forced.cross[0, :, :, :t], atol=1e-5)


@pytest.mark.parametrize(
    ("architecture", "head", "message"),
    [
        ("transformer", ("cross", 5, 0), "no layer 5"),
        ("transformer", ("cross", 0, 9), "no head 9"),
        ("transformer", ("sideways", 0, 0), "no 'sideways' attention"),
        ("rnn", ("encoder_self", 0, 0), "no 'encoder_self' attention"),
        ("rnn", ("cross", 1, 0), "no layer 1"),
    ],
)
def test_a_head_that_does_not_exist_is_named(architecture: str, head: tuple[str, int, int], message: str) -> None:
    model = build_tiny(architecture)
    with pytest.raises(ValueError, match=message), disabled_heads(model, [head]):
        pass


def test_the_rnn_without_attention_has_no_head_to_switch_off() -> None:
    with pytest.raises(ValueError, match="has no 'cross' attention"), disabled_heads(build_tiny("rnn", "none"), [("cross", 0, 0)]):
        pass
