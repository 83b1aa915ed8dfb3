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
from functools import partial
from typing import Any, TypeVar, cast

import torch
from torch import Tensor, nn

from attnscope.nn import inference
from attnscope.nn.attention import MultiHeadAttention
from attnscope.nn.config import Stack, TransformerConfig
from attnscope.nn.kv_cache import KVCache
from attnscope.nn.layer_weights import LayerWeights, Linear
from attnscope.nn.t5_parts import NewGELU, make_norm

Sublayer = Callable[[Tensor], tuple[Tensor, Tensor | None]]
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
    return [_prepared(cast(DecoderLayer, layer)) for layer in layers] if all(map(_biased, layers)) else None


def _biased(module: nn.Module) -> bool:
    """Whether every float linear layer of a decoder layer has a bias (the prepared products'
    layout)."""
    layer = cast(DecoderLayer, module)
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


class Residual(nn.Module):
    """x + dropout(sublayer(norm(x))) for pre-norm, norm(x + dropout(sublayer(x))) for post-norm."""

    def __init__(self, d_model: int, dropout: float, pre_norm: bool, norm: nn.Module | None = None) -> None:
        super().__init__()
        # typed as LayerNorm for the fast paths (attnscope.nn.decoder_step, native), which read its
        # fields and run only for the shipped layout; T5's RMSNorm reaches the general code only
        self.norm = nn.LayerNorm(d_model) if norm is None else cast(nn.LayerNorm, norm)
        self.dropout = nn.Dropout(dropout)
        self.pre_norm = pre_norm

    def forward(self, x: Tensor, fn: Sublayer) -> tuple[Tensor, Tensor | None]:
        """x (..., D) through :func:`sublayer` with ``fn`` (normed x -> output, weights)."""
        return sublayer(x, self.norm, self.pre_norm, fn, self.dropout if self.training else None)


ACTIVATION_MODULES: dict[str, Callable[[], nn.Module]] = {
    "relu": nn.ReLU,
    "gelu": nn.GELU,
    "gelu_new": NewGELU,  # transformers' formula, not nn.GELU(approximate="tanh"): see NewGELU
    "silu": nn.SiLU,
}


class FeedForward(nn.Module):
    """last(act(first(x))), or with ``gated`` (T5 v1.1, mT5) last(act(first(x)) * gate(x));
    ``bias`` False: projections without biases (T5)."""

    def __init__(
        self, d_model: int, ff_dim: int, dropout: float, activation: str = "relu", *, bias: bool = True, gated: bool = False
    ) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(d_model, ff_dim, bias=bias), ACTIVATION_MODULES[activation](), nn.Dropout(dropout),
            nn.Linear(ff_dim, d_model, bias=bias),
        )  # fmt: skip
        self.gate = nn.Linear(d_model, ff_dim, bias=bias) if gated else None

    def forward(self, x: Tensor) -> tuple[Tensor, None]:
        """x: (..., D) -> (..., D)."""
        if self.gate is not None:
            first, act, drop, last = self.net
            hidden = act(inference.linear(first, x)) * inference.linear(self.gate, x)
            return inference.linear(last, drop(hidden)), None
        if self.training:
            return self.net(x), None
        first, act, _, last = self.net
        hidden = inference.linear(first, x)
        return inference.linear(last, torch.relu(hidden) if type(act) is nn.ReLU else act(hidden)), None


def _attention(c: TransformerConfig, stack: Stack) -> MultiHeadAttention:
    """An attention of ``stack``'s geometry (T5: its own head size, no biases, unscaled)."""
    return MultiHeadAttention(
        c.d_model, c.heads_of(stack), c.attention_dropout_p, head_dim=c.head_dim, bias=c.linear_bias, scaled=c.scale_attention
    )


def _feed_forward(c: TransformerConfig, stack: Stack) -> FeedForward:
    return FeedForward(c.d_model, c.ff_dim_of(stack), c.activation_dropout_p, c.activation, bias=c.linear_bias, gated=c.gated_ff)


def _residual_block(c: TransformerConfig) -> Residual:
    return Residual(c.d_model, c.dropout, c.pre_norm, make_norm(c))


