"""A teacher-forced pass of the Transformer that keeps what the explanation methods read.

The layers' own modules do the arithmetic (their projections, layer norms, feed-forward), in the
order of :class:`attnscope.nn.transformer.EncoderLayer` / ``DecoderLayer``, so the pass gives the
model's numbers (a tested property: its logits and weights equal ``model(src, tgt_in)``'s). For
every attention sublayer it keeps a :class:`Block`: the residual stream before it, what the value
projection read, the weights and the stream after it. Nothing is stored on a module.

A leading batch dimension ``B`` is kept throughout so that value zeroing can run one layer on
``B`` copies of a sentence at once, each with other values zeroed (``keep``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import cast

import torch
from torch import Tensor, nn

from attnscope.nn.ablation import heads_off
from attnscope.nn.attention import MultiHeadAttention
from attnscope.nn.layers import DecoderLayer, EncoderLayer, Residual
from attnscope.nn.transformer import Transformer


@dataclass(frozen=True)
class Block:
    """One attention sublayer of one layer, for B copies of one sentence.

    residual: (B, Q, D) the stream before the sublayer; values_in: (B, K, D) what the value
    projection read (the layer-normed stream for pre-norm self-attention, the encoder memory
    for cross-attention); weights: (B, H, Q, K); out: (B, Q, D) the stream after the sublayer
    (residual added, and layer-normed for post-norm). ``attn`` and ``res`` are the modules."""

    attn: MultiHeadAttention
    res: Residual
    residual: Tensor
    values_in: Tensor
    weights: Tensor
    out: Tensor


@dataclass(frozen=True)
class Trace:
    """encoder: one Block per encoder layer; decoder_self, cross: one per decoder layer;
    encoder_inputs, decoder_inputs: (B, S, D), (B, T, D) each layer's input stream (per layer);
    memory: (B, S, D) the encoder output; logits: (B, T, V)."""

    encoder: list[Block]
    decoder_self: list[Block]
    cross: list[Block]
    encoder_inputs: list[Tensor]
    decoder_inputs: list[Tensor]
    memory: Tensor
    logits: Tensor
    encoder_bias: Tensor | None = None  # (1, H, S, S) T5's relative position bias, else None
    decoder_bias: Tensor | None = None  # (1, H, T, T)


def layer_norm(module: nn.Module, x: Tensor) -> Tensor:
    """x: (..., D) -> ``module(x)`` (a LayerNorm, or T5's RMSNorm)."""
    if not isinstance(module, nn.LayerNorm):
        return cast(Tensor, module(x))
    return nn.functional.layer_norm(x, module.normalized_shape, module.weight, module.bias, module.eps)


def attend(
    attn: MultiHeadAttention,
    query_in: Tensor,
    values_in: Tensor,
    *,
    mask: Tensor | None,
    keep: Tensor | None = None,
    bias: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """query_in: (B, Q, D), values_in: (B, K, D), mask: (Q, K) True where a query may attend,
    keep: (B, K) multiplies each key's value vector (value zeroing), or None; bias: (1, H, Q, K)
    added to the scores (T5), or None. Unscaled scores where the attention is (T5). Returns the
    projected output (B, Q, D) and the weights (B, H, Q, K). Heads switched off by
    :mod:`attnscope.nn.ablation` are zeroed, as in the model."""
    q = attn.split(attn.q_proj(query_in))  # (B, H, Q, Dh)
    k = attn.split(attn.k_proj(values_in))  # (B, H, K, Dh)
    v = attn.split(attn.v_proj(values_in))  # (B, H, K, Dh)
    if keep is not None:
        v = v * keep[:, None, :, None]
    scores = q @ k.transpose(-1, -2)  # (B, H, Q, K)
    if attn.scaled:
        scores = scores / math.sqrt(attn.head_dim)
    if bias is not None:
        scores = scores + bias
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = scores.softmax(-1)
    heads = weights @ v  # (B, H, Q, Dh)
    off = heads_off(attn)
    if off:
        live = torch.ones(attn.heads, device=heads.device, dtype=heads.dtype)
        live[list(off)] = 0.0
        heads = heads * live[None, :, None, None]
    b, _, length, _ = heads.shape
    return attn.out_proj(heads.transpose(1, 2).reshape(b, length, -1)), weights


def sublayer(
    attn: MultiHeadAttention,
    res: Residual,
    x: Tensor,
    *,
    memory: Tensor | None,
    mask: Tensor | None,
    keep: Tensor | None = None,
    bias: Tensor | None = None,
) -> Block:
    """The attention sublayer ``res(x, attn)`` on x (B, Q, D): self-attention when ``memory`` is
    None, else cross-attention over memory (B, K, D); ``bias`` as in :func:`attend`."""
    normed = layer_norm(res.norm, x) if res.pre_norm else x
    values_in = normed if memory is None else memory
    out, weights = attend(attn, normed, values_in, mask=mask, keep=keep, bias=bias)
    y = x + out
    if not res.pre_norm:
        y = layer_norm(res.norm, y)
    return Block(attn, res, x, values_in, weights, y)


def feed_forward(layer: EncoderLayer | DecoderLayer, x: Tensor) -> Tensor:
    """The feed-forward sublayer with its residual: (B, T, D) -> (B, T, D)."""
    res = layer.res_ff
    out, _ = layer.ff(layer_norm(res.norm, x) if res.pre_norm else x)
    y = x + out
    return y if res.pre_norm else layer_norm(res.norm, y)


def encoder_layer(
    layer: EncoderLayer, x: Tensor, keep: Tensor | None = None, bias: Tensor | None = None
) -> tuple[Tensor, Block]:
    """x: (B, S, D) -> the layer's output (B, S, D) and its attention Block (``bias``: T5's)."""
    block = sublayer(layer.self_attn, layer.res_attn, x, memory=None, mask=None, keep=keep, bias=bias)
    return feed_forward(layer, block.out), block


def decoder_layer(
    layer: DecoderLayer,
    x: Tensor,
    memory: Tensor,
    *,
    keep_self: Tensor | None = None,
    keep_cross: Tensor | None = None,
    bias: Tensor | None = None,
) -> tuple[Tensor, Block, Block]:
    """x: (B, T, D), memory: (B, S, D) -> the layer's output (B, T, D), its self and cross Blocks
    (``bias``: T5's on the self-attention scores)."""
    length = x.size(1)
    causal = torch.ones(length, length, dtype=torch.bool, device=x.device).tril()
    own = sublayer(layer.self_attn, layer.res_self, x, memory=None, mask=causal, keep=keep_self, bias=bias)
    cross = sublayer(layer.cross_attn, layer.res_cross, own.out, memory=memory, mask=None, keep=keep_cross)
    return feed_forward(layer, cross.out), own, cross


@torch.no_grad()
def trace(model: Transformer, source_ids: list[int], target_ids: list[int]) -> Trace:
    """Teacher-force ``model`` on one sentence (source ids end with EOS; target ids are the output
    tokens, usually ending with EOS; the decoder reads ``BOS + target[:-1]``)."""
    if not target_ids:
        raise ValueError("the target has no tokens")
    c, device = model.config, model.device
    src = torch.tensor([source_ids], device=device)
    tgt_in = torch.tensor([[c.bos_id, *target_ids[:-1]]], device=device)
    x = model._embed(src, encoder=True)  # (1, S, D): the encoder's positions (BART's differ)
    encoder_bias = model._relative_bias("encoder", src.size(1))  # T5's, else None
    decoder_bias = model._relative_bias("decoder", tgt_in.size(1))
    encoder, encoder_inputs = [], []
    for module in model.encoder_layers:
        encoder_inputs.append(x)
        x, block = encoder_layer(cast(EncoderLayer, module), x, bias=encoder_bias)
        encoder.append(block)
    memory = model.encoder_norm(x)
    y = model._embed(tgt_in)  # (1, T, D)
    own_blocks, cross_blocks, decoder_inputs = [], [], []
    for module in model.decoder_layers:
        decoder_inputs.append(y)
        y, own, cross = decoder_layer(cast(DecoderLayer, module), y, memory, bias=decoder_bias)
        own_blocks.append(own)
        cross_blocks.append(cross)
    logits = model.logits(model.decoder_norm(y))
    return Trace(
        encoder, own_blocks, cross_blocks, encoder_inputs, decoder_inputs, memory, logits, encoder_bias, decoder_bias
    )


def weight_of(linear: nn.Module) -> Tensor:
    """The (out, in) float weight of a linear layer, dequantised for an int8 one."""
    weight = linear.weight
    if callable(weight):  # torch.ao dynamic quantised Linear: weight() is a quantised tensor
        return cast(Tensor, weight()).dequantize()
    return cast(Tensor, weight).float()


def bias_of(linear: nn.Module) -> Tensor | None:
    """The (out,) float bias of a linear layer (None without one)."""
    bias = linear.bias
    if callable(bias):
        bias = bias()
    return None if bias is None else cast(Tensor, bias).float()


def transformed(block: Block) -> Tensor:
    """f_h(x_j) = (x_j W_V^h + b_V^h) W_O^h for every head h and key j: (B, H, K, D), with
    heads switched off by :mod:`attnscope.nn.ablation` zero (they move nothing)."""
    attn = block.attn
    v = attn.split(attn.v_proj(block.values_in))  # (B, H, K, Dh)
    w_o = weight_of(attn.out_proj)  # (D, H * Dh)
    per_head = w_o.view(w_o.size(0), attn.heads, attn.head_dim).permute(1, 2, 0)  # (H, Dh, D)
    f = torch.einsum("bhkd,hde->bhke", v.float(), per_head)
    off = heads_off(attn)
    if off:
        f[:, list(off)] = 0.0
    return f
