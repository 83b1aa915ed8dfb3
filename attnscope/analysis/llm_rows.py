"""One batch of sentences through a decoder-only model -> the analysis rows, in the columns of
:mod:`attnscope.analysis.rows` (one row per sentence × kind × layer × query head).

A decoder-only model has one causal matrix per layer and query head over prompt + output; its
kinds are the views the common answer gives it (:mod:`attnscope.llm.common`): ``cross`` is
``target_source`` (the output rows over the source's prompt tokens), ``encoder_self`` is
``source_source`` and ``decoder_self`` is ``target_target`` (keys: the last prompt token, which
plays ``<s>``, then the output). Decisions (docs/analysis.md):

* A view's rows do not sum to one (the rest went to the instruction, the first token, earlier
  output), so every statistic of :mod:`attnscope.analysis.statistics` is taken on the rows
  *renormalised over the view's keys*: an entropy or a positional share then means what it means
  for an encoder-decoder. What was left out is kept in two more columns, on the raw rows:
  ``outside_share`` (the weight outside the view's keys) and ``sink_share`` (the weight on the
  prompt's first token, the attention sink). A row with no weight at all on the view's keys (a
  sliding-window layer's output row past the window) has no distribution there: it counts in
  the two raw shares but is left out of the renormalised statistics (all null when every row is).
* Boundary keys: ``decoder_self``'s key 0 (the last prompt token, as ``<s>``); the source has no
  ``</s>`` in the prompt, so ``eos_share`` is null for source keys.
* The rarest source token is the corpus-rarest piece of the sentence tokenised alone (its id,
  :attr:`~attnscope.analysis.corpus.Item.rare_id`), found among the source's prompt tokens;
  ``rare_share`` is null for a sentence where the prompt tokenises it otherwise.
* Alignment F1 is scored on the raw ``target_source`` rows with the word map of
  :func:`attnscope.llm.alignment.word_map`, as ``attnscope evaluate --alignment`` scores them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import torch
from torch import Tensor

from attnscope.alignment.corpus import AlignedPair
from attnscope.alignment.heads import word_attention
from attnscope.analysis.corpus import Item
from attnscope.analysis.rows import COLUMNS, append_kind
from attnscope.analysis.statistics import (
    KINDS,
    Keys,
    alignment_counts,
    head_statistics,
    is_punctuation,
)
from attnscope.llm.alignment import word_map
from attnscope.llm.search import LLMOptions
from attnscope.llm.translator import LLMTranslation, LLMTranslator

GREEDY = LLMOptions(beam_size=1, need_weights=True)


def output_budget(translator: LLMTranslator, prompt_tokens: int) -> int:
    """New tokens a greedy translation may write after a prompt of ``prompt_tokens``: 64, or
    what the model's positions leave (at least one)."""
    return max(1, min(GREEDY.max_new_tokens, translator.loaded.config.max_positions - prompt_tokens))


def translate_item(translator: LLMTranslator, item: Item) -> LLMTranslation:
    """Teacher-forced on the item's reference when it has one, else its greedy translation
    (within the model's positions). ValueError (PromptError) for a prompt the model cannot take."""
    if item.reference is not None:
        return translator.align(item.source, item.reference)
    budget = output_budget(translator, len(translator.prompt(item.source).ids))
    return translator.translate(item.source, replace(GREEDY, max_new_tokens=budget))


def view_slices(result: LLMTranslation, kind: str) -> tuple[slice, slice]:
    """(query rows, keys) of ``kind`` in the full causal matrix of ``result``."""
    assert result.views is not None
    first, (s0, s1) = result.views.first_target_row, result.prompt.source_span
    return {
        "cross": (slice(first, None), slice(s0, s1)),
        "encoder_self": (slice(s0, s1), slice(s0, s1)),
        "decoder_self": (slice(first, None), slice(first, None)),
    }[kind]


def kind_statistics(full: Tensor, rows: slice, keys: slice, facts: Keys) -> dict[str, Tensor | None]:
    """full: (L, H, n, n) one sentence's causal attention -> each statistic of the view
    ``full[..., rows, keys]`` as an (L, H) tensor (None where it does not apply): the view's rows
    renormalised over its keys, plus the raw ``outside_share`` and ``sink_share``."""
    raw = full[:, :, rows, keys].float()  # (L, H, Q, K)
    mass = raw.sum(-1, keepdim=True)
    # a row with no weight on the view's keys (a sliding-window layer's row far past the source)
    # has no distribution over them: NaN, left out of the means
    stats = head_statistics(raw / mass.where(mass > 0, torch.nan), facts)
    stats["outside_share"] = (1.0 - mass[..., 0]).mean(-1)
    stats["sink_share"] = full[:, :, rows, 0].float().mean(-1)
    return stats


def _keys(kind: str, translator: LLMTranslator, result: LLMTranslation, item: Item) -> Keys:
    if kind == "decoder_self":
        pieces = result.target_tokens[:-1]
        return Keys(boundary=0, punctuation=[False] + [is_punctuation(p) for p in pieces], rare=None, positional=True)
    s0, s1 = result.prompt.source_span
    ids = result.prompt.ids[s0:s1]
    rare = ids.index(item.rare_id) if item.rare_id is not None and item.rare_id in ids else None
    punctuation = [is_punctuation(p) for p in result.prompt.tokens[s0:s1]]
    return Keys(boundary=None, punctuation=punctuation, rare=rare, positional=kind == "encoder_self")


def _alignment(translator: LLMTranslator, result: LLMTranslation, item: Item) -> tuple[list[list[int]], int, int] | None:
    """Per head the correct argmax links of one teacher-forced sentence, and the hypothesis and
    reference link counts (None without links)."""
    if item.links is None or item.reference is None or item.source_words is None or item.target_words is None:
        return None
    assert result.views is not None
    words = word_map(translator, item.source, item.reference, AlignedPair(set(item.links), item.source_words, item.target_words))
    cross = result.views.target_source.float().cpu()  # (L, H, T + 1, S): the pieces, then the stop row
    if cross.size(-1) != len(words.source) or cross.size(-2) != len(words.target) + 1:
        raise ValueError(f"line {item.line + 1}: the tokens of the sentence in the prompt differ from those alone")
    return alignment_counts(word_attention(cross, words), set(item.links))


def sentence_rows(translator: LLMTranslator, result: LLMTranslation, item: Item, columns: dict[str, list[Any]]) -> None:
    """Append one sentence's rows to ``columns`` (kind order: :data:`KINDS`)."""
    assert result.views is not None
    full = result.views.full.cpu()
    for kind in KINDS:
        rows, keys = view_slices(result, kind)
        stats = kind_statistics(full, rows, keys, _keys(kind, translator, result, item))
        aligned = _alignment(translator, result, item) if kind == "cross" else None
        shape = (*full.shape[:2], len(range(full.size(-2))[rows]), len(range(full.size(-1))[keys]))
        append_kind(columns, item.line, kind, shape, stats, aligned)


@torch.inference_mode()
def analyze_llm_batch(translator: LLMTranslator, batch: Sequence[Item]) -> dict[str, list[Any]]:
    """The rows of one batch as columns (:data:`~attnscope.analysis.rows.COLUMNS`): each sentence
    decoded alone (a decoder-only model runs one prompt at a time here)."""
    columns: dict[str, list[Any]] = {name: [] for name in COLUMNS}
    for item in batch:
        sentence_rows(translator, translate_item(translator, item), item, columns)
    return columns
