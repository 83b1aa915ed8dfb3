"""sacreBLEU evaluation, in two conventions that are never mixed:

- ``cased``: sacreBLEU's default on detokenised, cased output (13a tokenisation), with signature;
- ``lowercase_13a``: the same, lowercased — closest to how most Multi30k papers report
  (multi-bleu on lowercased tokenised text).

Beside BLEU, chrF (Popović 2015; sacreBLEU's CHRF, character 6-grams, β = 2, cased): it credits
partly right words (German inflection, compounds), which BLEU scores as wrong.

Plus BLEU by source length (words), the experiment behind Bahdanau et al.'s figure, and the
mean entropy of the cross-attention rows (:mod:`attnscope.training.attention_stats`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sacrebleu.metrics import BLEU, CHRF
from tqdm import tqdm

from attnscope.training.attention_stats import ENTROPY_CONVENTION, cross_attention_entropy
from attnscope.training.data import TEST_SPLITS, load_parallel
from attnscope.translator import Translator

logger = logging.getLogger(__name__)

LENGTH_BUCKETS: tuple[tuple[int, int | None], ...] = ((1, 8), (9, 12), (13, 16), (17, 20), (21, None))


def bleu_scores(hypotheses: Sequence[str], references: Sequence[str]) -> dict[str, Any]:
    """Corpus BLEU of ``hypotheses`` against one reference each, in both conventions."""
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    cased, lower = BLEU(), BLEU(lowercase=True)
    c = cased.corpus_score(list(hypotheses), [list(references)])
    low = lower.corpus_score(list(hypotheses), [list(references)])
    return {
        "cased": round(c.score, 2),
        "lowercase_13a": round(low.score, 2),
        "signature_cased": str(cased.get_signature()),
        "signature_lowercase": str(lower.get_signature()),
    }


def chrf_scores(hypotheses: Sequence[str], references: Sequence[str]) -> dict[str, Any]:
    """Corpus chrF of ``hypotheses`` against one reference each, with sacreBLEU's signature."""
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    metric = CHRF()
    score = metric.corpus_score(list(hypotheses), [list(references)])
    return {"score": round(score.score, 2), "signature": str(metric.get_signature())}


def bucket_name(low: int, high: int | None) -> str:
    return f"{low}+" if high is None else f"{low}-{high}"


def bleu_by_length(sources: Sequence[str], hypotheses: Sequence[str], references: Sequence[str]) -> list[dict[str, Any]]:
    """Lowercased 13a BLEU per bucket of source length in whitespace words."""
    rows = []
    metric = BLEU(lowercase=True)
    for low, high in LENGTH_BUCKETS:
        idx = [i for i, s in enumerate(sources) if len(s.split()) >= low and (high is None or len(s.split()) <= high)]
        score = None
        if idx:
            score = round(metric.corpus_score([hypotheses[i] for i in idx], [[references[i] for i in idx]]).score, 2)
        rows.append({"bucket": bucket_name(low, high), "sentences": len(idx), "bleu": score})
    return rows


def translate_corpus(
    translator: Translator,
    sources: Sequence[str],
    *,
    beam_size: int = 5,
    batch_size: int = 64,
    progress: bool = True,
    protect: bool = False,
) -> list[str]:
    """Translate many sentences in length-sorted batches, returned in the input order; with
    ``protect``, numbers, emoji and byte-spelled words go through placeholders
    (``Translator.translate_protected``)."""
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
    out: list[str] = [""] * len(sources)
    batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    for batch in tqdm(batches, desc=f"translate (beam {beam_size})", disable=not progress, leave=False):
        texts = [sources[i] for i in batch]
        if protect:
            results = [r.translation for r in translator.translate_protected(texts, beam_size=beam_size)]
        else:
            results = translator.translate(texts, beam_size=beam_size, need_weights=False)
        for i, r in zip(batch, results, strict=True):
            out[i] = r.text
    return out


LENGTH_PENALTIES: tuple[float, ...] = (0.6, 1.0, 1.4, 2.0)
# GNMT's beta; 0 (off) comes first, so it wins ties. A never-attended source position costs
# beta * 13.8 (see attnscope.decoding.history.gnmt_coverage), so useful values are small.
COVERAGE_PENALTIES: tuple[float, ...] = (0.0, 0.05, 0.1, 0.2, 0.4)


def _tune(
    translator: Translator,
    pairs: Sequence[tuple[str, str]],
    attribute: str,
    candidates: Sequence[float],
    *,
    beam_size: int,
    batch_size: int,
    progress: bool,
) -> tuple[float, dict[str, float]]:
    """Set ``translator.<attribute>`` to each candidate in turn, translate ``pairs``' sources and
    keep the candidate with the best lowercased BLEU (the first of equals). Returns it and every
    candidate's BLEU."""
    sources, references = [s for s, _ in pairs], [t for _, t in pairs]
    scores: dict[str, float] = {}
    for value in candidates:
        setattr(translator, attribute, value)
        hyps = translate_corpus(translator, sources, beam_size=beam_size, batch_size=batch_size, progress=progress)
        scores[str(value)] = bleu_scores(hyps, references)["lowercase_13a"]
    best = max(candidates, key=lambda v: scores[str(v)])
    setattr(translator, attribute, best)
    logger.info("%s: %s %s (val BLEU %s)", translator.loaded.id, attribute, best, scores)
    return best, scores


