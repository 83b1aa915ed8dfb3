"""``attnscope evaluate --alignment``: every cross-attention head of a model scored as a word
aligner against the reference links of a split (see ``attnscope.alignment.heads`` for conventions)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from attnscope.alignment.corpus import AlignedPair, default_align_dir, load_references
from attnscope.alignment.heads import HeadScores, build_word_map
from attnscope.alignment.rows import Rows
from attnscope.decoding import score_targets
from attnscope.nn.config import EOS_ID
from attnscope.repository import LoadedModel
from attnscope.text.corpus import load_parallel

logger = logging.getLogger(__name__)

CONVENTION = (
    "teacher-forced on the reference; row = {row}; source word = sum over its pieces, target word = "
    "mean over its pieces, </s> dropped; argmax per target word; words are Moses tokens; reference = "
    "eflomal both directions + grow-diag-final-and"
)
ROW_WORDS = {"produces": "the step that produces the word", "reads": "the step that reads the word (the next one)"}


def convention(rows: Rows = "produces") -> str:
    """The card's description of how ``rows`` alignments were scored."""
    return CONVENTION.format(row=ROW_WORDS[rows])


@torch.no_grad()
def score_heads(
    loaded: LoadedModel,
    pairs: Sequence[tuple[str, str]],
    references: Sequence[AlignedPair],
    *,
    batch_size: int = 64,
    progress: bool = False,
    rows: Rows = "produces",
) -> dict[str, Any]:
    """Precision/recall/F1/AER of every head, each layer's average, all heads' average and the
    diagonal baseline, with each target word's row chosen by ``rows`` (attnscope.alignment.heads);
    ValueError if the model has no cross-attention."""
    config, tok, model = loaded.config, loaded.tokenizer, loaded.model
    if "cross" not in config.attention_kinds:
        raise ValueError(f"{loaded.id} has no cross-attention to score")
    was_training = model.training
    model.eval()
    scores = HeadScores(config.layers, config.num_heads, rows)
    device = model.device
    order = sorted(range(len(pairs)), key=lambda k: len(pairs[k][0]))
    batches = [order[k : k + batch_size] for k in range(0, len(order), batch_size)]
    for batch in tqdm(batches, desc=f"align {loaded.id}", disable=not progress, leave=False):
        src_ids = [tok.encode(pairs[k][0]) for k in batch]
        tgt_ids = [tok.encode(pairs[k][1]) for k in batch]
        width_s = max(len(s) for s in src_ids) + 1
        width_t = max(len(t) for t in tgt_ids) + 1
        pad = config.pad_id
        src = torch.tensor([s + [EOS_ID] + [pad] * (width_s - len(s) - 1) for s in src_ids], device=device)
        tgt = torch.tensor([t + [EOS_ID] + [pad] * (width_t - len(t) - 1) for t in tgt_ids], device=device)
        cross = score_targets(model, src, tgt).cross
        assert cross is not None
        cross = cross.float().cpu()  # one transfer per batch; merging is small CPU work
        for b, k in enumerate(batch):
            ref = references[k]
            words = build_word_map(
                tok.pieces, pairs[k][0], pairs[k][1], src_ids[b], tgt_ids[b], ref.source_words, ref.target_words
            )
            scores.add(cross[b], words, ref.links)
    model.train(was_training)
    return scores.report()


def evaluate_alignment(
    loaded: LoadedModel,
    data_dir: str | Path,
    *,
    split: str = "test2016",
    align_dir: str | Path | None = None,
    progress: bool = True,
    rows: Rows = "produces",
) -> dict[str, Any]:
    """The card's ``alignment`` entry for ``split`` (``alignment_reads`` for ``rows="reads"``)."""
    pairs = load_parallel(data_dir, split, loaded.source_lang, loaded.target_lang)
    refs = load_references(
        align_dir or default_align_dir(data_dir), split, loaded.source_lang, loaded.target_lang, expected=len(pairs)
    )
    report = score_heads(loaded, pairs, refs, progress=progress, rows=rows)
    logger.info(
        "%s %s: best head %s, average of heads F1 %s, diagonal F1 %s",
        loaded.id, split, report["best_head"], report["average_of_heads"], report["diagonal"],
    )
    return {"split": split, "convention": convention(rows), **report}


def best_val_head(
    folder: str | Path,
    data_dir: str | Path,
    align_dir: str | Path,
    device: str | torch.device | None = None,
    rows: Rows = "produces",
) -> tuple[int, int, float]:
    """(layer, head, F1) of the model folder's cross-attention head that aligns best on the
    validation split under ``rows``: the natural head to supervise when fine-tuning it."""
    from attnscope.repository import load_model_folder

    loaded = load_model_folder(folder, device or "cpu")
    pairs = load_parallel(data_dir, "val", loaded.source_lang, loaded.target_lang)
    refs = load_references(align_dir, "val", loaded.source_lang, loaded.target_lang, expected=len(pairs))
    best = score_heads(loaded, pairs, refs, rows=rows)["best_head"]
    return int(best["layer"]), int(best["head"]), float(best["f1"])