class EncoderLayer(nn.Module):
    """Self-attention then the feed-forward, each a residual sublayer (:class:`Residual`)."""

    def __init__(self, c: TransformerConfig) -> None:
        super().__init__()
        self.self_attn = _attention(c, "encoder")
        self.ff = _feed_forward(c, "encoder")
        self.res_attn = _residual_block(c)
        self.res_ff = _residual_block(c)

    def forward(
        self, x: Tensor, mask: Tensor, need_weights: bool, bias: Tensor | None = None
    ) -> tuple[Tensor, Tensor | None]:
        """x: (B, S, D); mask: (B, 1, 1, S); bias: None or (1, H, S, S) on the scores (T5)."""
        return self.run(x, lambda y: self.self_attn(y, y, mask, need_weights=need_weights, bias=bias))

    def run(self, x: Tensor, attend: Sublayer) -> tuple[Tensor, Tensor | None]:
        """The encoder layer (every form of it): its self-attention ``attend`` (normed x ->
        output, weights) and the feed-forward, each a residual sublayer
        (:func:`attnscope.nn.layers.sublayer`)."""
        x, weights = self.res_attn(x, attend)
        x, _ = self.res_ff(x, self.ff)
        return x, weights

    def packed(
        self, x: Tensor, rows: Tensor, shape: tuple[int, int], mask: Tensor, need_weights: bool, bias: Tensor | None = None
    ) -> tuple[Tensor, Tensor | None]:
        """The layer at inference on the real positions only: x (N, D) holds the rows ``rows``
        (flat indices) of a padded (B, S) batch, ``shape`` = (B, S). Only attention needs the
        padded layout: queries, keys and values are scattered into it (zeros at the padding,
        which the mask hides from every real query), and the heads' outputs are gathered back.
        The real positions get the numbers of :meth:`forward` (up to float rounding: the
        products have other sizes); the padded query rows' weights are not the same, and no
        one reads them (answers cut each matrix to its sentence)."""
        attn = self.self_attn
        b, s = shape

        def attend(y: Tensor) -> tuple[Tensor, Tensor | None]:
            qkv = attn.qkv_rows(y)  # (N, 3D)
            full = qkv.new_zeros(b * s, qkv.size(1)).index_copy_(0, rows, qkv)
            q, k, v = full.view(b, s, 3, attn.heads, attn.head_dim).permute(2, 0, 3, 1, 4)  # (B, H, S, Dh)
            heads, weights = attn.attend_heads(q, k, v, mask, need_weights, bias)  # (B, S, H * Dh)
            return inference.linear(attn.out_proj, heads.reshape(b * s, -1).index_select(0, rows)), weights

        return self.run(x, attend)


class DecoderLayer(nn.Module):
    """Self-attention, cross-attention, feed-forward: the modules whose weights
    :func:`decoder_layer` runs (:func:`general` or :func:`prepare`)."""

    def __init__(self, c: TransformerConfig) -> None:
        super().__init__()
        self.self_attn = _attention(c, "decoder")
        self.cross_attn = _attention(c, "decoder")
        self.ff = _feed_forward(c, "decoder")
        self.res_self = _residual_block(c)
        self.res_cross = _residual_block(c)
        self.res_ff = _residual_block(c)

    def forward(
        self,
        x: Tensor,
        cache: KVCache,
        self_mask: Tensor | None,
        cross_kv: tuple[Tensor, Tensor],
        cross_mask: Tensor,
        need_weights: bool,
        bias: Tensor | None = None,
    ) -> tuple[Tensor, Tensor | None, Tensor | None, KVCache]:
        """x: (B, T, D) new positions after the ``cache``'s earlier ones (``self_mask`` None or
        broadcastable to (B, H, T, t + T); ``bias`` None or (1, H, T, t + T) on the self scores,
        T5's). Returns x, the self weights (B, H, T, t + T), the cross weights (B, H, T, S) and
        the cache grown by the T positions (written in place): :func:`attnscope.nn.layers.decoder_layer`
        on this layer's own weights."""
        kv = CacheAppend(cache)
        x, self_w, cross_w = decoder_layer(
            general(self), x, kv, (self_mask, cross_mask), cross_kv, need_weights, bias
        )
        return x, self_w, cross_w, kv.cache
