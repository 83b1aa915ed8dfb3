"""One Transformer decoder layer for one new token per row, as plain tensor operations.

Decoding runs a layer once per output token. At batch 1 on the CPU its arithmetic is a few
matrix-vector products, and the time around them (module calls, attribute lookups, reshapes,
hooks, the checks of the general layer code) cost as much again. :func:`layer_step` is the
same arithmetic as :class:`~app.nn.transformer.DecoderLayer` (the same kernels on the same
operands in the same order, so the same bits) written straight through: the weights come
prepared once per decode (:func:`prepare`: query/key/value fused, transposed or packed; see
:mod:`app.nn.inference`), and the caller keeps each step's attention rows.

It covers evaluation-mode layers, pre- or post-norm, float or int8 (:mod:`app.nn.quantize`: int8
products in the same places); training, switched-off heads (:mod:`app.nn.ablation`)
and score recording (:mod:`app.nn.recording`) take the general layer code (:func:`applies`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

import torch
from torch import Tensor, nn

from app.nn import ablation, inference, recording
from app.nn.attention import MultiHeadAttention
from app.nn.kv_cache import KVCache

if TYPE_CHECKING:
    from app.nn.transformer import DecoderLayer

NEG_INF = float("-inf")


Linear = Callable[[Tensor], Tensor]  # x (N, in) -> (N, out)


@dataclass(frozen=True)
class LayerWeights:
    """One decoder layer laid out for a step: each linear layer as a function of its input (its
    cached :func:`app.nn.inference.product`, float or int8), layer norms as (weight, bias)."""

    pre_norm: bool
    eps: float
    heads: int
    norm_self: tuple[Tensor, Tensor]
    norm_cross: tuple[Tensor, Tensor]
    norm_ff: tuple[Tensor, Tensor]
    qkv: Linear  # (N, D) -> (N, 3D): queries, keys, values side by side
    self_out: Linear
    cross_q: Linear
    cross_out: Linear
    ff_in: Linear
    ff_out: Linear


def linear_product(layer: nn.Module) -> Linear:
    """A linear layer as a function of its input: its cached product (float or int8), or, for
    another kind of module, its forward."""
    if inference.fusable(layer):  # a float or int8 linear layer: its cached product
        return inference.product(layer, "linear", (cast(nn.Linear, layer),))
    return cast(Linear, layer.forward)


def _norm(norm: nn.LayerNorm) -> tuple[Tensor, Tensor]:
    return norm.weight, norm.bias


def qkv_product(sa: MultiHeadAttention) -> Linear:
    """An attention's query, key and value projections side by side, (N, D) -> (N, 3D): one
    fused product where they fuse."""
    if inference.fusable(sa.q_proj, sa.k_proj, sa.v_proj):
        return inference.product(sa, "qkv", (sa.q_proj, sa.k_proj, sa.v_proj))
    q, k, v = linear_product(sa.q_proj), linear_product(sa.k_proj), linear_product(sa.v_proj)
    return lambda x: torch.cat([q(x), k(x), v(x)], dim=-1)


def prepare(layers: nn.ModuleList) -> list[LayerWeights] | None:
    """The weights of every decoder layer, or None when a step cannot use them (training,
    gradients recorded, a float linear layer without bias)."""
    if not inference.decoding() or layers.training:
        return None
    out = []
    for module in layers:
        layer = cast("DecoderLayer", module)
        sa, ca = layer.self_attn, layer.cross_attn
        first, _, _, last = layer.ff.net
        linears = (sa.q_proj, sa.k_proj, sa.v_proj, sa.out_proj, ca.q_proj, ca.out_proj, first, last)
        if any(type(lin) is nn.Linear and lin.bias is None for lin in linears):
            return None
        out.append(
            LayerWeights(
                pre_norm=layer.res_self.pre_norm,
                eps=layer.res_self.norm.eps,
                heads=sa.heads,
                norm_self=_norm(layer.res_self.norm),
                norm_cross=_norm(layer.res_cross.norm),
                norm_ff=_norm(layer.res_ff.norm),
                qkv=qkv_product(sa),
                self_out=linear_product(sa.out_proj),
                cross_q=linear_product(ca.q_proj),
                cross_out=linear_product(ca.out_proj),
                ff_in=linear_product(first),
                ff_out=linear_product(last),
            )
        )
    return out


def applies() -> bool:
    """Whether a step may take :func:`layer_step` now: no gradients, no heads switched off, no
    score recording in this context."""
    return inference.decoding() and not ablation.any_off() and not recording.active()


def layer_step(
    w: LayerWeights,
    x: Tensor,
    cache: KVCache,
    cross: tuple[Tensor, Tensor],
    blocked: Tensor,
    *,
    need_weights: bool,
) -> tuple[Tensor, Tensor | None, Tensor | None, KVCache]:
    """x: (N, D) one new position per row; ``cache`` the earlier positions' self keys/values;
    cross: keys and values (G, H, S, Dh), contiguous, rows ``n*g .. n*g+g-1`` sharing sentence
    ``n``'s (N = G * g); blocked: (G, 1, 1, S) True at padded source positions.

    Returns x (N, D), the self weights (N, H, t+1) and cross weights (N, H, S) when asked, and
    the cache grown by this position (written in place)."""
    n, d = x.shape
    heads = w.heads
    dh = d // heads
    scale = math.sqrt(dh)

    # self-attention over the cache and this position
    qkv = w.qkv(layer_norm(w, x, w.norm_self) if w.pre_norm else x)
    qkv = qkv.view(n, 1, 3, heads, dh).permute(2, 0, 3, 1, 4)  # (3, N, H, 1, Dh)
    cache = cache.append(qkv[1:])
    keys, values = cache.pair()  # (N, H, t+1, Dh)
    t = keys.size(2)
    scores = torch.bmm(qkv[0].reshape(n * heads, 1, dh), keys.reshape(n * heads, t, dh).transpose(1, 2))
    self_w = scores.div_(scale).softmax(-1)  # (N*H, 1, t+1)
    out = torch.bmm(self_w, values.reshape(n * heads, t, dh)).view(n, d)
    x = self_attention_residual(w, x, out)
    x, cross_w = cross_and_feed_forward(w, x, cross, blocked)
    if not need_weights:
        return x, None, None, cache
    s = cross_w.size(-1)
    return x, self_w.view(n, heads, t), cross_w.transpose(1, 2).reshape(n, heads, s), cache


def layer_norm(w: LayerWeights, y: Tensor, p: tuple[Tensor, Tensor]) -> Tensor:
    """One of the layer's norms (weight, bias) ``p`` applied to y (N, D)."""
    return nn.functional.layer_norm(y, (y.size(-1),), p[0], p[1], w.eps)


