"""A decoder-only language model (Llama, Qwen2/3, Gemma 2/3, GPT-2 layouts) that returns its
attention instead of storing it.

Attention comes back per *query* head (grouped-query attention shares key/value heads; the
matrices are the query heads'), in the one format ``[batch, layers, heads, query, key]``, only
when ``need_weights`` is asked for; otherwise the fused kernel runs. The key/value cache is an
explicit :class:`KVCache` with ``reorder`` for beam search, so step decoding (one new token
against the cached prompt) equals the full pass. Heads are switched off through
:mod:`attnscope.nn.ablation` (kind ``decoder_self``) and raw scores recorded through
:mod:`attnscope.nn.recording`, as in the Transformer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnscope.nn import ablation, recording
from attnscope.nn.decoder_only_config import DecoderOnlyConfig


@dataclass
class KVCache:
    """Per layer the keys and values of every position so far, (N, kv_heads, K, head_dim),
    after rotary positions (empty lists before the first pass)."""

    keys: list[Tensor]
    values: list[Tensor]

    @property
    def length(self) -> int:
        return self.keys[0].size(2) if self.keys else 0

    def reorder(self, indices: Tensor) -> KVCache:
        """A cache whose row ``i`` is this cache's row ``indices[i]`` (indices: (N,))."""
        return KVCache([k.index_select(0, indices) for k in self.keys], [v.index_select(0, indices) for v in self.values])


@dataclass
class LMOutput:
    """logits: (N, T, V); attention: (N, L, H, T, K) the query heads' weights (K = cached +
    new positions) or None; cache: the cache including these T positions."""

    logits: Tensor
    attention: Tensor | None
    cache: KVCache


class Norm(nn.Module):
    """RMS norm (``offset`` 1: Gemma's x·(1 + w)) or LayerNorm, computed in float32."""

    def __init__(self, dim: int, config: DecoderOnlyConfig) -> None:
        super().__init__()
        self.kind, self.eps, self.offset = config.norm, config.norm_eps, config.norm_offset
        self.weight = nn.Parameter(torch.full((dim,), 1.0 - config.norm_offset))
        self.bias = nn.Parameter(torch.zeros(dim)) if config.norm == "layer" else None

    def forward(self, x: Tensor) -> Tensor:
        if self.kind == "layer":
            return F.layer_norm(x, x.shape[-1:], self.weight, self.bias, self.eps)
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (xf * (self.offset + self.weight.float())).type_as(x)


def rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """x: (N, H, T, Dh) rotated by positions (cos, sin: (T, Dh)), halves convention (HF's)."""
    half = x.size(-1) // 2
    turned = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + turned * sin


def causal_mask(queries: Tensor, keys: int, window: int | None) -> Tensor:
    """(T, K) True where query position ``queries[t]`` may attend key position k: k <= q and,
    in a sliding-window layer, q - k < window."""
    k = torch.arange(keys, device=queries.device)
    allowed = k[None, :] <= queries[:, None]
    if window is not None:
        allowed &= (queries[:, None] - k[None, :]) < window
    return allowed


