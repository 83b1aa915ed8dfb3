"""Our multi-head attention equals torch.nn.MultiheadAttention loaded with the same weights, and
its fused path (SDPA, no weights) equals its explicit path (weights returned)."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor, nn

from attnscope.nn.attention import MultiHeadAttention

D, HEADS = 16, 4


def _ours(seed: int = 0) -> MultiHeadAttention:
    torch.manual_seed(seed)
    mha = MultiHeadAttention(D, HEADS).eval()
    for p in mha.parameters():  # non-zero biases, so a mix-up of q/k/v biases would show
        nn.init.normal_(p, std=0.3)
    return mha


def _torch_copy(ours: MultiHeadAttention) -> nn.MultiheadAttention:
    ref = nn.MultiheadAttention(D, HEADS, batch_first=True).eval()
    with torch.no_grad():
        ref.in_proj_weight.copy_(
            torch.cat([ours.q_proj.weight, ours.k_proj.weight, ours.v_proj.weight])
        )
        ref.in_proj_bias.copy_(torch.cat([ours.q_proj.bias, ours.k_proj.bias, ours.v_proj.bias]))
        ref.out_proj.weight.copy_(ours.out_proj.weight)
        ref.out_proj.bias.copy_(ours.out_proj.bias)
    return ref


def _inputs(t: int = 5, s: int = 7) -> tuple[Tensor, Tensor, Tensor]:
    """query (3, T, D), memory (3, S, D) and a key mask (3, S) with 7, 3 and 5 real keys."""
    g = torch.Generator().manual_seed(1)
    query, memory = torch.randn(3, t, D, generator=g), torch.randn(3, s, D, generator=g)
    mask = torch.arange(s)[None, :] < torch.tensor([s, 3, 5])[:, None]
    return query, memory, mask


@pytest.mark.parametrize("self_attention", [False, True], ids=["cross", "self"])
def test_equals_torch_multihead_attention_with_key_padding(self_attention: bool) -> None:
    ours = _ours()
    ref = _torch_copy(ours)
    query, memory, mask = _inputs()
    if self_attention:
        memory = query
        mask = torch.arange(query.size(1))[None, :] < torch.tensor([5, 2, 4])[:, None]
    out, weights = ours(query, memory, mask[:, None, None, :], need_weights=True)
    ref_out, ref_weights = ref(
        query, memory, memory, key_padding_mask=~mask, need_weights=True, average_attn_weights=False
    )
    assert weights is not None and weights.shape == (3, HEADS, query.size(1), memory.size(1))
    torch.testing.assert_close(out, ref_out, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(weights, ref_weights, atol=1e-6, rtol=1e-5)
    fused, none = ours(query, memory, mask[:, None, None, :], need_weights=False)
    assert none is None
    torch.testing.assert_close(fused, ref_out, atol=1e-5, rtol=1e-4)


def test_equals_torch_with_a_causal_mask() -> None:
    ours = _ours(seed=2)
    ref = _torch_copy(ours)
    query, _, _ = _inputs()
    causal = torch.ones(5, 5, dtype=torch.bool).tril()
    out, weights = ours(query, query, causal[None, None], need_weights=True)
    ref_out, ref_weights = ref(
        query, query, query, attn_mask=~causal, need_weights=True, average_attn_weights=False
    )
    torch.testing.assert_close(out, ref_out, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(weights, ref_weights, atol=1e-6, rtol=1e-5)
    assert weights is not None and (weights.triu(1) == 0).all()


@pytest.mark.parametrize("masked", [True, False])
def test_fused_path_equals_explicit_path(masked: bool) -> None:
    ours = _ours(seed=3)
    query, memory, mask = _inputs(t=4, s=9)
    attn_mask = mask[:, None, None, :] if masked else None
    explicit, weights = ours(query, memory, attn_mask, need_weights=True)
    fused, _ = ours(query, memory, attn_mask, need_weights=False)
    torch.testing.assert_close(fused, explicit, atol=1e-5, rtol=1e-5)
    assert weights is not None
    torch.testing.assert_close(weights.sum(-1), torch.ones(3, HEADS, 4), atol=1e-5, rtol=0)
    if masked:
        assert (weights.masked_select(~mask[:, None, None, :]) == 0).all()


def test_ready_made_keys_values_equal_projecting_them() -> None:
    ours = _ours(seed=4)
    query, memory, mask = _inputs()
    direct, w1 = ours(query, memory, mask[:, None, None, :], need_weights=True)
    cached, w2 = ours(
        query, kv=ours.project_kv(memory), mask=mask[:, None, None, :], need_weights=True
    )
    assert torch.equal(direct, cached) and w1 is not None and w2 is not None and torch.equal(w1, w2)


def test_heads_must_divide_d_model() -> None:
    with pytest.raises(ValueError, match="d_model=10 is not divisible by heads=4"):
        MultiHeadAttention(10, 4)
