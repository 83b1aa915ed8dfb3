"""One batch of sentences -> the analysis rows: one per sentence × kind × layer × head.

The same function runs in-process and inside each Ray actor, so both give the same numbers."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from torch import Tensor

from attnscope.alignment.heads import build_word_map, word_attention
from attnscope.analysis.corpus import Item
from attnscope.analysis.statistics import (
    KINDS,
    STATISTICS,
    Keys,
    alignment_counts,
    f1,
    head_statistics,
    is_punctuation,
)
from attnscope.translator import Translation, Translator

ID_COLUMNS: tuple[str, ...] = ("sentence", "kind", "layer", "head", "queries", "keys")
ALIGN_COLUMNS: tuple[str, ...] = ("align_correct", "align_hypothesis", "align_reference", "alignment_f1")
COLUMNS: tuple[str, ...] = (*ID_COLUMNS, *STATISTICS, *ALIGN_COLUMNS)
INT_COLUMNS = frozenset({"sentence", "layer", "head", "queries", "keys", "align_correct", "align_hypothesis", "align_reference"})


def translate_batch(translator: Translator, batch: Sequence[Item]) -> list[Translation]:
    """Teacher-forced on the references when the batch has them, else greedy translations."""
    sources = [item.source for item in batch]
    references = [item.reference for item in batch]
    if all(r is not None for r in references):
        return translator.align(sources, [r for r in references if r is not None])
    if any(r is not None for r in references):
        raise ValueError("a batch mixes sentences with and without references")
    return translator.translate(sources, beam_size=1, need_weights=True)


def _keys(kind: str, pieces: list[str], translation: Translation, item: Item) -> Keys:
    """The key facts of ``kind``: source keys (``</s>`` last, the rarest piece known) or the
    decoder's inputs (``<s>`` first)."""
    if kind == "decoder_self":
        return Keys(boundary=0, punctuation=[False] + [is_punctuation(p) for p in pieces[:-1]], rare=None, positional=True)
    source_pieces = [is_punctuation(p) for p in pieces[:-1]] + [False]
    return Keys(boundary=len(source_pieces) - 1, punctuation=source_pieces, rare=item.rare, positional=kind == "encoder_self")


def _alignment(translator: Translator, translation: Translation, item: Item) -> tuple[list[list[int]], int, int] | None:
    cross = translation.hypothesis.cross
    if cross is None or item.links is None or item.reference is None:
        return None
    assert item.source_words is not None and item.target_words is not None
    words = build_word_map(
        translator.loaded.tokenizer.pieces, item.source, item.reference, translation.source_ids[:-1],
        translation.target_ids[:-1], item.source_words, item.target_words,
    )  # fmt: skip
    return alignment_counts(word_attention(cross.float().cpu(), words), set(item.links))


def _sentence_rows(translator: Translator, translation: Translation, item: Item, columns: dict[str, list[Any]]) -> None:
    """Append one sentence's rows to ``columns`` (kind order: :data:`KINDS`)."""
    tok = translator.loaded.tokenizer
    source_pieces = tok.pieces(translation.source_ids)
    target_pieces = tok.pieces(translation.target_ids)
    hyp = translation.hypothesis
    for kind in KINDS:
        attn: Tensor | None = getattr(hyp, kind)
        if attn is None:
            continue
        keys = _keys(kind, target_pieces if kind == "decoder_self" else source_pieces, translation, item)
        aligned = _alignment(translator, translation, item) if kind == "cross" else None
        append_kind(columns, item.line, kind, tuple(attn.shape), head_statistics(attn, keys), aligned)


def append_kind(
    columns: dict[str, list[Any]], line: int, kind: str, shape: tuple[int, ...], stats: dict[str, Tensor | None],
    aligned: tuple[list[list[int]], int, int] | None,
) -> None:  # fmt: skip
    """Append one sentence's rows of one kind to ``columns``: one per (layer, head) of ``shape``
    ``(L, H, queries, keys)``, its ``stats`` ((L, H) tensors or None) and, for cross-attention
    with links, ``aligned`` (per-head correct links, hypothesis and reference link counts)."""
    grids = {name: (None if value is None else value.cpu().tolist()) for name, value in stats.items()}
    layers, heads, queries, width = shape
    for layer in range(layers):
        for head in range(heads):
            for name, value in zip(ID_COLUMNS, (line, kind, layer, head, queries, width), strict=True):
                columns[name].append(value)
            for name in STATISTICS:
                grid = grids[name]
                columns[name].append(None if grid is None else grid[layer][head])
            if aligned is None:
                for name in ALIGN_COLUMNS:
                    columns[name].append(None)
            else:
                correct, hypothesis, reference = aligned[0][layer][head], aligned[1], aligned[2]
                columns["align_correct"].append(correct)
                columns["align_hypothesis"].append(hypothesis)
                columns["align_reference"].append(reference)
                columns["alignment_f1"].append(f1(correct, hypothesis, reference))


def analyze_batch(translator: Translator, batch: Sequence[Item]) -> dict[str, list[Any]]:
    """The rows of one batch as columns (:data:`COLUMNS`; None where a statistic does not apply)."""
    columns: dict[str, list[Any]] = {name: [] for name in COLUMNS}
    for item, translation in zip(batch, translate_batch(translator, batch), strict=True):
        _sentence_rows(translator, translation, item, columns)
    return columns


def to_numpy(columns: dict[str, list[Any]]) -> dict[str, np.ndarray]:
    """Columns as numpy arrays for Ray Data, at the precision Parquet keeps (int32 with -1 for
    None, float32 with NaN for None; :func:`attnscope.analysis.runner.rows_table` makes them nulls), so
    the summary reads the very numbers that are written, and a row costs ~80 bytes in memory."""
    out: dict[str, np.ndarray] = {}
    for name, values in columns.items():
        if name == "kind":
            out[name] = np.array(values, dtype=object)
        elif name in INT_COLUMNS:
            out[name] = np.array([-1 if v is None else v for v in values], dtype=np.int32)
        else:
            out[name] = np.array([np.nan if v is None else v for v in values], dtype=np.float32)
    return out
