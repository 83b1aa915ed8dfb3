"""Attention as a word aligner: merge piece-level attention into word-level attention and score
every head's hard alignment against reference links.

Conventions (stated because they change the numbers): the attention row of target piece ``t`` is
the decoder step that *produces* ``t`` (teacher-forced on the reference target); ``</s>`` rows and
columns are dropped; a source word's weight is the sum over its pieces, a target word's row the mean
over its pieces; each target word is linked to the source word of highest merged weight.

The row convention has a second, opt-in value: ``"reads"``, the step whose *input* is ``t`` (the
next row; "Shift-Att", Chen et al. 2020, "Accurate Word Alignment Induction from Neural Machine
Translation"). The producing step is computed before the model has seen ``t``, so its attention
points at the source of the word the model *expects*; the reading step has ``t`` in its context.
Unsupervised heads align by the producing row (on reading rows en-de heads score 0.04-0.27), but a head trained
to align (:mod:`attnscope.training.supervision`) can be trained on either, and a card says which.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from attnscope.alignment.links import AlignmentCounts, Links, diagonal_links
from attnscope.alignment.rows import ROWS, Rows
from attnscope.alignment.words import Span, pieces_to_words


@dataclass
class WordMap:
    """One sentence pair's pieces -> words. ``source[s]`` is the word of source piece ``s`` (the
    final ``</s>`` excluded), likewise ``target``; ``n_source``/``n_target`` count the words."""

    source: list[int]
    target: list[int]
    n_source: int
    n_target: int


def merge_matrix(piece_words: Sequence[int], n_words: int, *, mean: bool) -> Tensor:
    """(n_words, pieces) 0/1 membership matrix, rows divided by their count when ``mean``."""
    m = torch.zeros(n_words, len(piece_words))
    for p, w in enumerate(piece_words):
        m[w, p] = 1.0
    if mean:
        m = m / m.sum(1, keepdim=True).clamp(min=1.0)
    return m


def aligning_rows(attn: Tensor, rows: Rows, pieces: int) -> Tensor:
    """attn: (..., T, S) one row per decoder step (step ``t`` produces target piece ``t``) ->
    (..., pieces, S): the row that aligns each of the first ``pieces`` target pieces under the
    ``rows`` convention. For ``"reads"``, piece ``t``'s row is step ``t + 1``; a last piece that
    no step read (a decode stopped by its length budget, without ``</s>``) keeps its producing
    row, the only one there is."""
    if rows == "produces":
        return attn[..., :pieces, :]
    if rows != "reads":
        raise ValueError(f"unknown row convention {rows!r}; choose one of {', '.join(ROWS)}")
    shifted = attn[..., 1 : pieces + 1, :]
    if shifted.size(-2) < pieces and attn.size(-2) >= pieces:
        shifted = torch.cat([shifted, attn[..., shifted.size(-2) : pieces, :]], dim=-2)
    return shifted


def word_attention(attn: Tensor, words: WordMap, rows: Rows = "produces") -> Tensor:
    """attn: (..., T, S) piece attention including the ``</s>`` row and column (T = target pieces
    + 1, S = source pieces + 1; padding beyond is ignored) -> (..., n_target, n_source), each
    target piece's row chosen by the ``rows`` convention (:func:`aligning_rows`)."""
    t, s = len(words.target), len(words.source)
    a = aligning_rows(attn, rows, t)[..., :s].float()
    tgt = merge_matrix(words.target, words.n_target, mean=True).to(a.device)  # (Wt, t)
    src = merge_matrix(words.source, words.n_source, mean=False).to(a.device)  # (Ws, s)
    return tgt @ a @ src.T  # (..., Wt, Ws)


def argmax_links(word_attn: Tensor) -> Links:
    """(n_target, n_source) -> {(argmax source word, target word)} for every target word."""
    best = word_attn.argmax(-1).tolist()
    return {(int(i), j) for j, i in enumerate(best)}


def _count(counts: AlignmentCounts, best_sources: list[int], reference: Links) -> None:
    """Add one argmax alignment (``best_sources[j]`` = source word of target word ``j``)."""
    counts.hypothesis += len(best_sources)
    counts.reference += len(reference)
    counts.correct += sum((i, j) in reference for j, i in enumerate(best_sources))


class HeadScores:
    """Accumulates counts per head ``(L, H)``, per layer average, the average of all heads and
    the diagonal baseline, over a corpus."""

    def __init__(self, layers: int, heads: int, rows: Rows = "produces") -> None:
        self.layers, self.heads, self.rows = layers, heads, rows
        self.per_head = [[AlignmentCounts() for _ in range(heads)] for _ in range(layers)]
        self.per_layer = [AlignmentCounts() for _ in range(layers)]
        self.average = AlignmentCounts()
        self.diagonal = AlignmentCounts()
        self.sentences = 0

    def add(self, cross: Tensor, words: WordMap, reference: Links) -> None:
        """cross: (L, H, T, S) one sentence's teacher-forced cross-attention."""
        merged = word_attention(cross, words, self.rows)  # (L, H, Wt, Ws)
        heads = merged.argmax(-1).tolist()  # (L, H, Wt)
        layers = merged.mean(1).argmax(-1).tolist()  # (L, Wt)
        for layer in range(self.layers):
            for head in range(self.heads):
                _count(self.per_head[layer][head], heads[layer][head], reference)
            _count(self.per_layer[layer], layers[layer], reference)
        _count(self.average, merged.mean((0, 1)).argmax(-1).tolist(), reference)
        self.diagonal.add(diagonal_links(words.n_source, words.n_target), reference)
        self.sentences += 1

    def report(self) -> dict[str, Any]:
        """The card's ``alignment`` section (grids are ``[layer][head]``)."""
        grid = [[c.scores() for c in row] for row in self.per_head]
        flat = [(cell["f1"], layer, head) for layer, row in enumerate(grid) for head, cell in enumerate(row)]
        best, worst = max(flat), min(flat)
        return {
            "f1": [[cell["f1"] for cell in row] for row in grid],
            "aer": [[cell["aer"] for cell in row] for row in grid],
            "precision": [[cell["precision"] for cell in row] for row in grid],
            "recall": [[cell["recall"] for cell in row] for row in grid],
            "per_layer": [c.scores() for c in self.per_layer],
            "average_of_heads": self.average.scores(),
            "diagonal": self.diagonal.scores(),
            "best_head": {"layer": best[1], "head": best[2], "f1": best[0]},
            "worst_head": {"layer": worst[1], "head": worst[2], "f1": worst[0]},
            "sentences": self.sentences,
            "rows": self.rows,
        }


def build_word_map(
    pieces_of: Callable[[list[int]], list[str]],
    source: str,
    target: str,
    source_ids: list[int],
    target_ids: list[int],
    source_words: list[Span],
    target_words: list[Span],
) -> WordMap:
    """Map the pieces of ``source_ids``/``target_ids`` (subword ids of the texts, without
    ``</s>``) to the words whose character spans are given; ``pieces_of`` is the tokenizer's
    ids -> piece strings."""
    return WordMap(
        source=pieces_to_words(source, pieces_of(source_ids), source_words),
        target=pieces_to_words(target, pieces_of(target_ids), target_words),
        n_source=len(source_words),
        n_target=len(target_words),
    )
