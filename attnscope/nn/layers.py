"""The Transformer's layers written once: each sublayer a small function, the decoder and
encoder layers built from them.

One definition serves every pass: the teacher-forced forward pass (training, anatomy, scoring),
the incremental decoding step (one new position per row, a growing key/value cache) and the
fixed-shape CUDA-graph greedy step (:mod:`attnscope.decoding.static_greedy`, the same functions on
static buffers). What differs between them is only what the functions are given:

- the **weights** (:class:`LayerWeights`): the modules' own layers (:func:`general`: training,
  gradients, any layout), or products laid out once per decode (:func:`prepare`: fused
  query/key/value, transposed or packed, float or int8; see :mod:`attnscope.nn.inference`);
- the **self keys and values**: :meth:`~attnscope.nn.kv_cache.KVCache.append` (a pass or a step) or a
  write into a static buffer at the step's position (:data:`SelfKV`);
- the **masks** (a causal one, none for one new position, the unwritten positions of a buffer).

Attention itself is :meth:`attnscope.nn.attention.MultiHeadAttention.attend_heads` (switched-off heads,
score recording and attention dropout live there, for every path). The native C++ steps
(:mod:`attnscope.nn.native`) are fast paths held to this definition by tests
(tests/nn/test_native_step.py: float bit for bit, int8 within float rounding).

A new layout option (another norm, a gated feed-forward, a position bias) is a change to one of
these functions or to the module whose function they call, and then holds for every path.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar, cast

import torch
from torch import Tensor, nn

from attnscope.nn import inference
from attnscope.nn.attention import MultiHeadAttention
from attnscope.nn.kv_cache import KVCache

if TYPE_CHECKING:
    from attnscope.nn.transformer import DecoderLayer

Linear = Callable[[Tensor], Tensor]  # x (..., in) -> (..., out)
SelfKV = Callable[[Tensor], tuple[Tensor, Tensor]]  # new keys/values (2, N, H, T, Dh) -> all (N, H, t, Dh) each
T = TypeVar("T")


def norm(module: nn.Module, x: Tensor) -> Tensor:
    """A layer's norm applied to x (..., D): a layer norm as the function (the same arithmetic as
    calling the module, without the call's overhead); another norm module is called."""
    if type(module) is nn.LayerNorm:
        return nn.functional.layer_norm(x, module.normalized_shape, module.weight, module.bias, module.eps)
    return cast(Tensor, module(x))


def sublayer(
    x: Tensor,
    norm_module: nn.Module,
    pre_norm: bool,
    fn: Callable[[Tensor], tuple[Tensor, T]],
    dropout: Linear | None = None,
) -> tuple[Tensor, T]:
    """x (..., D) -> ``x + dropout(fn(norm(x)))`` (pre-norm) or ``norm(x + dropout(fn(x)))``
    (post-norm), and what ``fn`` returned beside its output (attention weights or None)."""
    out, extra = fn(norm(norm_module, x) if pre_norm else x)
    x = x + (out if dropout is None else dropout(out))
    return (x if pre_norm else norm(norm_module, x)), extra


@dataclass(frozen=True)
class LayerWeights:
    """One decoder layer as the functions :func:`decoder_layer` calls: each linear layer as a
    function of its input, the norms as modules, the attentions (for their kernel); ``ff_in`` and
    ``ff_out`` are the feed-forward's prepared products, for the native steps (None otherwise);
    ``dropout`` the residual dropout while training."""

    pre_norm: bool
    self_attn: MultiHeadAttention
    cross_attn: MultiHeadAttention
    norm_self: nn.Module
    norm_cross: nn.Module
    norm_ff: nn.Module
    qkv: Linear  # (..., D) -> (..., 3D): queries, keys, values side by side
    self_out: Linear
    cross_q: Linear
    cross_out: Linear
    feed_forward: Linear
    ff_in: Linear | None = None
    ff_out: Linear | None = None
    dropout: Linear | None = None

    @property
    def heads(self) -> int:
        return self.self_attn.heads

    @property
    def eps(self) -> float:
        return float(getattr(self.norm_self, "eps", 0.0))


def self_attention(
    w: LayerWeights, y: Tensor, kv: SelfKV, mask: Tensor | None, need_weights: bool, bias: Tensor | None = None
) -> tuple[Tensor, Tensor | None]:
    """y (B, T, D) normed input -> the projected output (B, T, D) and, if asked, the weights
    (B, H, T, t) over the keys ``kv`` returns once given this pass's (the cache or buffer);
    mask broadcastable to (B, H, T, t), True where a query may attend; ``bias`` None or
    (1, H, T, t) added to the scores (T5's relative positions)."""
    attn = w.self_attn
    b, t, _ = y.shape
    qkv = w.qkv(y).view(b, t, 3, attn.heads, attn.head_dim).permute(2, 0, 3, 1, 4)  # (3, B, H, T, Dh)
    keys, values = kv(qkv[1:])
    heads_out, weights = attn.attend_heads(qkv[0], keys, values, mask, need_weights, bias)  # (B, T, H * Dh)
    return w.self_out(heads_out), weights


def cross_attention(
    w: LayerWeights, y: Tensor, cross: tuple[Tensor, Tensor], mask: Tensor, need_weights: bool
) -> tuple[Tensor, Tensor | None]:
    """y (B, T, D) normed input; cross keys and values (G, H, S, Dh), B = G * g (rows
    ``n*g .. n*g+g-1`` share sentence ``n``'s); mask (G, 1, 1, S) True at real source positions.
    Returns the projected output (B, T, D) and, if asked, the weights (B, H, T, S)."""
    attn = w.cross_attn
    heads_out, weights = attn.attend_heads(attn.split(w.cross_q(y)), cross[0], cross[1], mask, need_weights)
    return w.cross_out(heads_out), weights