class Attention(nn.Module):
    """Grouped-query self-attention of one layer (optional q/k norm, rotary, soft-capping)."""

    def __init__(self, config: DecoderOnlyConfig, layer: int) -> None:
        super().__init__()
        c = config
        self.heads, self.kv_heads, self.head_dim = c.heads, c.kv_heads, c.head_dim
        self.scale, self.softcap, self.window = c.scale, c.attn_softcap, c.window(layer)
        self.q = nn.Linear(c.d_model, c.heads * c.head_dim, bias=c.qkv_bias)
        self.k = nn.Linear(c.d_model, c.kv_heads * c.head_dim, bias=c.qkv_bias)
        self.v = nn.Linear(c.d_model, c.kv_heads * c.head_dim, bias=c.qkv_bias)
        self.o = nn.Linear(c.heads * c.head_dim, c.d_model, bias=c.out_bias)
        self.q_norm = Norm(c.head_dim, c) if c.qk_norm else None
        self.k_norm = Norm(c.head_dim, c) if c.qk_norm else None
        self.rotary = c.positions == "rotary"
        if self.rotary:
            self.register_buffer("inv_freq", c.inv_freq(layer))  # (Dh/2,) saved: the original's own
            self.register_buffer("rope_scale", torch.tensor(1.0))  # cos/sin factor (YaRN-style; 1 here)

    def _project(self, x: Tensor, positions: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        n, t, _ = x.shape
        q = self.q(x).view(n, t, self.heads, self.head_dim)
        k = self.k(x).view(n, t, self.kv_heads, self.head_dim)
        v = self.v(x).view(n, t, self.kv_heads, self.head_dim).transpose(1, 2)  # (N, KVH, T, Dh)
        if self.q_norm is not None and self.k_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = q.transpose(1, 2), k.transpose(1, 2)  # (N, H, T, Dh), (N, KVH, T, Dh)
        if self.rotary:
            inv_freq = cast(Tensor, self.inv_freq)  # a buffer (nn.Module's getattr says Tensor | Module)
            freqs = positions.float()[:, None] * inv_freq.float()[None, :]
            emb = torch.cat((freqs, freqs), dim=-1)
            scale = cast(Tensor, self.rope_scale)
            cos, sin = emb.cos() * scale, emb.sin() * scale
            q, k = rotate(q, cos.to(q.dtype), sin.to(q.dtype)), rotate(k, cos.to(k.dtype), sin.to(k.dtype))
        return q, k, v

    def forward(
        self, x: Tensor, positions: Tensor, past: tuple[Tensor, Tensor] | None, need_weights: bool
    ) -> tuple[Tensor, Tensor | None, tuple[Tensor, Tensor]]:
        """x: (N, T, D) at ``positions`` (T,); past: cached (keys, values). Returns the output
        (N, T, D), the weights (N, H, T, K) or None, and the keys and values including x's."""
        n, t, _ = x.shape
        q, k, v = self._project(x, positions)
        if past is not None:
            k, v = torch.cat((past[0], k), dim=2), torch.cat((past[1], v), dim=2)
        mask = causal_mask(positions, k.size(2), self.window)  # (T, K)
        plain = not need_weights and self.softcap is None and not ablation.any_off() and not recording.active()
        if plain:
            ctx = F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, scale=self.scale, enable_gqa=self.heads != self.kv_heads
            )
            weights = None
        else:
            group = self.heads // self.kv_heads
            kr, vr = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)  # (N, H, K, Dh)
            scores = torch.matmul(q, kr.transpose(2, 3)) * self.scale  # (N, H, T, K)
            if self.softcap is not None:
                scores = torch.tanh(scores / self.softcap) * self.softcap
            scores = scores.masked_fill(~mask, -math.inf)
            weights = torch.softmax(scores.float(), dim=-1).type_as(q)
            ctx = torch.matmul(weights, vr)  # (N, H, T, Dh)
            recording.record(self, scores, None, ctx)
            ctx = ablation.zero_heads(self, ctx, 1)
        out = self.o(ctx.transpose(1, 2).reshape(n, t, self.heads * self.head_dim))
        return out, (weights if need_weights else None), (k, v)


class FeedForward(nn.Module):
    """Gated (act(x Wg) ⊙ x Wu) Wd, or GPT-2's act(x Wu) Wd."""

    def __init__(self, config: DecoderOnlyConfig) -> None:
        super().__init__()
        c = config
        self.gate = nn.Linear(c.d_model, c.ff_dim, bias=c.ff_bias) if c.gated_ff else None
        self.up = nn.Linear(c.d_model, c.ff_dim, bias=c.ff_bias)
        self.down = nn.Linear(c.ff_dim, c.d_model, bias=c.ff_bias)
        self.activation = c.activation

    def act(self, x: Tensor) -> Tensor:
        if self.activation == "silu":
            return F.silu(x)
        return F.gelu(x, approximate="tanh" if self.activation == "gelu_tanh" else "none")

    def forward(self, x: Tensor) -> Tensor:
        if self.gate is not None:
            return self.down(self.act(self.gate(x)) * self.up(x))
        return self.down(self.act(self.up(x)))


