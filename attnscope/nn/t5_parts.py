"""The pieces T5 and mT5 add to :class:`~attnscope.nn.transformer.Transformer`, each switched on by a
field of :class:`~attnscope.nn.config.TransformerConfig` (off for every shipped model):

- :class:`RMSNorm` (``norm="rms"``): T5's layer norm, no mean subtracted and no bias;
- :class:`RelativePositionBias` (``positions="relative"``): a learned bias per head and bucket
  of the key's distance from the query, added to the self-attention scores; computed once per
  stack (T5 keeps it in layer 0) and shared by every layer of that stack. The encoder's is
  bidirectional, the decoder's causal.

The unscaled scores, the bias-free projections and the gated feed-forward are options of
:class:`~attnscope.nn.attention.MultiHeadAttention` and :class:`~attnscope.nn.transformer.FeedForward`.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from attnscope.nn.config import TransformerConfig


class RMSNorm(nn.Module):
    """x / sqrt(mean(x**2) + eps) * weight, the mean taken in float32 (T5's ``T5LayerNorm``)."""

    def __init__(self, d_model: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d_model))
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        """x: (..., D) -> (..., D)."""
        variance = x.float().pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(variance + self.eps)).to(self.weight.dtype)


class NewGELU(nn.Module):
    """GELU's tanh approximation written as ``transformers``' ``gelu_new`` (T5 v1.1, mT5): the
    same function as ``nn.GELU(approximate="tanh")`` in other rounding, which a gated, unscaled
    model amplifies (1e-3 in logits of a tiny random mT5; 0 with this formula)."""

    def forward(self, x: Tensor) -> Tensor:
        """x: (...) -> (...)."""
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def make_norm(c: TransformerConfig) -> nn.Module:
    """The config's norm over d_model: LayerNorm (``norm="layer"``) or :class:`RMSNorm`."""
    if c.norm == "rms":
        return RMSNorm(c.d_model, c.norm_eps)
    return nn.LayerNorm(c.d_model, eps=c.norm_eps)


def relative_buckets(relative: Tensor, *, bidirectional: bool, buckets: int, max_distance: int) -> Tensor:
    """relative: (Q, K) key position minus query position -> (Q, K) bucket ids in [0, buckets):
    half the buckets exact distances, the rest logarithmic up to ``max_distance`` (Mesh
    TensorFlow's scheme, as T5 uses it); bidirectional: keys after the query get buckets of
    their own, otherwise they share the bucket of distance 0 (the causal mask hides them)."""
    out = torch.zeros_like(relative)
    if bidirectional:
        buckets //= 2
        out = out + (relative > 0).long() * buckets
        distance = relative.abs()
    else:
        distance = -torch.clamp(relative, max=0)
    exact = buckets // 2
    far = exact + (
        torch.log(distance.float() / exact) / math.log(max_distance / exact) * (buckets - exact)
    ).long()
    far = torch.clamp(far, max=buckets - 1)
    return out + torch.where(distance < exact, distance, far)


class RelativePositionBias(nn.Module):
    """One stack's learned bias per (bucket, head): :meth:`forward` gives the (1, H, Q, K) bias
    of Q queries from position ``offset`` on against keys 0 .. K-1."""

    def __init__(self, c: TransformerConfig, *, bidirectional: bool) -> None:
        super().__init__()
        self.embed = nn.Embedding(c.relative_buckets, c.heads_of("encoder" if bidirectional else "decoder"))
        self.bidirectional = bidirectional
        self.buckets, self.max_distance = c.relative_buckets, c.relative_max_distance

    def forward(self, queries: int, keys: int, offset: int = 0) -> Tensor:
        """-> (1, H, Q, K) added to every self-attention score of the stack."""
        device = self.embed.weight.device
        query = torch.arange(offset, offset + queries, device=device)[:, None]
        key = torch.arange(keys, device=device)[None, :]
        bucket = relative_buckets(
            key - query, bidirectional=self.bidirectional, buckets=self.buckets, max_distance=self.max_distance
        )  # (Q, K)
        return self.embed(bucket).permute(2, 0, 1).unsqueeze(0)  # (1, H, Q, K)
