"""The decoding step's straight-through layer (attnscope.nn.layers on prepared weights) computes exactly what the
general layer code computes, bit for bit, and the in-place key/value cache (attnscope.nn.kv_cache)
behaves like an immutable value."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import Tensor, nn

from attnscope.nn.ablation import disabled_heads
from attnscope.nn.base import Seq2Seq
from attnscope.nn.kv_cache import GROWTH, KVCache
from attnscope.nn.outputs import StepOutput
from attnscope.nn.transformer import Transformer, TransformerState

ModelFactory = Callable[..., Seq2Seq]
SourceFactory = Callable[..., Tensor]


def _transformer(make_model: ModelFactory, pre_norm: bool) -> Transformer:
    model = make_model("transformer", heads=4, pre_norm=pre_norm, decoder_layers=2)
    assert isinstance(model, Transformer)
    for p in model.parameters():  # non-zero biases and norms, so a swapped parameter shows
        if p.dim() == 1:
            nn.init.normal_(p, std=0.3)
    return model


def _decode(
    model: Transformer, src: Tensor, tokens: Tensor, group: int, fast: bool
) -> list[tuple[StepOutput, TransformerState]]:
    """Steps over tokens (N, T), N = sentences * group, with or without the fast layer."""
    with torch.no_grad():
        enc = model.encode(src)
        # the native steps: tests/nn/test_native_step.py
        state = model.init_state(enc, group=group, path="prepared" if fast else "general")
        assert (state.weights is not None) == fast
        out = []
        for t in range(tokens.size(1)):
            step, state = model.step(tokens[:, t], state, enc, need_weights=True)
            out.append((step, state))
        return out


@pytest.mark.parametrize("pre_norm", [True, False], ids=["pre-norm", "post-norm"])
@pytest.mark.parametrize("group", [1, 3], ids=["one-row-per-sentence", "three-beams"])
def test_fast_step_equals_the_general_layer_bit_for_bit(
    make_model: ModelFactory, make_source: SourceFactory, pre_norm: bool, group: int
) -> None:
    model = _transformer(make_model, pre_norm)
    src = make_source((7, 4))
    g = torch.Generator().manual_seed(3)
    tokens = torch.randint(4, 40, (2 * group, 2 * GROWTH + 3), generator=g)  # the cache grows twice
    fast, general = (_decode(model, src, tokens, group, f) for f in (True, False))
    for (a, sa), (b, sb) in zip(fast, general, strict=True):
        assert torch.equal(a.log_probs, b.log_probs)
        assert a.cross is not None and b.cross is not None and torch.equal(a.cross, b.cross)
        assert a.decoder_self is not None and b.decoder_self is not None
        assert torch.equal(a.decoder_self, b.decoder_self)
        assert sa.self_kv is not None and sb.self_kv is not None
        for (ka, va), (kb, vb) in zip(sa.self_kv, sb.self_kv, strict=True):
            assert torch.equal(ka, kb) and torch.equal(va, vb)


def test_fast_step_is_left_for_the_general_code_when_heads_are_off(
    make_model: ModelFactory, make_source: SourceFactory
) -> None:
    """Switched-off heads are honoured by every step (the fast layer does not know of them)."""
    model = _transformer(make_model, True)
    src, tokens = make_source((6, 5)), torch.tensor([[2], [2]])
    plain = _decode(model, src, tokens, 1, True)[0][0]
    with disabled_heads(model, [("cross", 1, 0), ("decoder_self", 0, 2)]):
        ablated = _decode(model, src, tokens, 1, True)[0][0]
        reference = _decode(model, src, tokens, 1, False)[0][0]
    assert torch.equal(ablated.log_probs, reference.log_probs)
    assert not torch.allclose(ablated.log_probs, plain.log_probs)


def test_int8_layers_take_the_fast_step_with_the_same_numbers(
    make_model: ModelFactory, make_source: SourceFactory
) -> None:
    from attnscope.nn.quantize import quantize

    model = quantize(_transformer(make_model, True), "int8")
    assert isinstance(model, Transformer)
    src = make_source((7, 4))
    tokens = torch.randint(4, 40, (4, 6), generator=torch.Generator().manual_seed(5))
    fast, general = (_decode(model, src, tokens, 2, f) for f in (True, False))
    for (a, _), (b, _) in zip(fast, general, strict=True):
        assert torch.equal(a.log_probs, b.log_probs)
        assert a.cross is not None and b.cross is not None and torch.equal(a.cross, b.cross)


def test_cache_appends_in_place_and_branches_safely() -> None:
    g = torch.Generator().manual_seed(0)
    step = [torch.randn(2, 3, 2, 1, 4, generator=g) for _ in range(4)]  # (2, N, H, 1, Dh)
    cache = KVCache().append(step[0]).append(step[1])
    grown = cache.append(step[2])
    assert grown.buffer is cache.buffer  # written in place, no copy
    other = cache.append(step[3])  # a second branch from the same cache: must not overwrite
    assert other.buffer is not cache.buffer
    assert torch.equal(grown.keys, torch.cat([s[0] for s in step[:3]], dim=2))
    assert torch.equal(other.values, torch.cat([step[0][1], step[1][1], step[3][1]], dim=2))
    assert cache.keys.size(2) == 2
    picked = grown.select(torch.tensor([2, 2, 0]))
    assert torch.equal(picked.keys, grown.keys[[2, 2, 0]])
    assert torch.equal(picked.values, grown.values[[2, 2, 0]])
    again = picked.append(step[3][:, :3])
    assert torch.equal(again.keys[:, :, :3], grown.keys[[2, 2, 0]])
