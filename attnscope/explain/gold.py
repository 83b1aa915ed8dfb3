"""``attnscope evaluate --alignment-gold``: every cross-attention head (and every explanation method
the model has) scored as a word aligner against human sure/possible links (:mod:`.gold`).

Conventions are those of :mod:`attnscope.alignment.heads` (teacher-forced on the gold target;
source word = sum over its pieces, target word = mean, ``</s>`` dropped, argmax per target word),
read at both rows: the step that produces a word and the step that reads it. Words are the gold
set's own tokens. Nothing here chooses the default head: that stays on silver data.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from tqdm import tqdm

from attnscope.alignment.gold import PUBLISHED_DE_EN, GoldCounts, GoldPair, read_gold, score_links
from attnscope.alignment.heads import build_word_map, word_attention
from attnscope.alignment.links import Links, diagonal_links
from attnscope.alignment.rows import ROWS, Rows
from attnscope.nn.config import EOS_ID
from attnscope.repository import LoadedModel

logger = logging.getLogger(__name__)

CONVENTION = (
    "teacher-forced on the gold target; source word = sum over its pieces, target word = mean over its "
    "pieces, </s> dropped; argmax per target word; words are the gold set's tokens; 'produces' reads "
    "the row of the step that produces a word, 'reads' the row of the next step; precision = |A∩P|/|A|, "
    "recall = |A∩S|/|S|, AER = 1 - (|A∩S|+|A∩P|)/(|A|+|S|) (Och & Ney 2003)"
)


def _links(best_sources: list[int]) -> Links:
    return {(int(i), j) for j, i in enumerate(best_sources)}


class GoldHeadScores:
    """Sure/possible counts per head ``(L, H)``, per layer average and the average of all heads."""

    def __init__(self, layers: int, heads: int, rows: Rows = "produces") -> None:
        self.layers, self.heads, self.rows = layers, heads, rows
        self.per_head = [[GoldCounts() for _ in range(heads)] for _ in range(layers)]
        self.per_layer = [GoldCounts() for _ in range(layers)]
        self.average = GoldCounts()
        self.sentences = 0

    def add(self, cross: Tensor, words: Any, pair: GoldPair) -> None:
        """cross: (L, H, T, S) one sentence's teacher-forced attention (or explanation)."""
        merged = word_attention(cross, words, self.rows)  # (L, H, Wt, Ws)
        heads = merged.argmax(-1).tolist()
        layers = merged.mean(1).argmax(-1).tolist()
        s, p = pair.sure, pair.possible
        for layer in range(self.layers):
            for head in range(self.heads):
                self.per_head[layer][head].add(_links(heads[layer][head]), s, p)
            self.per_layer[layer].add(_links(layers[layer]), s, p)
        self.average.add(_links(merged.mean((0, 1)).argmax(-1).tolist()), s, p)
        self.sentences += 1

    def report(self) -> dict[str, Any]:
        """Grids ``[layer][head]`` of AER/precision/recall, per layer, all heads, the best head (lowest AER)."""
        grid = [[c.scores() for c in row] for row in self.per_head]
        flat = [(cell["aer"], layer, head) for layer, row in enumerate(grid) for head, cell in enumerate(row)]
        best = min(flat)
        per_layer = [c.scores() for c in self.per_layer]
        best_layer = min(range(len(per_layer)), key=lambda k: per_layer[k]["aer"])
        return {
            "aer": [[cell["aer"] for cell in row] for row in grid],
            "precision": [[cell["precision"] for cell in row] for row in grid],
            "recall": [[cell["recall"] for cell in row] for row in grid],
            "per_layer": per_layer,
            "average_of_heads": self.average.scores(),
            "best_head": {"layer": best[1], "head": best[2], **grid[best[1]][best[2]]},
            "best_layer": {"layer": best_layer, **per_layer[best_layer]},
            "sentences": self.sentences,
            "rows": self.rows,
        }


