"""Multi-head attention with an incremental key/value cache.

Two paths with the same result: PyTorch's fused ``scaled_dot_product_attention`` when no weights
are asked for, and an explicit softmax that also returns the per-head weights ``(B, H, T, S)``.
Keys and values may be shared by groups of queries (the beams of one sentence attend over the
same source): with keys for ``G`` sentences and ``G * g`` query rows, rows ``n*g .. n*g+g-1`` use
sentence ``n``'s keys, in one batched product, without copying the keys ``g`` times.

T5's options (off by default): a head size other than d_model / heads, projections without
biases, scores not divided by sqrt(head size), and an additive ``bias`` (1, H, T, S) on the
scores (:class:`~attnscope.nn.t5_parts.RelativePositionBias`), which the recorded pre-softmax scores
include.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from attnscope.nn import inference
from attnscope.nn.ablation import zero_heads
from attnscope.nn.recording import record
from attnscope.nn.scores import masked_softmax


class MultiHeadAttention(nn.Module):
    def __init__(
        self,
        d_model: int,
        heads: int,
        dropout: float = 0.0,
        *,
        head_dim: int | None = None,
        bias: bool = True,
        scaled: bool = True,
    ) -> None:
        super().__init__()
        if head_dim is None and d_model % heads:
            raise ValueError(f"d_model={d_model} is not divisible by heads={heads}")
        self.heads, self.head_dim = heads, head_dim or d_model // heads
        inner = heads * self.head_dim
        self.q_proj = nn.Linear(d_model, inner, bias=bias)
        self.k_proj = nn.Linear(d_model, inner, bias=bias)
        self.v_proj = nn.Linear(d_model, inner, bias=bias)
        self.out_proj = nn.Linear(inner, d_model, bias=bias)
        self.dropout = dropout
        self.scaled = scaled  # scores / sqrt(head_dim); T5: False

    def split(self, x: Tensor) -> Tensor:
        """(B, T, D) -> (B, H, T, Dh)."""
        b, t, _ = x.shape
        return x.view(b, t, self.heads, self.head_dim).transpose(1, 2)  # (B, H, T, Dh)

    def project_kv(self, x: Tensor, rows: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """x: (B, S, D) -> keys and values, each (B, H, S, Dh). With ``rows``, the flat indices
        (into B * S) of the real positions, the products run on those only, and the keys and
        values of the padding are zero (every query's mask hides them)."""
        if rows is not None:
            batch, length, _ = x.shape
            # each real position as a sentence of one: (N, 1, D) -> keys, values (N, H, 1, Dh)
            kv = torch.cat(self.project_kv(x.reshape(batch * length, 1, -1).index_select(0, rows)), dim=1)
            full = kv.new_zeros(batch * length, *kv.shape[1:]).index_copy_(0, rows, kv)
            full = full.view(batch, length, 2 * self.heads, self.head_dim).transpose(1, 2)  # (B, 2H, S, Dh)
            return full[:, : self.heads], full[:, self.heads :]
        if inference.decoding() and inference.fusable(self.k_proj, self.v_proj):
            kv = inference.product(self, "kv", (self.k_proj, self.v_proj))(x)
            kv = kv.view(x.size(0), x.size(1), 2, self.heads, self.head_dim)
            return kv[:, :, 0].transpose(1, 2), kv[:, :, 1].transpose(1, 2)  # (B, H, S, Dh)
        return self.split(self.k_proj(x)), self.split(self.v_proj(x))

    def project_qkv(self, x: Tensor) -> Tensor:
        """x: (B, T, D) -> queries, keys and values of self-attention stacked, (3, B, H, T, Dh);
        one fused product when decoding (:meth:`qkv_rows`)."""
        b, t, _ = x.shape
        return self.qkv_rows(x).view(b, t, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)

    def qkv_rows(self, x: Tensor) -> Tensor:
        """x: (..., D) -> queries, keys and values side by side, (..., 3D); one fused product
        when decoding with float layers."""
        if inference.decoding() and inference.fusable(self.q_proj, self.k_proj, self.v_proj):
            return inference.product(self, "qkv", (self.q_proj, self.k_proj, self.v_proj))(x)
        return torch.cat([inference.linear(p, x) for p in (self.q_proj, self.k_proj, self.v_proj)], dim=-1)

    def forward(
        self,
        query: Tensor,
        key_value: Tensor | None = None,
        mask: Tensor | None = None,
        kv: tuple[Tensor, Tensor] | None = None,
        need_weights: bool = False,
        bias: Tensor | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """query: (B, T, D). Keys/values come from ``key_value`` (B, S, D) or ready-made ``kv``
        (G, H, S, Dh), G dividing B (see the module docstring); ``bias``: None or (1, H, T, S).

        mask: broadcastable to (G, H, T, S), True where a query may attend to a key.
        Returns the output (B, T, D) and, if asked, the weights (B, H, T, S).
        """
        q = self.split(inference.linear(self.q_proj, query))  # (B, H, T, Dh)
        if kv is None:
            assert key_value is not None
            kv = self.project_kv(key_value)
        return self.attend(q, kv[0], kv[1], mask, need_weights, bias)

    def attend(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, need_weights: bool, bias: Tensor | None = None
    ) -> tuple[Tensor, Tensor | None]:
        """q: (B, H, T, Dh); k, v: (G, H, S, Dh) with B = G * g; bias: None or (1, H, T, S)
        added to the scores. Returns the projected output (B, T, D) and, if asked, the weights
        (B, H, T, S)."""
        out, weights = self.attend_heads(q, k, v, mask, need_weights, bias)
        return inference.linear(self.out_proj, out), weights

    def attend_heads(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, need_weights: bool, bias: Tensor | None = None
    ) -> tuple[Tensor, Tensor | None]:
        """:meth:`attend` before the output projection: the heads' outputs side by side
        (B, T, H * Dh) and, if asked, the weights (B, H, T, S)."""
        b, heads, t, dh = q.shape
        groups = k.size(0)
        g = b // groups
        if g > 1:  # the g rows of a group become g * t queries of one attention
            q = q.view(groups, g, heads, t, dh).transpose(1, 2).reshape(groups, heads, g * t, dh)
            bias = None if bias is None else bias.repeat(1, 1, g, 1)  # (1, H, g*T, S)
        if bias is not None or not self.scaled:
            return self._attend_t5(q, k, v, mask, need_weights, bias, (b, g, t))
        p = self.dropout if self.training else 0.0
        weights = None
        if need_weights:  # batched products over (G * H) matrices: what ``@`` on 4-d tensors
            # computes, without its expand/reshape bookkeeping (decoding runs this per token)
            s = k.size(2)
            flat = torch.bmm(q.reshape(groups * heads, -1, dh), k.reshape(groups * heads, s, dh).transpose(1, 2))
            scores = flat.div_(math.sqrt(self.head_dim)).view(groups, heads, -1, s)  # (G, H, g*T, S)
            weights = masked_softmax(scores, mask) if mask is not None else scores.softmax(-1)
            dropped = nn.functional.dropout(weights, p, self.training) if p else weights
            out = torch.bmm(dropped.view(groups * heads, -1, s), v.reshape(groups * heads, s, dh))
            out = out.view(groups, heads, -1, dh)  # (G, H, g*T, Dh)
            record(self, scores, mask, out)  # kept only inside attnscope.nn.recording.recording()
        else:
            out = nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)
        return self._rows(out, weights, (b, g, t))

    def _attend_t5(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        mask: Tensor | None,
        need_weights: bool,
        bias: Tensor | None,
        shape: tuple[int, int, int],
    ) -> tuple[Tensor, Tensor | None]:
        """:meth:`attend_heads` with T5's options, q (G, H, g*T, Dh): scores unscaled when
        ``scaled`` is off, plus ``bias`` (1, H, g*T, S) when given, recorded with the bias."""
        p = self.dropout if self.training else 0.0
        scale = 1 / math.sqrt(self.head_dim) if self.scaled else 1.0
        weights = None
        if need_weights:
            scores = torch.matmul(q, k.transpose(-1, -2)) * scale  # (G, H, g*T, S)
            if bias is not None:
                scores = scores + bias
            weights = masked_softmax(scores, mask) if mask is not None else scores.softmax(-1)
            dropped = nn.functional.dropout(weights, p, self.training) if p else weights
            out = torch.matmul(dropped, v)  # (G, H, g*T, Dh)
            record(self, scores, mask, out)
        else:
            additive = bias  # a boolean mask becomes -inf at the blocked keys, added to the bias
            if mask is not None:
                additive = torch.where(mask, q.new_zeros(()) if bias is None else bias, float("-inf"))
            out = nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=additive, dropout_p=p, scale=scale)
        return self._rows(out, weights, shape)

    def _rows(self, out: Tensor, weights: Tensor | None, shape: tuple[int, int, int]) -> tuple[Tensor, Tensor | None]:
        """out (G, H, g*T, Dh), weights (G, H, g*T, S) -> (B, T, H * Dh) and (B, H, T, S), the
        heads switched off (attnscope.nn.ablation) zeroed."""
        b, g, t = shape
        groups, heads, _, dh = out.shape
        out = zero_heads(self, out)  # heads switched off by attnscope.nn.ablation (usually none)
        if g > 1:  # back to rows
            out = out.view(groups, heads, g, t, dh).transpose(1, 2).reshape(b, heads, t, dh)
            if weights is not None:
                weights = weights.view(groups, heads, g, t, -1).transpose(1, 2).reshape(b, heads, t, -1)
        return out.transpose(1, 2).reshape(b, t, heads * dh), weights  # (B, T, D)
