"""Hard word alignments out of one translation's attention, for the API: Pharaoh ``i-j`` pairs
over Moses words of the source text and of the output (or given target) text, with the same
conventions as the evaluation (``attnscope.alignment.heads``): the row of the step that produces each
target piece (or, for a head trained on them, of the step that reads it), ``</s>`` dropped, source
words summed and target words averaged over their pieces, argmax per target word."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from torch import Tensor

from attnscope.alignment.heads import argmax_links, build_word_map, word_attention
from attnscope.alignment.links import format_pharaoh
from attnscope.alignment.rows import Rows
from attnscope.alignment.words import Span, locate, moses_words
from attnscope.nn.config import EOS_ID
from attnscope.text.interface import Tokenizer

Choice = Literal["average"] | tuple[int, int]  # "average" of every cross head, or (layer, head)


def trained_rows(card: dict[str, Any], choice: Choice) -> Rows:
    """The row convention a head aligns by: the one it was trained on when the card says it was
    supervised (``training.alignment_supervision``), otherwise the producing step's."""
    supervised = (card.get("training") or {}).get("alignment_supervision") or {}
    if choice != "average" and supervised.get("rows") == "reads":
        if (supervised.get("layer"), supervised.get("head")) == tuple(choice):
            return "reads"
    return "produces"


@dataclass
class HardAlignment:
    pharaoh: str  # "i-j ..." sorted by target word
    source_words: list[str]
    target_words: list[str]


@dataclass
class WordAttention:
    """One translation's attention merged to words: the Moses words of source and target, their
    character spans, and the (target words, source words) matrix of the chosen head (None when
    either side has no words or no tokens)."""

    source_words: list[str]
    target_words: list[str]
    source_spans: list[Span]
    target_spans: list[Span]
    matrix: Tensor | None


@dataclass(frozen=True)
class Side:
    """One side of a translation: its text, its token ids (a final ``</s>`` is dropped) and its
    language (for the Moses words)."""

    text: str
    ids: list[int]
    lang: str

    def content_ids(self) -> list[int]:
        return self.ids[:-1] if self.ids and self.ids[-1] == EOS_ID else self.ids


def word_level_attention(
    tokenizer: Tokenizer, *, source: Side, target: Side, cross: Tensor, choice: Choice, rows: Rows = "produces"
) -> WordAttention:
    """cross: (L, H, T, S) attention whose rows are ``target.ids`` and columns ``source.ids``
    (each may end with ``</s>``, dropped); each target piece's row chosen by ``rows``
    (attnscope.alignment.heads.aligning_rows)."""
    src_ids, tgt_ids = source.content_ids(), target.content_ids()
    src_tokens, tgt_tokens = moses_words(source.text, source.lang), moses_words(target.text, target.lang)
    src_spans, tgt_spans = locate(source.text, src_tokens), locate(target.text, tgt_tokens)
    if not src_tokens or not tgt_tokens or not src_ids or not tgt_ids:
        return WordAttention(src_tokens, tgt_tokens, src_spans, tgt_spans, None)
    words = build_word_map(tokenizer.pieces, source.text, target.text, src_ids, tgt_ids, src_spans, tgt_spans)
    if choice == "average":
        attn = cross.float().mean((0, 1))
    else:
        attn = cross[choice[0], choice[1]].float()
    return WordAttention(src_tokens, tgt_tokens, src_spans, tgt_spans, word_attention(attn, words, rows))


def hard_alignment(words: WordAttention) -> HardAlignment:
    """The argmax links of a :func:`word_level_attention` result as Pharaoh pairs."""
    if words.matrix is None:
        return HardAlignment("", words.source_words, words.target_words)
    return HardAlignment(format_pharaoh(argmax_links(words.matrix)), words.source_words, words.target_words)