class Layer(nn.Module):
    """Pre-norm attention and feed-forward (with Gemma's norms after each, ``sandwich_norm``)."""

    def __init__(self, config: DecoderOnlyConfig, layer: int) -> None:
        super().__init__()
        d = config.d_model
        self.attn_norm, self.attn = Norm(d, config), Attention(config, layer)
        self.ff_norm, self.ff = Norm(d, config), FeedForward(config)
        self.post_attn_norm = Norm(d, config) if config.sandwich_norm else None
        self.post_ff_norm = Norm(d, config) if config.sandwich_norm else None

    def forward(
        self, x: Tensor, positions: Tensor, past: tuple[Tensor, Tensor] | None, need_weights: bool
    ) -> tuple[Tensor, Tensor | None, tuple[Tensor, Tensor]]:
        h, weights, kv = self.attn(self.attn_norm(x), positions, past, need_weights)
        x = x + (self.post_attn_norm(h) if self.post_attn_norm is not None else h)
        h = self.ff(self.ff_norm(x))
        return x + (self.post_ff_norm(h) if self.post_ff_norm is not None else h), weights, kv


class DecoderOnlyLM(nn.Module):
    """Embeddings (× ``embed_scale``; + learned positions for GPT-2), the layers, a final norm and
    the output layer (the embeddings when tied), logits soft-capped where the config says."""

    def __init__(self, config: DecoderOnlyConfig) -> None:
        super().__init__()
        c = self.config = config
        self.embed = nn.Embedding(c.vocab_size, c.d_model)
        self.positions = nn.Embedding(c.max_positions, c.d_model) if c.positions == "learned" else None
        self.layers = nn.ModuleList(Layer(c, i) for i in range(c.layers))
        self.final_norm = Norm(c.d_model, c)
        self.output = None if c.tied_output else nn.Linear(c.d_model, c.vocab_size, bias=False)

    def forward(self, ids: Tensor, cache: KVCache | None = None, need_weights: bool = False) -> LMOutput:
        """ids: (N, T) the next T tokens of every row after the ``cache``'s positions (a prompt
        when there is none). ValueError past the model's positions."""
        start = cache.length if cache is not None else 0
        if start + ids.size(1) > self.config.max_positions:
            raise ValueError(f"{start + ids.size(1)} positions; the model has {self.config.max_positions}")
        positions = torch.arange(start, start + ids.size(1), device=ids.device)
        x = self.embed(ids)
        if self.config.embed_scale != 1.0:
            x = x * torch.tensor(self.config.embed_scale, dtype=x.dtype)
        if self.positions is not None:
            x = x + self.positions(positions)[None]
        keys, values, weights = [], [], []
        for i, layer in enumerate(self.layers):
            past = (cache.keys[i], cache.values[i]) if cache is not None and cache.keys else None
            x, w, (k, v) = layer(x, positions, past, need_weights)
            keys.append(k)
            values.append(v)
            if w is not None:
                weights.append(w)
        logits = self.logits(self.final_norm(x))
        attention = torch.stack(weights, dim=1) if need_weights else None  # (N, L, H, T, K)
        return LMOutput(logits, attention, KVCache(keys, values))

    def logits(self, hidden: Tensor) -> Tensor:
        """hidden: (N, T, D) after the final norm -> (N, T, V)."""
        out = self.output(hidden) if self.output is not None else F.linear(hidden, self.embed.weight)
        cap = self.config.final_softcap
        return torch.tanh(out / cap) * cap if cap is not None else out

    @property
    def num_parameters(self) -> int:
        """Distinct parameters (tied weights counted once)."""
        return sum(p.numel() for p in self.parameters())

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device


def run_catching_inputs(
    model: DecoderOnlyLM, modules: list[nn.Module], ids: list[int], *, need_weights: bool = False
) -> tuple[LMOutput, list[Tensor]]:
    """Run one sequence ``ids`` through ``model``, catching what each of ``modules`` (its layers,
    or their attention blocks) receives: (output, each module's first input (1, n, D), detached)."""
    caught: dict[int, Tensor] = {}

    def keep(i: int):  # noqa: ANN202
        def hook(_module: nn.Module, args: tuple[Tensor, ...]) -> None:
            caught[i] = args[0].detach()

        return hook

    handles = [module.register_forward_pre_hook(keep(i)) for i, module in enumerate(modules)]
    try:
        out = model(torch.tensor([ids], device=model.device), need_weights=need_weights)
    finally:
        for handle in handles:
            handle.remove()
    return out, [caught[i] for i in range(len(modules))]
