"""One decoder layer's weights as the functions :func:`attnscope.nn.layers.decoder_layer` calls.

Apart from :mod:`attnscope.nn.layers` so that the native steps (:mod:`attnscope.nn.native`), which
run prepared weights, can name their type without importing the layers that use the native
key/value cache."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from torch import Tensor, nn

from attnscope.nn.attention import MultiHeadAttention

Linear = Callable[[Tensor], Tensor]  # x (..., in) -> (..., out)


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
