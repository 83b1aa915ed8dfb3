"""Alignment score functions of the classic table, one small module each, behind one interface,
and their registry (:data:`SCORE_FUNCTIONS`): the one place that names each score function, its
label, formula, paper and module. Config validation, the score table, the API
(``GET /api/score-functions``) and the pages read it; adding a score function is its module here
and one :func:`register_score` call.

Every module maps a decoder state ``s`` (the query, ``(N, D)``) and encoder states ``h`` (the keys,
``(N, S, D)``) to raw scores ``(N, S)``; :func:`masked_softmax` turns them into weights that give
padded keys exactly zero.

Notation (one for every formula): ``s`` the decoder state, ``h_i`` the i-th encoder state, ``n``
their size. ``scaled_dot`` divides by ``√n``, the square root of the size of the vectors it
multiplies (Vaswani et al.'s ``√d_k``, the key size; :class:`DotScore` divides by ``√dim``): the
classic table's ``n`` is "the dimension of the source hidden state". ``√h`` read as the root of
the encoder state ``h_i`` itself, so the size is never called ``h``.

``concat`` is linear in ``[s; h_i]``: the ``w_sᵀ s`` term is the same for every position, so it
cancels in the softmax and the weights cannot depend on the decoder state. We keep it because the
table lists it, and the app shows it: its alignment is the same for every target word.
``location`` ignores the keys' content; its scores over positions past the real source length are
masked, so it never attends past the source.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

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


@dataclass(frozen=True)
class ScoreFunction:
    """One alignment score function as people read it and as the code builds it.

    ``formula``: score(``arguments``) in plain Unicode (the notation of the module docstring);
    ``latex``: the same in LaTeX; ``parameters``: what it learns; ``reading``: what to expect in
    the numbers and heatmaps; ``module``: the :class:`Score` class (None: no attention);
    ``factory(dim, max_positions)`` builds it."""

    name: str
    label: str
    formula: str
    latex: str
    paper: str
    parameters: str
    reading: str
    module: type[Score] | None = None
    factory: Callable[[int, int], Score] | None = None
    arguments: str = "s, h_i"

    def build(self, dim: int, max_positions: int = 256) -> Score:
        """The module for states of size ``dim`` (``max_positions``: the location score's slots)."""
        if self.factory is None:
            raise ValueError(f"the score function {self.name!r} has no module")
        return self.factory(dim, max_positions)

    def to_dict(self) -> dict[str, str | None]:
        """The API's form (``GET /api/score-functions``)."""
        return {
            "name": self.name, "label": self.label, "arguments": self.arguments, "formula": self.formula,
            "latex": self.latex, "paper": self.paper, "parameters": self.parameters, "reading": self.reading,
            "module": None if self.module is None else f"{self.module.__module__}.{self.module.__qualname__}",
        }  # fmt: skip


SCORE_FUNCTIONS: dict[str, ScoreFunction] = {}


def register_score(function: ScoreFunction) -> ScoreFunction:
    """Add ``function`` to :data:`SCORE_FUNCTIONS` (in table order: the order of registration)."""
    if function.name in SCORE_FUNCTIONS:
        raise ValueError(f"score function {function.name!r} is already registered")
    SCORE_FUNCTIONS[function.name] = function
    return function


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


register_score(ScoreFunction(
    name="additive", label="additive", formula="vᵀ tanh(W_s s + W_h h_i)",
    latex=r"v^\top \tanh(W_s s + W_h h_i)", paper="Bahdanau, Cho & Bengio 2015 (a perceptron)",
    parameters="W_s, W_h ∈ ℝ^{n×n}, v ∈ ℝ^n",
    reading="Bahdanau's perceptron of decoder state and word: the most flexible score, the reference row.",
    module=AdditiveScore, factory=lambda dim, _: AdditiveScore(dim),
))  # fmt: skip


class DotScore(Score):
    def __init__(self, dim: int, scaled: bool = False) -> None:
        super().__init__()
        self.scale = 1.0 / math.sqrt(dim) if scaled else 1.0

    def forward(self, query: Tensor, keys: Tensor) -> Tensor:
        return torch.bmm(keys, query.unsqueeze(-1)).squeeze(-1) * self.scale  # (N, S)


register_score(ScoreFunction(
    name="dot", label="dot", formula="sᵀ h_i", latex=r"s^\top h_i", paper="Luong, Pham & Manning 2015",
    parameters="none",
    reading="No parameters: the decoder must learn to put its state in the encoder's space for the product to mean anything.",
    module=DotScore, factory=lambda dim, _: DotScore(dim),
))
register_score(ScoreFunction(
    name="scaled_dot", label="scaled dot", formula="sᵀ h_i / √n", latex=r"s^\top h_i / \sqrt{n}",
    paper="Vaswani et al. 2017", parameters="none",
    reading="dot with a flatter softmax (÷√n): the same ranking of source words, gentler early gradients.",
    module=DotScore, factory=lambda dim, _: DotScore(dim, scaled=True),
))  # fmt: skip


class GeneralScore(Score):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.w = nn.Linear(dim, dim, bias=False)

    def forward(self, query: Tensor, keys: Tensor) -> Tensor:
        return torch.bmm(self.w(keys), query.unsqueeze(-1)).squeeze(-1)  # sᵀ W h


register_score(ScoreFunction(
    name="general", label="general", formula="sᵀ W h_i", latex=r"s^\top W h_i", paper="Luong, Pham & Manning 2015",
    parameters="W ∈ ℝ^{n×n}",
    reading="Luong's bilinear map between decoder and encoder spaces: dot with a learned change of basis.",
    module=GeneralScore, factory=lambda dim, _: GeneralScore(dim),
))  # fmt: skip


class QueryKeyScore(Score):
    def __init__(self, dim: int, key_dim: int | None = None) -> None:
        super().__init__()
        key_dim = key_dim or dim
        self.w_query = nn.Linear(dim, key_dim, bias=False)
        self.w_key = nn.Linear(dim, key_dim, bias=False)

    def forward(self, query: Tensor, keys: Tensor) -> Tensor:
        q = self.w_query(query).unsqueeze(-1)  # (N, K, 1)
        return torch.bmm(self.w_key(keys), q).squeeze(-1)  # (N, S)


register_score(ScoreFunction(
    name="query_key", label="query–key", formula="(W_Q s)ᵀ (W_K h_i)", latex=r"(W_Q s)^\top (W_K h_i)",
    paper="query–key linear maps, as in Vaswani et al. 2017 (unscaled)", parameters="W_Q, W_K ∈ ℝ^{n×n}",
    reading="The lectures' option 2, as in the Transformer: project to queries and keys, then an inner product "
    "(a general score factored as W_Qᵀ W_K).",
    module=QueryKeyScore, factory=lambda dim, _: QueryKeyScore(dim),
))  # fmt: skip


class ConcatScore(Score):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.w = nn.Linear(2 * dim, 1, bias=False)

    def forward(self, query: Tensor, keys: Tensor) -> Tensor:
        expanded = query.unsqueeze(1).expand(-1, keys.size(1), -1)  # (N, S, D)
        return self.w(torch.cat([expanded, keys], dim=-1)).squeeze(-1)  # (N, S)


register_score(ScoreFunction(
    name="concat", label="concat", formula="w_sᵀ s + w_hᵀ h_i", latex=r"w_s^\top s + w_h^\top h_i",
    paper="Luong, Pham & Manning 2015 (linear)", parameters="w_s, w_h ∈ ℝ^n",
    reading="Linear in [s; h_i]: the decoder-state term is the same for every source word and cancels in the "
    "softmax, so every target word gets the same attention row (identical heatmap rows, a fixed weighted "
    "summary of the source).",
    module=ConcatScore, factory=lambda dim, _: ConcatScore(dim),
))  # fmt: skip


class CosineScore(Score):
    """Cosine similarity times a learned sharpness β (cosines alone give a near-flat softmax)."""

    def __init__(self, dim: int, init_beta: float = 10.0) -> None:
        super().__init__()
        self.log_beta = nn.Parameter(torch.tensor(math.log(init_beta)))

    def forward(self, query: Tensor, keys: Tensor) -> Tensor:
        cos = torch.cosine_similarity(keys, query.unsqueeze(1), dim=-1, eps=1e-6)  # (N, S)
        return cos * self.log_beta.exp()


register_score(ScoreFunction(
    name="cosine", label="cosine", formula="β · cos(s, h_i)", latex=r"\beta \cos(s, h_i)",
    paper="Graves, Wayne & Danihelka 2014 (content addressing)", parameters="β (one scalar)",
    reading="The angle only, sharpened by a learned β: a state's length cannot make a word stand out.",
    module=CosineScore, factory=lambda dim, _: CosineScore(dim),
))  # fmt: skip


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


register_score(ScoreFunction(
    name="location", label="location", formula="[W s + b]_i", latex=r"[W s + b]_i", arguments="s, i",
    paper="Luong, Pham & Manning 2015", parameters="W ∈ ℝ^{P×n}, b ∈ ℝ^P (P source slots)",
    reading="Where to look from the decoder state alone, never what is there: the heatmap is a position pattern "
    "(roughly diagonal) whatever the words.",
    module=LocationScore, factory=LocationScore,
))
register_score(ScoreFunction(
    name="none", label="no attention", formula="—", latex="", paper="Cho et al. 2014 (no attention)",
    parameters="—", arguments="",
    reading="No attention: the decoder sees only the encoder's final state (Cho et al. 2014): the floor, falling "
    "furthest on long sentences.",
))  # fmt: skip


def build_score(name: str, dim: int, max_positions: int = 256) -> Score:
    """The score module called ``name`` for states of size ``dim``."""
    function = SCORE_FUNCTIONS.get(name)
    if function is None or function.factory is None:
        raise ValueError(f"unknown score function {name!r}")
    return function.build(dim, max_positions)
