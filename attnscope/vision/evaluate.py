"""Metrics of the vision models: accuracy (after each glimpse for the RAM), caption BLEU, chrF and
exact match, and the share of each class word's attention that falls in its item's cell."""

from __future__ import annotations

from typing import Any

import torch
from sacrebleu.metrics import BLEU, CHRF
from torch import Tensor, nn

from attnscope.vision.baseline import FullImageCNN
from attnscope.vision.captioner import Captioner, beam_search, greedy
from attnscope.vision.data import CLASSES, Canvases
from attnscope.vision.ram import RecurrentAttentionModel
from attnscope.vision.scenes import GRID, Placed, Scenes, caption_words, cell_overlap, decode


@torch.no_grad()
def classifier_accuracy(model: nn.Module, canvases: Canvases, batch: int = 500) -> dict[str, Any]:
    """Accuracy on ``canvases``; for the RAM (following its policy's mean, as when serving) also
    the accuracy after each glimpse, ``by_glimpse``."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    correct: Tensor | None = None
    for start in range(0, len(canvases.labels), batch):
        images = canvases.images[start : start + batch].to(device)
        labels = canvases.labels[start : start + batch].to(device)
        if isinstance(model, RecurrentAttentionModel):
            answers = model(images, sample=False).class_log_probs.argmax(-1)  # (B, T)
        elif isinstance(model, FullImageCNN):
            answers = model(images).argmax(-1)[:, None]  # (B, 1)
        else:
            raise TypeError(f"not a classifier: {type(model).__name__}")
        hits = (answers == labels[:, None]).sum(0).cpu()
        correct = hits if correct is None else correct + hits
    model.train(was_training)
    assert correct is not None, "no canvases to evaluate"
    by_step = (correct.double() / len(canvases.labels)).tolist()
    result: dict[str, Any] = {"accuracy": by_step[-1], "examples": len(canvases.labels)}
    if isinstance(model, RecurrentAttentionModel):
        result["by_glimpse"] = by_step
    return result


def named_cells(layout_cells: list[tuple[int, int]], names: list[int | None]) -> list[int | None]:
    """For each word, the scene cell (row*3 + col) of the item it names, or None."""
    return [None if n is None else layout_cells[n][0] * GRID + layout_cells[n][1] for n in names]


def attention_in_cells(attention: Tensor, cells: list[int | None], overlap: Tensor) -> list[float]:
    """attention (T, rows*cols), cells per word -> the share of each naming word's attention that
    lies in its item's cell (words naming nothing are skipped)."""
    shares = attention.float().cpu() @ overlap  # (T, 9)
    return [float(shares[t, cell]) for t, cell in enumerate(cells) if cell is not None and t < len(shares)]


@torch.no_grad()
def caption_metrics(model: Captioner, scenes: Scenes, *, beam_size: int = 1, batch: int = 200) -> dict[str, Any]:
    """BLEU (sacreBLEU on the space-separated words, tokenize none), chrF (sacreBLEU's chrF2 of the
    same captions), exact match, the share of
    scenes whose caption names every item (``names_every_item``: each item's cell is named by
    one of its class words, order and relations aside), and attention in the named item's cell: ``attention_in_cell`` on the generated captions (words that name
    an item in the scene), ``attention_in_cell_reference`` under teacher forcing on the
    reference captions. Uniform attention scores 1/9 on both."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    grid = model.config.grid
    overlap = cell_overlap(grid, grid)
    hypotheses: list[str] = []
    names_all = 0  # scenes whose caption names every item's class
    shares: list[float] = []
    reference_shares: list[float] = []
    for start in range(0, len(scenes.captions), batch):
        images = scenes.images[start : start + batch].to(device)
        layouts = scenes.layouts[start : start + batch]
        if beam_size == 1:
            ids, atts = greedy(model, images)
        else:
            pairs = [beam_search(model, images[i : i + 1], beam_size) for i in range(len(images))]
            ids, atts = [p[0] for p in pairs], [p[1] for p in pairs]
        forced = model(images, scenes.tokens[start : start + batch].to(device)).attention  # (B, T, L)
        for b, layout in enumerate(layouts):
            words = decode(ids[b])
            hypotheses.append(" ".join(words))
            cell_of = {p.cls: p.row * GRID + p.col for p in layout}
            word_cells = _cells_of_words(words, cell_of)
            names_all += names_every_item(words, layout)
            shares += attention_in_cells(atts[b], word_cells, overlap)
            ref_words, ref_names = caption_words(layout)
            ref_cells = named_cells([(p.row, p.col) for p in layout], ref_names)
            reference_shares += attention_in_cells(forced[b, : len(ref_words)], ref_cells, overlap)
    model.train(was_training)
    metric = BLEU(tokenize="none")
    bleu = metric.corpus_score(hypotheses, [scenes.captions])
    chrf_metric = CHRF()
    chrf = chrf_metric.corpus_score(hypotheses, [scenes.captions])
    exact = sum(h == r for h, r in zip(hypotheses, scenes.captions, strict=True)) / len(hypotheses)
    return {
        "bleu": round(bleu.score, 2),
        "bleu_signature": str(metric.get_signature()),
        "chrf": round(chrf.score, 2),
        "chrf_signature": str(chrf_metric.get_signature()),
        "exact_match": exact,
        "names_every_item": names_all / len(hypotheses),
        "attention_in_cell": sum(shares) / len(shares) if shares else None,
        "attention_in_cell_reference": sum(reference_shares) / len(reference_shares) if reference_shares else None,
        "uniform_attention_in_cell": 1 / (GRID * GRID),
        "beam_size": beam_size,
        "examples": len(hypotheses),
        "samples": [{"reference": r, "generated": h} for r, h in list(zip(scenes.captions, hypotheses, strict=True))[:8]],
    }


def names_every_item(words: list[str], layout: list[Placed]) -> bool:
    """Whether a caption's words name every item of the scene (a class word of each; two-word
    classes such as "ankle boot" count by either word; order and relations aside)."""
    cell_of = {p.cls: p.row * GRID + p.col for p in layout}
    return set(cell_of.values()) <= {c for c in _cells_of_words(words, cell_of) if c is not None}


def _cells_of_words(words: list[str], cell_of: dict[int, int]) -> list[int | None]:
    """Cells named by the class words of a generated caption (a class absent from the scene
    names nothing). Two-word classes ("ankle boot") count both words."""
    word_class = {w: c for c, name in enumerate(CLASSES) for w in name.split()}
    return [cell_of.get(word_class[w]) if w in word_class else None for w in words]
