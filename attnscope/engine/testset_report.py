"""Slices of a test-set table with their corpus-level metrics, and two models side by side.

A slice's metrics are corpus-level, not means of sentence scores: sacreBLEU's ``corpus_bleu`` and
``corpus_chrf`` over the slice's outputs and references (defaults: 13a tokenisation, cased), and the
AER of the job's best head from the alignment counts summed over the slice's sentences (the head
chosen on the held-out part, as on the whole table).

Slices: ``length`` (source words: 1–5, 6–10, 11–15, 16–20, 21–30, 31+), ``word`` (sentences whose
source has the word, case-insensitive whitespace words, and the others), ``flag`` (each flag, and
no flag). A sentence can be in several flag slices.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from sacrebleu.metrics import BLEU, CHRF

from attnscope.engine.testset_align import FLAGS, sum_counts

LENGTHS = ((1, 5), (6, 10), (11, 15), (16, 20), (21, 30), (31, None))
SLICES = ("length", "word", "flag")
COMPARED = ("bleu", "chrf", "mean_logprob", "coverage", "entropy", "aer", "output_words")


def corpus_metrics(rows: Sequence[dict[str, Any]], best_flat: int | None) -> dict[str, Any]:
    """``sentences``, corpus ``bleu``/``chrf`` (None without references), ``aer`` of the head at
    ``best_flat`` (None without alignments), and ``flagged`` (rows with any flag)."""
    scored = [r for r in rows if r.get("reference") is not None]
    out: dict[str, Any] = {"sentences": len(rows), "bleu": None, "chrf": None, "aer": None}
    if scored:
        hyps, refs = [r["output"] for r in scored], [[r["reference"] for r in scored]]
        out["bleu"] = round(BLEU().corpus_score(hyps, refs).score, 2)
        out["chrf"] = round(CHRF().corpus_score(hyps, refs).score, 2)
    counts = sum_counts(rows) if best_flat is not None else []
    if counts and best_flat is not None:
        out["aer"] = counts[best_flat].scores()["aer"]
    out["flagged"] = sum(1 for r in rows if r.get("flags"))
    return out


def _length_name(lo: int, hi: int | None) -> str:
    return f"{lo}+ words" if hi is None else f"{lo}–{hi} words"


def slice_rows(
    rows: Sequence[dict[str, Any]], by: str, word: str | None = None
) -> list[tuple[str, list[dict[str, Any]]]]:
    """(name, rows) of each slice ``by`` length, word or flag; ValueError for another ``by`` or a
    word slice without a word."""
    if by == "length":
        return [
            (
                _length_name(lo, hi),
                [
                    r
                    for r in rows
                    if r["source_words"] >= lo and (hi is None or r["source_words"] <= hi)
                ],
            )
            for lo, hi in LENGTHS
        ]
    if by == "word":
        if not word or not word.strip():
            raise ValueError("a word slice needs a word")
        w = word.strip().lower()
        has: Callable[[dict[str, Any]], bool] = lambda r: w in r["source"].lower().split()  # noqa: E731
        return [(f"source has “{word.strip()}”", [r for r in rows if has(r)]),
                (f"source lacks “{word.strip()}”", [r for r in rows if not has(r)])]  # fmt: skip
    if by == "flag":
        named = [(flag, [r for r in rows if flag in (r.get("flags") or [])]) for flag in FLAGS]
        return [*named, ("no flag", [r for r in rows if not r.get("flags")])]
    raise ValueError(f"unknown slice {by!r}; choose one of {', '.join(SLICES)}")


def slices(
    rows: Sequence[dict[str, Any]],
    by: str,
    *,
    word: str | None = None,
    best_flat: int | None = None,
) -> list[dict[str, Any]]:
    """Each slice's name, sentence indices and corpus metrics (empty slices kept, with nulls)."""
    return [
        {"name": name, "indices": [r["index"] for r in part], **corpus_metrics(part, best_flat)}
        for name, part in slice_rows(rows, by, word)
    ]


def compare(a: Sequence[dict[str, Any]], b: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows of two jobs on the same sentences, merged by index: ``a_<m>``, ``b_<m>`` and
    ``delta_<m>`` = b − a for each metric of :data:`COMPARED`; ValueError when the sources differ."""
    if [r["source"] for r in a] != [r["source"] for r in b]:
        raise ValueError(
            "the two jobs did not translate the same sentences; compare jobs on one test set"
        )
    out = []
    for x, y in zip(a, b, strict=True):
        row: dict[str, Any] = {"index": x["index"], "source": x["source"], "reference": x.get("reference"),
                               "a_output": x["output"], "b_output": y["output"],
                               "a_flags": x.get("flags") or [], "b_flags": y.get("flags") or []}  # fmt: skip
        for m in COMPARED:
            va, vb = x.get(m), y.get(m)
            row[f"a_{m}"], row[f"b_{m}"] = va, vb
            row[f"delta_{m}"] = (
                round(vb - va, 4)
                if isinstance(va, int | float) and isinstance(vb, int | float)
                else None
            )
        out.append(row)
    return out
