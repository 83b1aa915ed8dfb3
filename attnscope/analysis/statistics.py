"""Per-sentence statistics of every attention head, from one sentence's attention of one kind.

Every statistic is a mean over the query rows of a ``(L, H, Q, K)`` attention tensor, so it is a
number per ``(layer, head)``; a statistic that does not apply to a kind is None (null in Parquet):

- ``entropy``: Shannon entropy of a row, in nats.
- ``max_weight``: the largest weight of a row.
- ``eos_share``: the weight on the boundary token: ``</s>`` for source keys (encoder
  self-attention and cross-attention); ``<s>`` for decoder self-attention, whose keys (the decoder
  inputs) hold no ``</s>``.
- ``punct_share``: the weight on keys whose piece is only punctuation.
- ``prev_share``, ``same_share``, ``next_share``: the weight on key ``q - 1``, ``q``, ``q + 1``
  for query ``q`` (self-attention only; rows without such a key are left out of the mean).
- ``rare_share``: the weight on the corpus-rarest source token of the sentence (source keys only).
- ``outside_share``, ``sink_share`` (decoder-only models only, :mod:`attnscope.analysis.llm_rows`):
  a view's rows are one slice of a causal matrix over prompt + output, so the statistics above
  are taken on the rows renormalised over the view's keys, and these two say what the slice left
  out: the raw weight outside the view's keys (instruction, the sink, own output) and the raw
  weight on the prompt's first token (the "attention sink").
"""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from attnscope.text.tokenizer import WORD_START

KINDS: tuple[str, ...] = ("encoder_self", "decoder_self", "cross")
STATISTICS: tuple[str, ...] = (
    "entropy", "max_weight", "eos_share", "punct_share",
    "prev_share", "same_share", "next_share", "rare_share", "outside_share", "sink_share",
)  # fmt: skip


@dataclass(frozen=True)
class Keys:
    """What the statistics need to know of a kind's keys: the boundary key's index (``</s>`` or
    ``<s>``), which keys are punctuation, the rarest source token's index (None: not source
    keys) and whether queries and keys share positions (self-attention)."""

    boundary: int | None
    punctuation: Sequence[bool]
    rare: int | None
    positional: bool


def is_punctuation(piece: str) -> bool:
    """True for a piece made only of punctuation or symbols ("▁,", ".", "?!"), False for one
    with a letter or digit, or an empty one (a lone "▁")."""
    text = piece.replace(WORD_START, "").strip()
    return bool(text) and all(unicodedata.category(c)[0] in "PS" for c in text)


def _diagonal_mean(attn: Tensor, offset: int) -> Tensor | None:
    """attn: (L, H, Q, K) -> (L, H) mean of ``attn[..., q, q + offset]`` over the rows that have
    that key; None when no row has it."""
    diagonal = torch.diagonal(attn, offset=offset, dim1=-2, dim2=-1)  # (L, H, n)
    return diagonal.nanmean(-1) if diagonal.size(-1) else None


def head_statistics(attn: Tensor, keys: Keys) -> dict[str, Tensor | None]:
    """attn: (L, H, Q, K) one sentence's attention of one kind (rows sum to one) -> each name of
    :data:`STATISTICS` to an (L, H) float tensor, or None where it does not apply (the two
    decoder-only shares always: they need the whole causal matrix). A row of NaN (a decoder-only
    view's row with no weight on its keys, e.g. in a sliding-window layer) is left out of the means."""
    p = attn.float()
    if len(keys.punctuation) != p.size(-1):
        raise ValueError(f"{len(keys.punctuation)} key flags for {p.size(-1)} keys")
    entropy = -(p * p.clamp_min(1e-30).log()).sum(-1).nanmean(-1)
    punct = torch.tensor(list(keys.punctuation), dtype=p.dtype, device=p.device)
    out: dict[str, Tensor | None] = {
        "entropy": entropy,
        "max_weight": p.amax(-1).nanmean(-1),
        "eos_share": None if keys.boundary is None else p[..., keys.boundary].nanmean(-1),
        "punct_share": (p * punct).sum(-1).nanmean(-1),
        "prev_share": None,
        "same_share": None,
        "next_share": None,
        "rare_share": None if keys.rare is None else p[..., keys.rare].nanmean(-1),
        "outside_share": None,
        "sink_share": None,
    }
    if keys.positional:
        out["prev_share"] = _diagonal_mean(p, -1)
        out["same_share"] = _diagonal_mean(p, 0)
        out["next_share"] = _diagonal_mean(p, 1)
    return out


def rarest_position(ids: Sequence[int], counts: dict[int, int]) -> int:
    """Index of the token of ``ids`` (a source without its ``</s>``) seen least often in the
    corpus (``counts``: id -> occurrences); ties go to the first."""
    if not ids:
        raise ValueError("an empty sentence has no rarest token")
    return min(range(len(ids)), key=lambda k: (counts.get(ids[k], 0), k))


def alignment_counts(merged: Tensor, links: set[tuple[int, int]]) -> tuple[list[list[int]], int, int]:
    """merged: (L, H, Wt, Ws) word-level cross-attention -> per head how many of its argmax links
    (every target word to its highest-weighted source word, as ``attnscope.alignment.heads`` scores
    heads) are in ``links``, plus the hypothesis and reference link counts (the same for every
    head)."""
    best = merged.argmax(-1).tolist()  # (L, H, Wt)
    correct = [[sum((i, j) in links for j, i in enumerate(head)) for head in layer] for layer in best]
    return correct, merged.size(-2), len(links)


def f1(correct: int, hypothesis: int, reference: int) -> float:
    """F1 of ``correct`` links among ``hypothesis`` proposed and ``reference`` expected ones:
    ``2c / (|A| + |S|)``, the same number as AlignmentCounts.scores' F1 (unrounded)."""
    total = hypothesis + reference
    return 2 * correct / total if total else math.nan