def _matrices(loaded: LoadedModel, source_ids: list[int], target_ids: list[int], methods: bool) -> dict[str, Tensor]:
    """method -> (L, H, T, S) on one sentence (ids end with EOS): the weights, and with ``methods``
    every explanation method the model has."""
    if methods:
        from attnscope.explain.evaluate import cross_matrices

        return cross_matrices(loaded, source_ids, target_ids)
    model, bos = loaded.model, loaded.config.bos_id
    src, tgt_in = torch.tensor([source_ids]), torch.tensor([[bos, *target_ids[:-1]]])
    out = model(src.to(model.device), tgt_in.to(model.device), need_weights=True)
    assert out.cross is not None
    return {"weights": out.cross[0].float().cpu()}


@torch.no_grad()
def score_gold(
    loaded: LoadedModel,
    gold: Sequence[GoldPair],
    *,
    methods: bool = True,
    progress: bool = False,
) -> dict[str, dict[str, Any]]:
    """method -> rows convention -> :meth:`GoldHeadScores.report`; ValueError without cross-attention."""
    tok, model = loaded.tokenizer, loaded.model
    if "cross" not in loaded.config.attention_kinds:
        raise ValueError(f"{loaded.id} has no cross-attention to score")
    was_training = model.training
    model.eval()
    scores: dict[str, dict[str, GoldHeadScores]] = {}
    for pair in tqdm(gold, desc=f"gold {loaded.id}", disable=not progress, leave=False):
        src_ids, tgt_ids = tok.encode(pair.source), tok.encode(pair.target)
        words = build_word_map(
            tok.pieces, pair.source, pair.target, src_ids, tgt_ids, pair.source_words, pair.target_words
        )
        for method, mat in _matrices(loaded, src_ids + [EOS_ID], tgt_ids + [EOS_ID], methods).items():
            if method not in scores:
                scores[method] = {rows: GoldHeadScores(mat.size(0), mat.size(1), rows) for rows in ROWS}
            for counted in scores[method].values():
                counted.add(mat, words, pair)
    model.train(was_training)
    return {method: {rows: c.report() for rows, c in by_rows.items()} for method, by_rows in scores.items()}


def diagonal_baseline(gold: Sequence[GoldPair]) -> dict[str, float]:
    """The diagonal aligner's precision/recall/AER on the same sentences."""
    return score_links([diagonal_links(len(p.source_words), len(p.target_words)) for p in gold], gold)


def eflomal_baseline(gold: Sequence[GoldPair], extra: Sequence[tuple[list[str], list[str]]] = ()) -> dict[str, float]:
    """eflomal (both directions, grow-diag-final-and) run on ``extra`` tokenised pairs plus the gold
    sentences, as unsupervised aligners are run; scored on the gold pairs."""
    from attnscope.alignment.corpus import eflomal_links

    sources = [s for s, _ in extra] + [p.source.split() for p in gold]
    targets = [t for _, t in extra] + [p.target.split() for p in gold]
    links = eflomal_links(sources, targets)[len(extra) :]
    return score_links(links, gold)


def evaluate_gold(
    loaded: LoadedModel,
    folder: str | Path,
    *,
    name: str,
    sentences: int | None = None,
    methods: bool = True,
    eflomal_extra: Sequence[tuple[list[str], list[str]]] | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """The card's ``alignment_gold`` entry for the gold set in ``folder`` (first ``sentences``
    pairs, all by default); ``eflomal_extra`` (tokenised pairs) adds the eflomal baseline."""
    gold = read_gold(folder, loaded.source_lang, loaded.target_lang)
    if sentences is not None:
        gold = gold[:sentences]
    found = score_gold(loaded, gold, methods=methods, progress=progress)
    baselines: dict[str, Any] = {"diagonal": diagonal_baseline(gold)}
    if eflomal_extra is not None:
        baselines["eflomal"] = {**eflomal_baseline(gold, eflomal_extra), "trained_on_pairs": len(eflomal_extra) + len(gold)}
    for method, by_rows in found.items():
        logger.info("%s gold %s: %s", loaded.id, method, {r: v["best_head"] for r, v in by_rows.items()})
    return {
        "gold": name,
        "direction": f"{loaded.source_lang}-{loaded.target_lang}",
        "sentences": len(gold),
        "convention": CONVENTION,
        "methods": found,
        "baselines": baselines,
        "published": PUBLISHED_DE_EN,
        "published_note": "published numbers from the cited papers (Europarl-scale training), not runs of ours",
    }
