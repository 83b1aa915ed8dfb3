"""Per-sentence gold alignment scores of every cross-attention head, the head chosen on a held-out
part, and the flags of a test-set row.

Alignment (where a sentence has gold links): the model is teacher-forced on the reference, and each
head's word-level attention (``attnscope.alignment.heads`` conventions: source word = sum of its
pieces, target word = mean, ``</s>`` dropped, argmax per reference word, rows of the step that
``produces`` the word unless ``reads`` is asked for) gives one link per reference word. A row keeps
each head's four counts (predicted, sure, predicted∩sure, predicted∩possible), so any set of rows —
a slice, the whole set — has exact corpus-level AER (Och & Ney 2003) for every head.

**The best head is chosen on a held-out part** — every fifth sentence (index % 5 == 0) — as the head
of lowest AER there, and reported on the other sentences; a row's ``aer`` is that head's on the
sentence. Choosing it on the sentences it is scored on would flatter it.

Flags: ``low_confidence`` (the model's own calibrated flag, :mod:`attnscope.decoding.confidence`;
never for a model without a calibration in its card), ``never_attended`` (at least half of the
source words, whitespace-separated, are never the most attended word of any output step, attention
averaged over every layer and head — words the model may have left out; the shipped en-de
Transformer, greedy: 2 % of 150 Multi30k test2016 sentences, 47 % of 100 RWTH Europarl sentences;
with the last layer alone or a third of the words it fired on half of the in-domain sentences),
``short_output`` (a source of at least 4 words translated into fewer than half as many words).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from attnscope.alignment.gold import GoldCounts, GoldPair
from attnscope.alignment.heads import build_word_map, merge_matrix, word_attention
from attnscope.alignment.rows import Rows
from attnscope.alignment.words import locate, pieces_to_words
from attnscope.translator import Translation

HELD_OUT_EVERY = 5
FLAGS = ("low_confidence", "never_attended", "short_output")
NEVER_ATTENDED_SHARE = 1 / 2
SHORT_RATIO, SHORT_MIN_WORDS = 0.5, 4


def held_out(index: int) -> bool:
    """Whether sentence ``index`` is in the part that chooses the best head."""
    return index % HELD_OUT_EVERY == 0


def has_cross(loaded: Any) -> bool:
    config = getattr(loaded, "config", None)
    return "cross" in getattr(config, "attention_kinds", ())


def cross_heads(loaded: Any) -> int:
    """Cross-attention heads per layer (1 for an RNN's attention)."""
    config = loaded.config
    return (
        config.heads_of("decoder")
        if hasattr(config, "heads_of")
        else getattr(config, "num_heads", 1)
    )


@torch.no_grad()
def head_counts(loaded: Any, pair: GoldPair, rows: Rows = "produces") -> list[int]:
    """One sentence's counts, flat ``[layer][head][4]``: predicted, sure, predicted∩sure,
    predicted∩possible links of each head (teacher-forced on ``pair.target``)."""
    from attnscope.nn.config import EOS_ID

    tok, model = loaded.tokenizer, loaded.model
    src_ids, tgt_ids = tok.encode(pair.source), tok.encode(pair.target)
    words = build_word_map(
        tok.pieces, pair.source, pair.target, src_ids, tgt_ids, pair.source_words, pair.target_words
    )
    src = torch.tensor([src_ids + [EOS_ID]], device=model.device)
    tgt_in = torch.tensor([[loaded.config.bos_id, *tgt_ids]], device=model.device)
    cross = model(src, tgt_in, need_weights=True).cross[0].float().cpu()  # (L, H, T, S)
    best = word_attention(cross, words, rows).argmax(-1).tolist()  # (L, H, Wt)
    out: list[int] = []
    for layer in best:
        for head in layer:
            counts = GoldCounts()
            counts.add({(int(i), j) for j, i in enumerate(head)}, pair.sure, pair.possible)
            out += [counts.hypothesis, counts.sure, counts.hit_sure, counts.hit_possible]
    return out


def sum_counts(rows: Sequence[dict[str, Any]]) -> list[GoldCounts]:
    """Per head (flat ``layer * heads + head``), the counts summed over ``rows`` that have them."""
    total: list[GoldCounts] = []
    for row in rows:
        flat = row.get("align_counts")
        if not flat:
            continue
        if not total:
            total = [GoldCounts() for _ in range(len(flat) // 4)]
        for k, c in enumerate(total):
            h, s, hs, hp = flat[4 * k : 4 * k + 4]
            c.hypothesis, c.sure, c.hit_sure, c.hit_possible = (
                c.hypothesis + h, c.sure + s, c.hit_sure + hs, c.hit_possible + hp,
            )  # fmt: skip
    return total


def choose_head(rows: Sequence[dict[str, Any]], heads: int) -> dict[str, Any] | None:
    """The head of lowest AER on the held-out rows, and every head's AER on the others:
    ``{"layer", "head", "heldout_aer", "aer", "precision", "recall", "heads": [[...]], ...}``;
    None without alignments. ``heads``: heads per layer."""
    part = [r for r in rows if r.get("align_counts") and held_out(r["index"])]
    rest = [r for r in rows if r.get("align_counts") and not held_out(r["index"])]
    if not part:
        return None
    chosen = sum_counts(part)
    scored = [c.scores() for c in sum_counts(rest or part)]
    best = min(range(len(chosen)), key=lambda k: (chosen[k].scores()["aer"], k))
    layer, head = divmod(best, heads)
    grid = [[scored[lay * heads + h] for h in range(heads)] for lay in range(len(scored) // heads)]
    return {
        "layer": layer, "head": head, "heldout_aer": chosen[best].scores()["aer"], **scored[best],
        "heldout_sentences": len(part), "scored_sentences": len(rest or part), "heads": grid,
    }  # fmt: skip


def sentence_aer(row: dict[str, Any], flat_head: int) -> float | None:
    flat = row.get("align_counts")
    if not flat:
        return None
    c = GoldCounts()
    c.hypothesis, c.sure, c.hit_sure, c.hit_possible = flat[4 * flat_head : 4 * flat_head + 4]
    return c.scores()["aer"]


def never_attended(done: Translation, tokenizer: Any) -> list[str] | None:
    """Source words (whitespace) that are the most attended word of no output step, attention
    averaged over every layer and head; None without cross-attention."""
    cross = done.hypothesis.cross
    words = done.source_text.split() if done.source_text else []
    if cross is None or not words or cross.size(-2) == 0:
        return None
    piece_ids = done.source_ids[:-1]
    if cross.size(-1) != len(piece_ids) + 1:
        return None
    try:
        owner = pieces_to_words(
            done.source_text, tokenizer.pieces(piece_ids), locate(done.source_text, words)
        )
    except ValueError:
        return None
    rows = cross.float().mean((0, 1))[:, :-1]  # (T, S - 1)
    merged = rows @ merge_matrix(owner, len(words), mean=False).T  # (T, W)
    seen = set(merged.argmax(-1).tolist())
    return [w for k, w in enumerate(words) if k not in seen]


def flags_of(row: dict[str, Any], unattended: list[str] | None, low: bool) -> list[str]:
    """The row's flags (see the module docstring)."""
    flags = ["low_confidence"] if low else []
    if unattended is not None and len(unattended) >= NEVER_ATTENDED_SHARE * max(
        1, row["source_words"]
    ):
        flags.append("never_attended")
    if (
        row["source_words"] >= SHORT_MIN_WORDS
        and row["output_words"] < SHORT_RATIO * row["source_words"]
    ):
        flags.append("short_output")
    return flags
