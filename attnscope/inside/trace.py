"""A teacher-forced Transformer pass that exposes the residual stream and each head's output, and
lets a caller replace them: the ground the logit lens, direct logit attribution and activation
patching stand on (:mod:`attnscope.inside.lens`, :mod:`attnscope.inside.patching`).

The pass runs the model's own layer code (:func:`attnscope.nn.layers.general` weights, the
attention's :meth:`~attnscope.nn.attention.MultiHeadAttention.attend_heads`) and splits only the
attention sublayers: their heads' outputs (B, T, H, Dh) are taken before the output projection, so
that a caller can read or replace them per head. It gives the model's own logits (tested)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import cast

import torch
from torch import Tensor

from attnscope.nn import layers
from attnscope.nn.attention import MultiHeadAttention
from attnscope.nn.layers import DecoderLayer, EncoderLayer
from attnscope.nn.transformer import Transformer

# (layer, kind "self" or "cross", heads (B, T, H, Dh)) -> the heads to use instead
HeadEdit = Callable[[int, str, Tensor], Tensor]
# (encoder layer boundary 0..L, residual (B, S, D)) -> the residual to use instead
ResidualEdit = Callable[[int, Tensor], Tensor]
SUBLAYERS = ("self", "cross", "ff")


class NotApplicable(ValueError):
    """The model has no residual stream and heads of the kind these methods read (an RNN)."""


def require_transformer(model: object, name: str | None = None) -> Transformer:
    """``model`` as a Transformer, or :class:`NotApplicable` saying why these methods need one
    (``name``: the model's id for the message; default its class)."""
    if not isinstance(model, Transformer):
        raise NotApplicable(
            f"{name or type(model).__name__} is an RNN, not a Transformer: the logit lens and direct logit "
            "attribution read a residual stream (a running sum every layer and head adds to, read after each "
            "one) and the patching grids per-head outputs. An RNN has neither: its decoder keeps one "
            "recurrent state, rewritten at each step, and its output layer reads it once per step, so there "
            "is no layer-by-layer stream to read. Patching does apply to it: it swaps each decoder step's "
            "attention context vector (docs/inside.md)"
        )
    return model


@dataclass
class Trace:
    """What a traced pass saw, for one batch of B rows of T target positions.

    ``points``: the residual stream (B, T, D) after the embeddings and after each decoder sublayer,
    labelled in ``labels`` ("embed", "1.self", "1.cross", "1.ff", ...); ``heads[(layer, kind)]``:
    that attention's heads' outputs (B, T, H, Dh) before the output projection; ``parts``: each
    sublayer's output (B, T, D) added to the residual stream (pre-norm layouts), keyed like heads
    and ``(layer, "ff")``; ``encoder``: the encoder's residual (B, S, D) at each layer boundary."""

    labels: list[str] = field(default_factory=list)
    points: list[Tensor] = field(default_factory=list)
    heads: dict[tuple[int, str], Tensor] = field(default_factory=dict)
    parts: dict[tuple[int, str], Tensor] = field(default_factory=dict)
    encoder: list[Tensor] = field(default_factory=list)
    logits: Tensor | None = None  # (B, T, V)


def encode(
    model: Transformer, src: Tensor, *, start: int = 0, x: Tensor | None = None,
    edit: ResidualEdit | None = None, trace: Trace | None = None,
) -> Tensor:
    """src (B, S) -> the encoder memory (B, S, D). ``x``: the residual (B, S, D) entering layer
    ``start`` (default: the embeddings, ``start`` 0); ``edit`` may replace the residual at each
    boundary from ``start`` on (boundary i enters layer i; the last one enters the final norm)."""
    mask = model.source_mask(src)[:, None, None, :]  # (B, 1, 1, S)
    bias = model._relative_bias("encoder", src.size(1))
    x = model._embed(src, encoder=True) if x is None else x
    stack = model.encoder_layers
    for i in range(start, len(stack) + 1):
        if edit is not None:
            x = edit(i, x)
        if trace is not None:
            trace.encoder.append(x)
        if i < len(stack):
            x, _ = cast(EncoderLayer, stack[i])(x, mask, False, bias)
    return cast(Tensor, model.encoder_norm(x))


def _heads(attn: MultiHeadAttention, q: Tensor, k: Tensor, v: Tensor, mask: Tensor, bias: Tensor | None) -> Tensor:
    """q (B, H, T, Dh), keys/values (G, H, S, Dh) -> the heads' outputs (B, T, H, Dh)."""
    out, _ = attn.attend_heads(q, k, v, mask, False, bias)  # (B, T, H * Dh)
    return out.view(out.size(0), out.size(1), attn.heads, attn.head_dim)


def _attention(
    x: Tensor, w: layers.LayerWeights, where: tuple[int, str], run: Callable[[Tensor], Tensor],
    edit: HeadEdit | None, trace: Trace | None,
) -> Tensor:
    """One attention sublayer on x (B, T, D): ``run`` (normed x -> heads (B, T, H, Dh)), the
    heads edited and recorded, then the output projection and the residual."""
    norm_module = w.norm_self if where[1] == "self" else w.norm_cross
    project = w.self_out if where[1] == "self" else w.cross_out
    heads = run(layers.norm(norm_module, x) if w.pre_norm else x)
    if edit is not None:
        heads = edit(where[0], where[1], heads)
    out = project(heads.flatten(2))
    if trace is not None:
        trace.heads[where] = heads
        trace.parts[where] = out
    x = x + out
    return x if w.pre_norm else layers.norm(norm_module, x)


def decode(
    model: Transformer, memory: Tensor, src_mask: Tensor, x: Tensor, *, start: int = 0,
    edit: HeadEdit | None = None, trace: Trace | None = None,
) -> Tensor:
    """The decoder from layer ``start`` on: x (B, T, D) the residual entering it (the target
    embeddings for ``start`` 0), memory (G, S, D) and src_mask (G, S) shared by groups of B / G
    rows. Returns the logits (B, T, V)."""
    t = x.size(1)
    causal = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()[None, None]
    bias = model._relative_bias("decoder", t)
    cross_mask = src_mask[:, None, None, :]
    for i in range(start, len(model.decoder_layers)):
        layer = cast(DecoderLayer, model.decoder_layers[i])
        w = layers.general(layer)
        sa, ca = layer.self_attn, layer.cross_attn

        def self_heads(y: Tensor, sa: MultiHeadAttention = sa, w: layers.LayerWeights = w) -> Tensor:
            qkv = w.qkv(y).view(y.size(0), t, 3, sa.heads, sa.head_dim).permute(2, 0, 3, 1, 4)  # (3, B, H, T, Dh)
            return _heads(sa, qkv[0], qkv[1], qkv[2], causal, bias)

        kv = ca.project_kv(memory)  # keys, values (G, H, S, Dh)

        def cross_heads(
            y: Tensor, ca: MultiHeadAttention = ca, w: layers.LayerWeights = w, kv: tuple[Tensor, Tensor] = kv
        ) -> Tensor:
            return _heads(ca, ca.split(w.cross_q(y)), kv[0], kv[1], cross_mask, None)

        x = _attention(x, w, (i, "self"), self_heads, edit, trace)
        if trace is not None:
            trace.labels.append(f"{i + 1}.self")
            trace.points.append(x)
        x = _attention(x, w, (i, "cross"), cross_heads, edit, trace)
        if trace is not None:
            trace.labels.append(f"{i + 1}.cross")
            trace.points.append(x)
        x = _feed_forward(x, w, i, trace)
    logits = model.logits(model.decoder_norm(x))
    if trace is not None:
        trace.logits = logits
    return logits


def _feed_forward(x: Tensor, w: layers.LayerWeights, i: int, trace: Trace | None) -> Tensor:
    out = w.feed_forward(layers.norm(w.norm_ff, x) if w.pre_norm else x)
    x = x + out if w.pre_norm else layers.norm(w.norm_ff, x + out)
    if trace is not None:
        trace.parts[(i, "ff")] = out
        trace.labels.append(f"{i + 1}.ff")
        trace.points.append(x)
    return x


def target_input(model: Transformer, target: Tensor) -> Tensor:
    """target (B, T) ids ending in </s> -> the decoder input (B, T): <s> then all but the last."""
    bos = torch.full_like(target[:, :1], model.config.bos_id)
    return torch.cat([bos, target[:, :-1]], dim=1)


def run(model: Transformer, src: Tensor, target: Tensor, *, edit: HeadEdit | None = None) -> tuple[Tensor, Trace]:
    """The whole traced pass: src (B, S), target (B, T) ids ending in </s> -> the memory
    (B, S, D) and the :class:`Trace` (its logits (B, T, V))."""
    trace = Trace()
    memory = encode(model, src, trace=trace)
    x = model._embed(target_input(model, target))
    trace.labels.append("embed")
    trace.points.append(x)
    decode(model, memory, model.source_mask(src), x, edit=edit, trace=trace)
    return memory, trace