def decoder_layer(
    w: LayerWeights,
    x: Tensor,
    kv: SelfKV,
    masks: tuple[Tensor | None, Tensor],
    cross: tuple[Tensor, Tensor],
    need_weights: bool,
    bias: Tensor | None = None,
) -> tuple[Tensor, Tensor | None, Tensor | None]:
    """The decoder layer: x (B, T, D) new positions; ``kv`` stores their keys/values and returns
    all of them; masks = (self mask, cross mask) as in :func:`self_attention` and
    :func:`cross_attention`; ``bias`` the self-attention's position bias (T5) or None. Returns x (B, T, D), the self weights (B, H, T, t) and the cross
    weights (B, H, T, S) (None unless asked)."""
    self_mask, cross_mask = masks
    x, self_w = sublayer(
        x, w.norm_self, w.pre_norm, lambda y: self_attention(w, y, kv, self_mask, need_weights, bias), w.dropout
    )
    x, cross_w = sublayer(
        x, w.norm_cross, w.pre_norm, lambda y: cross_attention(w, y, cross, cross_mask, need_weights), w.dropout
    )
    x, _ = sublayer(x, w.norm_ff, w.pre_norm, lambda y: (w.feed_forward(y), None), w.dropout)
    return x, self_w, cross_w


def general(layer: DecoderLayer) -> LayerWeights:
    """The layer's weights as its modules compute (any layout; training, gradients): each linear
    layer through :func:`attnscope.nn.inference.linear` (its cached product while decoding)."""
    dropout = layer.res_self.dropout if layer.training else None
    module_linear: Callable[[nn.Module], Linear] = lambda m: partial(inference.linear, m)  # noqa: E731
    return _weights(layer, module_linear, layer.self_attn.qkv_rows, lambda x: layer.ff(x)[0], dropout=dropout)


def _weights(
    layer: DecoderLayer, linear: Callable[[nn.Module], Linear], qkv: Linear, feed_forward: Linear, **extra: Any
) -> LayerWeights:
    """The layer's :class:`LayerWeights`, each output projection and the cross queries as
    ``linear(module)``."""
    sa, ca = layer.self_attn, layer.cross_attn
    return LayerWeights(
        pre_norm=layer.res_self.pre_norm,
        self_attn=sa,
        cross_attn=ca,
        norm_self=layer.res_self.norm,
        norm_cross=layer.res_cross.norm,
        norm_ff=layer.res_ff.norm,
        qkv=qkv,
        self_out=linear(sa.out_proj),
        cross_q=linear(ca.q_proj),
        cross_out=linear(ca.out_proj),
        feed_forward=feed_forward,
        **extra,
    )


def linear_product(layer: nn.Module) -> Linear:
    """A linear layer as a function of its input: its cached product (float or int8), or, for
    another kind of module, its forward."""
    if inference.fusable(layer):  # a float or int8 linear layer: its cached product
        return inference.product(layer, "linear", (cast(nn.Linear, layer),))
    return cast(Linear, layer.forward)


def qkv_product(sa: MultiHeadAttention) -> Linear:
    """An attention's query, key and value projections side by side, (N, D) -> (N, 3D): one
    fused product where they fuse."""
    if inference.fusable(sa.q_proj, sa.k_proj, sa.v_proj):
        return inference.product(sa, "qkv", (sa.q_proj, sa.k_proj, sa.v_proj))
    q, k, v = linear_product(sa.q_proj), linear_product(sa.k_proj), linear_product(sa.v_proj)
    return lambda x: torch.cat([q(x), k(x), v(x)], dim=-1)


def prepare(layers: nn.ModuleList) -> list[LayerWeights] | None:
    """The weights of every decoder layer (of the shipped layout: relu) laid out for decoding
    once per decode, or None where they cannot be (training, gradients recorded: the cached
    products carry none; a float linear layer without bias)."""
    if not inference.decoding() or layers.training:
        return None
    return [_prepared(cast("DecoderLayer", layer)) for layer in layers] if all(map(_biased, layers)) else None


def _biased(module: nn.Module) -> bool:
    """Whether every float linear layer of a decoder layer has a bias (the prepared products'
    layout)."""
    layer = cast("DecoderLayer", module)
    sa, ca = layer.self_attn, layer.cross_attn
    first, _, _, last = layer.ff.net
    linears = (sa.q_proj, sa.k_proj, sa.v_proj, sa.out_proj, ca.q_proj, ca.out_proj, first, last)
    return not any(type(lin) is nn.Linear and lin.bias is None for lin in linears)


def _prepared(layer: DecoderLayer) -> LayerWeights:
    first, _, _, last = layer.ff.net
    ff_in, ff_out = linear_product(first), linear_product(last)
    relu = torch.relu  # the shipped layout's activation

    def feed_forward(x: Tensor) -> Tensor:
        return ff_out(relu(ff_in(x)))

    return _weights(layer, linear_product, qkv_product(layer.self_attn), feed_forward, ff_in=ff_in, ff_out=ff_out)


class CacheAppend:
    """The :data:`SelfKV` of a decoding cache: appends a pass's keys and values to ``cache``
    (:meth:`~attnscope.nn.kv_cache.KVCache.append`, in place) and keeps the grown cache."""

    def __init__(self, cache: KVCache) -> None:
        self.cache = cache

    def __call__(self, new: Tensor) -> tuple[Tensor, Tensor]:
        self.cache = self.cache.append(new)
        return self.cache.pair()