def self_attention_residual(w: LayerWeights, x: Tensor, heads_out: Tensor) -> Tensor:
    """x (N, D) plus self-attention's output projection of the heads' outputs (N, D), normed
    after for post-norm."""
    out = w.self_out(heads_out)
    return x + out if w.pre_norm else layer_norm(w, x + out, w.norm_self)


def cross_and_feed_forward(
    w: LayerWeights, x: Tensor, cross: tuple[Tensor, Tensor], blocked: Tensor
) -> tuple[Tensor, Tensor]:
    """The layer after self-attention (shared with :mod:`app.decoding.static_greedy`): cross
    keys and values (G, H, S, Dh), rows ``n*g .. n*g+g-1`` of x (N, D) sharing sentence ``n``'s;
    blocked (G, 1, 1, S). Returns x (N, D) and the cross weights (G, H, g, S)."""
    n, d = x.shape
    heads = w.heads
    dh = d // heads
    scale = math.sqrt(dh)

    # cross-attention: the g rows of a sentence are g queries of one attention over its keys
    k, v = cross
    groups, _, s, _ = k.shape
    g = n // groups
    q = w.cross_q(layer_norm(w, x, w.norm_cross) if w.pre_norm else x)
    q = q.view(groups, g, heads, dh).transpose(1, 2).reshape(groups * heads, g, dh)
    scores = torch.bmm(q, k.view(groups * heads, s, dh).transpose(1, 2)).div_(scale)
    cross_w = scores.view(groups, heads, g, s).masked_fill(blocked, NEG_INF).softmax(-1)
    out = torch.bmm(cross_w.view(groups * heads, g, s), v.view(groups * heads, s, dh))
    out = out.view(groups, heads, g, dh).transpose(1, 2).reshape(n, d)
    out = w.cross_out(out)
    x = x + out if w.pre_norm else layer_norm(w, x + out, w.norm_cross)

    # feed-forward
    hidden = torch.relu(w.ff_in(layer_norm(w, x, w.norm_ff) if w.pre_norm else x))
    out = w.ff_out(hidden)
    return (x + out if w.pre_norm else layer_norm(w, x + out, w.norm_ff)), cross_w