def tune_length_penalty(
    translator: Translator,
    pairs: Sequence[tuple[str, str]],
    *,
    beam_size: int = 5,
    candidates: Sequence[float] = LENGTH_PENALTIES,
    batch_size: int = 64,
    progress: bool = True,
) -> dict[str, Any]:
    """Pick the beam length penalty with the best lowercased BLEU on ``pairs`` (validation data,
    never a test set), set it on ``translator``, and return the choice for the card."""
    best, scores = _tune(
        translator, pairs, "length_penalty", candidates, beam_size=beam_size, batch_size=batch_size, progress=progress
    )
    return {"beam_size": beam_size, "length_penalty": best, "tuned_on": "val", "val_bleu_by_length_penalty": scores}


def tune_coverage_penalty(
    translator: Translator,
    pairs: Sequence[tuple[str, str]],
    *,
    beam_size: int = 5,
    candidates: Sequence[float] = COVERAGE_PENALTIES,
    batch_size: int = 64,
    progress: bool = True,
) -> dict[str, Any]:
    """Pick GNMT's coverage penalty (beta) with the best lowercased BLEU on ``pairs``
    (validation data, never a test set) at the translator's length penalty, set it on
    ``translator``, and return the choice for the card. ValueError for a model without
    cross-attention, which has nothing to compute coverage from."""
    if "cross" not in translator.loaded.config.attention_kinds:
        raise ValueError(f"{translator.loaded.id} has no cross-attention: there is no coverage penalty to tune")
    best, scores = _tune(
        translator, pairs, "coverage_penalty", candidates, beam_size=beam_size, batch_size=batch_size, progress=progress
    )
    return {"beam_size": beam_size, "coverage_penalty": best, "tuned_on": "val", "val_bleu_by_coverage_penalty": scores}


def coverage_comparison(with_penalty: dict[str, Any], without: dict[str, Any]) -> dict[str, Any]:
    """Two :func:`evaluate` results, with the coverage penalty and without it (beta = 0), side
    by side for the card: lowercased BLEU on each split, overall and on sources of 21+ words."""
    long_bucket = bucket_name(*LENGTH_BUCKETS[-1])

    def long(result: dict[str, Any], split: str) -> float | None:
        rows = {row["bucket"]: row["bleu"] for row in result["bleu_by_length"][split]}
        return rows.get(long_bucket)

    return {
        "coverage_penalty": with_penalty["coverage_penalty"],
        "length_penalty": with_penalty["length_penalty"],
        "beam_size": with_penalty["beam_size"],
        "bleu_lowercase": {
            split: {"with": with_penalty["bleu"][split]["lowercase_13a"], "without": without["bleu"][split]["lowercase_13a"]}
            for split in with_penalty["bleu"]
        },
        f"bleu_lowercase_{long_bucket}_words": {
            split: {"with": long(with_penalty, split), "without": long(without, split)} for split in with_penalty["bleu"]
        },
    }


def attention_entropy(
    translator: Translator, data_dir: str | Path, *, splits: Sequence[str] = TEST_SPLITS, batch_size: int = 64
) -> dict[str, Any]:
    """Only the mean cross-attention entropy on each split (teacher-forced: one forward pass per
    batch, seconds where beam-search BLEU takes minutes), in the card's form."""
    loaded = translator.loaded
    per_split = {
        split: cross_attention_entropy(
            translator, load_parallel(data_dir, split, loaded.source_lang, loaded.target_lang), batch_size=batch_size
        )
        for split in splits
    }
    return {"attention_entropy": per_split, "attention_entropy_convention": ENTROPY_CONVENTION}


def evaluate(
    translator: Translator,
    data_dir: str | Path,
    *,
    splits: Sequence[str] = TEST_SPLITS,
    beam_size: int = 5,
    batch_size: int = 64,
    progress: bool = True,
) -> dict[str, Any]:
    """BLEU (both conventions), chrF, BLEU by length and the mean cross-attention entropy on each split,
    for the card (``attention_entropy`` is None per split for a model without cross-attention)."""
    loaded = translator.loaded
    result: dict[str, Any] = {
        "beam_size": beam_size,
        "length_penalty": translator.length_penalty,
        "coverage_penalty": translator.coverage_penalty,
        "bleu": {},
        "chrf": {},
        "bleu_by_length": {},
        "attention_entropy": {},
        "attention_entropy_convention": ENTROPY_CONVENTION,
    }
    for split in splits:
        pairs = load_parallel(data_dir, split, loaded.source_lang, loaded.target_lang)
        sources = [s for s, _ in pairs]
        references = [t for _, t in pairs]
        hyps = translate_corpus(translator, sources, beam_size=beam_size, batch_size=batch_size, progress=progress)
        result["bleu"][split] = bleu_scores(hyps, references)
        result["chrf"][split] = chrf_scores(hyps, references)
        result["bleu_by_length"][split] = bleu_by_length(sources, hyps, references)
        result["attention_entropy"][split] = cross_attention_entropy(translator, pairs, batch_size=batch_size)
        logger.info("%s %s: %s", loaded.id, split, result["bleu"][split])
    return result
