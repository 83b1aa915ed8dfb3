"""Multi-head attention with an incremental key/value cache.

Two paths with the same result: PyTorch's fused ``scaled_dot_product_attention`` when no weights
are asked for, and an explicit softmax that also returns the per-head weights ``(B, H, T, S)``.
"""

from __future__ import annotations

import math

from torch import Tensor, nn

from app.nn.ablation import zero_heads
from app.nn.recording import record
from app.nn.scores import masked_softmax


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model: int, heads: int, dropout: float = 0.0) -> None:
        super().__init__()
        if d_model % heads:
            raise ValueError(f"d_model={d_model} is not divisible by heads={heads}")
        self.heads, self.head_dim = heads, d_model // heads
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)
        self.dropout = dropout

    def split(self, x: Tensor) -> Tensor:
        """(B, T, D) -> (B, H, T, Dh)."""
        b, t, _ = x.shape
        return x.view(b, t, self.heads, self.head_dim).transpose(1, 2)  # (B, H, T, Dh)

    def project_kv(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """x: (B, S, D) -> keys and values, each (B, H, S, Dh)."""
        return self.split(self.k_proj(x)), self.split(self.v_proj(x))

    def forward(
        self,
        query: Tensor,
        key_value: Tensor | None = None,
        mask: Tensor | None = None,
        kv: tuple[Tensor, Tensor] | None = None,
        need_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """query: (B, T, D). Keys/values come from ``key_value`` (B, S, D) or ready-made ``kv``.

        mask: broadcastable to (B, H, T, S), True where a query may attend to a key.
        Returns the output (B, T, D) and, if asked, the weights (B, H, T, S).
        """
        q = self.split(self.q_proj(query))  # (B, H, T, Dh)
        if kv is None:
            assert key_value is not None
            kv = self.project_kv(key_value)
        k, v = kv
        p = self.dropout if self.training else 0.0
        weights = None
        if need_weights:
            scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)  # (B, H, T, S)
            weights = masked_softmax(scores, mask) if mask is not None else scores.softmax(-1)
            out = nn.functional.dropout(weights, p, self.training) @ v  # (B, H, T, Dh)
            record(self, scores, mask, out)  # kept only inside app.nn.recording.recording()
        else:
            out = nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)
        out = zero_heads(self, out)  # heads switched off by app.nn.ablation (usually none)
        b, _, t, _ = out.shape
        out = out.transpose(1, 2).reshape(b, t, -1)  # (B, T, D)
        return self.out_proj(out), weights
