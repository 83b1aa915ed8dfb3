"""``attnscope evaluate --explain``: which explanation tells the truth?

Every method of :mod:`attnscope.explain` the model has, beside the raw weights, is scored on a split
teacher-forced on its references, per head (weights, norm) or per layer (rollout, value
zeroing, ALTI+'s source part), two ways:

* as a word aligner against the eflomal reference, with the conventions of
  ``attnscope evaluate --alignment`` (:mod:`attnscope.alignment.heads`: argmax per target word, source
  word = sum of its pieces, target word = mean, ``</s>`` dropped);
* by Spearman's ρ with integrated gradients (:mod:`attnscope.attribution`, rows normalised |a|/Σ|a|),
  averaged over target rows and sentences: how well the method ranks the source tokens the way
  the gradients do.

Only the cross-attention kind is scored: alignment and attribution are target × source.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from tqdm import tqdm

from attnscope.alignment.corpus import AlignedPair, default_align_dir, load_references
from attnscope.alignment.evaluate import convention
from attnscope.alignment.heads import HeadScores, build_word_map
from attnscope.alignment.rows import Rows
from attnscope.attribution import attribute, correlations, normalise_rows
from attnscope.explain import applicable, explain
from attnscope.nn.config import EOS_ID
from attnscope.repository import LoadedModel
from attnscope.training.data import load_parallel

logger = logging.getLogger(__name__)
PER_LAYER = ("rollout", "value_zeroing", "alti")
CONVENTION = (
    f"cross-attention kind only; alignment: {convention()}; spearman_ig: Spearman's rho with integrated "
    "gradients (rows |a|/sum|a|) per target row, averaged over rows and sentences"
)


def cross_matrices(loaded: LoadedModel, source_ids: list[int], target_ids: list[int]) -> dict[str, Tensor]:
    """method -> (L, H, T, S) for the weights and each method the model has (H = 1 for the
    per-layer methods), on one sentence (ids with EOS)."""
    model, bos = loaded.model, loaded.config.bos_id
    src, tgt_in = torch.tensor([source_ids]), torch.tensor([[bos, *target_ids[:-1]]])
    out = model(src.to(model.device), tgt_in.to(model.device), need_weights=True)
    assert out.cross is not None
    found = explain(model, source_ids, target_ids, methods=applicable(model))
    mats = {"weights": out.cross[0].float().cpu()}
    if (norms := found.get("norm")) is not None:
        mats["norm"] = norms.weighted["cross"].cpu()
    for name in ("rollout", "value_zeroing"):
        if (layers := found.get(name)) is not None:
            mats[name] = layers["cross"][:, None].cpu()
    if (contributions := found.get("alti")) is not None:
        mats["alti"] = contributions.source[:, None].cpu()
    return mats


class Correlations:
    """Mean Spearman ρ per [layer][head] over every sentence where it is defined."""

    def __init__(self) -> None:
        self.sums: list[list[float]] | None = None
        self.counts: list[list[int]] | None = None

    def add(self, grid: list[list[float | None]]) -> None:
        if self.sums is None or self.counts is None:
            self.sums = [[0.0] * len(row) for row in grid]
            self.counts = [[0] * len(row) for row in grid]
        for la, row in enumerate(grid):
            for h, value in enumerate(row):
                if value is not None:
                    self.sums[la][h] += value
                    self.counts[la][h] += 1

    def report(self) -> list[list[float | None]]:
        if self.sums is None or self.counts is None:
            return []
        return [[round(s / c, 4) if c else None for s, c in zip(sr, cr, strict=True)] for sr, cr in zip(self.sums, self.counts, strict=True)]


@torch.no_grad()
def score_explanations(
    loaded: LoadedModel,
    pairs: Sequence[tuple[str, str]],
    references: Sequence[AlignedPair],
    *,
    ig_steps: int = 16,
    rows: Rows = "produces",
    progress: bool = False,
) -> dict[str, Any]:
    """method -> {"per": "head" | "layer", "alignment": the HeadScores report, "spearman_ig":
    [layer][head] mean ρ with integrated gradients, "best_spearman": the best cell}."""
    tok, model = loaded.tokenizer, loaded.model
    if "cross" not in loaded.config.attention_kinds:
        raise ValueError(f"{loaded.id} has no cross-attention to explain")
    model.eval()
    scores: dict[str, HeadScores] = {}
    rank: dict[str, Correlations] = {}
    for k in tqdm(range(len(pairs)), desc=f"explain {loaded.id}", disable=not progress, leave=False):
        source, target = pairs[k]
        src_ids, tgt_ids = tok.encode(source), tok.encode(target)
        mats = cross_matrices(loaded, src_ids + [EOS_ID], tgt_ids + [EOS_ID])
        ref = references[k]
        words = build_word_map(tok.pieces, source, target, src_ids, tgt_ids, ref.source_words, ref.target_words)
        ig = normalise_rows(attribute(model, src_ids + [EOS_ID], tgt_ids + [EOS_ID], steps=ig_steps).integrated_gradients)
        for method, mat in mats.items():
            if method not in scores:
                scores[method] = HeadScores(mat.size(0), mat.size(1), rows)
                rank[method] = Correlations()
            scores[method].add(mat, words, ref.links)
            rank[method].add(correlations(ig.cpu(), mat))
    report: dict[str, Any] = {}
    for method, counted in scores.items():
        grid = rank[method].report()
        cells = [(v, la, h) for la, row in enumerate(grid) for h, v in enumerate(row) if v is not None]
        best = max(cells) if cells else None
        report[method] = {
            "per": "layer" if method in PER_LAYER else "head",
            "alignment": counted.report(),
            "spearman_ig": grid,
            "best_spearman": None if best is None else {"layer": best[1], "head": best[2], "rho": best[0]},
        }
    return report


def evaluate_explanations(
    loaded: LoadedModel,
    data_dir: str | Path,
    *,
    split: str = "test2016",
    align_dir: str | Path | None = None,
    sentences: int | None = None,
    ig_steps: int = 16,
    progress: bool = True,
) -> dict[str, Any]:
    """The card's ``explanations`` entry: :func:`score_explanations` on the first ``sentences``
    pairs of ``split`` (all by default)."""
    pairs = load_parallel(data_dir, split, loaded.source_lang, loaded.target_lang)
    refs = load_references(
        align_dir or default_align_dir(data_dir), split, loaded.source_lang, loaded.target_lang, expected=len(pairs)
    )
    if sentences is not None:
        pairs, refs = pairs[:sentences], refs[:sentences]
    methods = score_explanations(loaded, pairs, refs, ig_steps=ig_steps, progress=progress)
    for method, found in methods.items():
        logger.info("%s %s: best F1 %s, best rho %s", loaded.id, method, found["alignment"]["best_head"], found["best_spearman"])
    return {"split": split, "sentences": len(pairs), "ig_steps": ig_steps, "convention": CONVENTION, "methods": methods}
