"""Alignment score functions of the classic table, one small module each, behind one interface.

Every module maps a decoder state ``s`` (the query, ``(N, D)``) and encoder states ``h`` (the keys,
``(N, S, D)``) to raw scores ``(N, S)``; :func:`masked_softmax` turns them into weights that give
padded keys exactly zero.

| name         | score(s, h_i)                         | reference                     |
|--------------|---------------------------------------|-------------------------------|
| additive     | vᵀ tanh(W[s; h_i]) = vᵀ tanh(W_s s + W_h h_i) | Bahdanau et al. 2015 (perceptron) |
| dot          | sᵀ h_i                                | Luong et al. 2015             |
| scaled_dot   | sᵀ h_i / √n                           | Vaswani et al. 2017           |
| general      | sᵀ W h_i                              | Luong et al. 2015             |
| query_key    | (W_K h_i)ᵀ (W_Q s)                    | query–key linear maps         |
| concat       | W[s; h_i] = w_sᵀ s + w_hᵀ h_i         | Luong et al. 2015 (linear)    |
| cosine       | β · cos(s, h_i)                       | Graves et al. 2014 (content)  |
| location     | softmax(W s) over positions           | Luong et al. 2015             |

``concat`` is linear in ``[s; h_i]``: the ``w_sᵀ s`` term is the same for every position, so it
cancels in the softmax and the weights cannot depend on the decoder state. We keep it because the
table lists it, and the app shows it: its alignment is the same for every target word.
``location`` ignores the keys' content; its scores over positions past the real source length are
masked, so it never attends past the source.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

NEG_INF = float("-inf")


def masked_softmax(scores: Tensor, mask: Tensor) -> Tensor:
    """Softmax over the last dim, with exactly zero weight where ``mask`` is False.

    scores: (..., S); mask: broadcastable to scores, True for keys that may be attended.
    """
    return torch.softmax(scores.masked_fill(~mask, NEG_INF), dim=-1)


class Score(nn.Module):
    """Base class: ``forward(query (N, D), keys (N, S, D)) -> scores (N, S)``."""

    def forward(self, query: Tensor, keys: Tensor) -> Tensor:  # pragma: no cover - interface
        raise NotImplementedError


class AdditiveScore(Score):
    def __init__(self, dim: int, attn_dim: int | None = None) -> None:
        super().__init__()
        attn_dim = attn_dim or dim
        self.w_query = nn.Linear(dim, attn_dim, bias=False)
        self.w_key = nn.Linear(dim, attn_dim, bias=True)
        self.v = nn.Linear(attn_dim, 1, bias=False)

    def forward(self, query: Tensor, keys: Tensor) -> Tensor:
        hidden = torch.tanh(self.w_query(query).unsqueeze(1) + self.w_key(keys))  # (N, S, A)
        return self.v(hidden).squeeze(-1)  # (N, S)


class DotScore(Score):
    def __init__(self, dim: int, scaled: bool = False) -> None:
        super().__init__()
        self.scale = 1.0 / math.sqrt(dim) if scaled else 1.0

    def forward(self, query: Tensor, keys: Tensor) -> Tensor:
        return torch.bmm(keys, query.unsqueeze(-1)).squeeze(-1) * self.scale  # (N, S)


class GeneralScore(Score):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.w = nn.Linear(dim, dim, bias=False)

    def forward(self, query: Tensor, keys: Tensor) -> Tensor:
        return torch.bmm(self.w(keys), query.unsqueeze(-1)).squeeze(-1)  # sᵀ W h


class QueryKeyScore(Score):
    def __init__(self, dim: int, key_dim: int | None = None) -> None:
        super().__init__()
        key_dim = key_dim or dim
        self.w_query = nn.Linear(dim, key_dim, bias=False)
        self.w_key = nn.Linear(dim, key_dim, bias=False)

    def forward(self, query: Tensor, keys: Tensor) -> Tensor:
        q = self.w_query(query).unsqueeze(-1)  # (N, K, 1)
        return torch.bmm(self.w_key(keys), q).squeeze(-1)  # (N, S)


class ConcatScore(Score):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.w = nn.Linear(2 * dim, 1, bias=False)

    def forward(self, query: Tensor, keys: Tensor) -> Tensor:
        expanded = query.unsqueeze(1).expand(-1, keys.size(1), -1)  # (N, S, D)
        return self.w(torch.cat([expanded, keys], dim=-1)).squeeze(-1)  # (N, S)


class CosineScore(Score):
    """Cosine similarity times a learned sharpness β (cosines alone give a near-flat softmax)."""

    def __init__(self, dim: int, init_beta: float = 10.0) -> None:
        super().__init__()
        self.log_beta = nn.Parameter(torch.tensor(math.log(init_beta)))

    def forward(self, query: Tensor, keys: Tensor) -> Tensor:
        cos = torch.cosine_similarity(keys, query.unsqueeze(1), dim=-1, eps=1e-6)  # (N, S)
        return cos * self.log_beta.exp()


class LocationScore(Score):
    """softmax(W s) over source positions: where to look, from the decoder state alone."""

    def __init__(self, dim: int, max_positions: int) -> None:
        super().__init__()
        self.max_positions = max_positions
        self.w = nn.Linear(dim, max_positions)

    def forward(self, query: Tensor, keys: Tensor) -> Tensor:
        length = keys.size(1)
        if length > self.max_positions:
            raise ValueError(
                f"source has {length} tokens; the location score covers {self.max_positions}"
            )
        return self.w(query)[:, :length]  # (N, S)


def build_score(name: str, dim: int, max_positions: int = 256) -> Score:
    """The score module called ``name`` for states of size ``dim``."""
    if name == "additive":
        return AdditiveScore(dim)
    if name in ("dot", "scaled_dot"):
        return DotScore(dim, scaled=name == "scaled_dot")
    if name == "general":
        return GeneralScore(dim)
    if name == "query_key":
        return QueryKeyScore(dim)
    if name == "concat":
        return ConcatScore(dim)
    if name == "cosine":
        return CosineScore(dim)
    if name == "location":
        return LocationScore(dim, max_positions)
    raise ValueError(f"unknown score function {name!r}")
