"""``attnscope evaluate --alignment`` for a decoder-only folder: every (layer, query head) of the
model scored as a word aligner, the numbers written under the card's ``alignment`` key in the
shape the encoder-decoders' use (:mod:`attnscope.alignment.heads`).

Conventions, as for an encoder-decoder (they change the numbers):

* teacher-forced on the reference target (:meth:`~attnscope.llm.translator.LLMTranslator.align`:
  the card's prompt, then the target and the stop token); the matrix scored is the answer's
  ``target_source`` view (the output rows over the source's prompt tokens), so instruction, sink
  and earlier output are left out, and the stop token's row is dropped;
* row = the step that *produces* each target word (the query one position before it), or with
  ``rows="reads"`` the step that reads it (its own position);
* pieces -> words by the tokenizer's own character offsets (a piece belongs to the word it
  overlaps most; a whitespace-only piece to the next word); a source word's weight is the sum
  over its pieces, a target word's row the mean over its pieces; argmax per target word.

References are either the eflomal files of ``attnscope align-corpus`` (``--data-dir``,
``--alignment-split``, ``--align-dir``: Moses words) or a links file the user writes
(``--links``): one sentence pair a line, ``source<TAB>target<TAB>links``, its words the
whitespace-separated tokens of each side and its links Pharaoh ``i-j`` (source word, target word).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from attnscope.alignment.corpus import AlignedPair, default_align_dir, load_references
from attnscope.alignment.heads import HeadScores, WordMap
from attnscope.alignment.links import parse_pharaoh
from attnscope.alignment.rows import Rows
from attnscope.alignment.words import Span, spans_to_words
from attnscope.llm.translator import LLMTranslator
from attnscope.text.corpus import DataError, load_parallel

logger = logging.getLogger(__name__)

CONVENTION = (
    "teacher-forced on the reference after the card's prompt; matrix = output rows over the source's "
    "prompt tokens (instruction, sink and own output left out); row = {row}; source word = sum over "
    "its pieces, target word = mean over its pieces (pieces -> words by the tokenizer's offsets), stop "
    "token dropped; argmax per target word; words and links: {words}"
)
ROW_WORDS = {"produces": "the step that produces the word", "reads": "the step that reads the word"}


def whitespace_words(text: str) -> list[Span]:
    """Character spans of the whitespace-separated tokens of ``text``."""
    spans, start = [], None
    for k, ch in enumerate(text + " "):
        if ch.isspace():
            if start is not None:
                spans.append((start, k))
            start = None
        elif start is None:
            start = k
    return spans


def read_links_file(path: str | Path) -> tuple[list[tuple[str, str]], list[AlignedPair]]:
    """The sentence pairs and references of a hand-written links file (module docstring);
    DataError naming the file and line of the first malformed one."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as err:
        raise DataError(f"the links file {path} cannot be read: {err}") from err
    pairs: list[tuple[str, str]] = []
    refs: list[AlignedPair] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        cols = line.split("\t")
        where = f"{path}:{number}"
        if len(cols) != 3:
            raise DataError(f"{where}: expected source<TAB>target<TAB>links, got {len(cols)} columns")
        source, target = cols[0], cols[1]
        src, tgt = whitespace_words(source), whitespace_words(target)
        if not src or not tgt:
            raise DataError(f"{where}: a side without words cannot be aligned")
        try:
            links = parse_pharaoh(cols[2])
        except ValueError as err:
            raise DataError(f"{where}: {err}") from err
        if any(i >= len(src) or j >= len(tgt) for i, j in links):
            raise DataError(f"{where}: a link points past the {len(src)} source or {len(tgt)} target words")
        pairs.append((source, target))
        refs.append(AlignedPair(links, src, tgt))
    if not pairs:
        raise DataError(f"the links file {path} has no sentence pairs")
    return pairs, refs


def _span(text: str, start: int, end: int) -> Span | None:
    """``[start, end)`` clipped to ``text`` without surrounding whitespace; None if nothing is left."""
    start, end = max(0, start), min(len(text), end)
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return (start, end) if start < end else None


def word_map(translator: LLMTranslator, source: str, target: str, reference: AlignedPair) -> WordMap:
    """Pieces -> words of one pair, the source's pieces those of its span in the prompt (as the
    model read them), the target's those :meth:`LLMTranslator.align` feeds."""
    prompt = translator.prompt(source)
    backend = translator.loaded.tokenizer.backend
    encoding = backend.encode(prompt.filled.text, add_special_tokens=translator.add_special_tokens)
    s0, s1 = prompt.source_span
    base = prompt.filled.start
    src_spans = [_span(source, a - base, b - base) for a, b in encoding.offsets[s0:s1]]
    tgt_spans = [_span(target, a, b) for a, b in backend.encode(target, add_special_tokens=False).offsets]
    return WordMap(
        source=spans_to_words(src_spans, reference.source_words),
        target=spans_to_words(tgt_spans, reference.target_words),
        n_source=len(reference.source_words),
        n_target=len(reference.target_words),
    )


@torch.inference_mode()
def score_llm_heads(
    translator: LLMTranslator, pairs: Sequence[tuple[str, str]], references: Sequence[AlignedPair], *,
    rows: Rows = "produces",
) -> dict[str, Any]:  # fmt: skip
    """The card's ``alignment`` grids (``[layer][query head]``), per layer, average of heads,
    diagonal baseline, best and worst head of ``translator``'s model on ``pairs``."""
    config = translator.loaded.config
    scores = HeadScores(config.layers, config.heads, rows)
    for (source, target), ref in zip(pairs, references, strict=True):
        words = word_map(translator, source, target, ref)
        translation = translator.align(source, target)
        assert translation.views is not None
        cross = translation.views.target_source.float().cpu()  # (L, H, T + 1, S): T pieces + the stop row
        if cross.size(-1) != len(words.source) or cross.size(-2) != len(words.target) + 1:
            raise DataError(f"the tokens of {source!r} / {target!r} in the prompt differ from those alone")
        scores.add(cross, words, ref.links)
    return scores.report()


def evaluate_llm_alignment(
    translator: LLMTranslator, *, links: str | Path | None = None, data_dir: str | Path | None = None,
    split: str = "test2016", align_dir: str | Path | None = None, rows: Rows = "produces",
) -> dict[str, Any]:  # fmt: skip
    """The card's ``alignment`` entry (``alignment_reads`` for ``rows="reads"``) against the
    ``links`` file, else the align-corpus references of ``split`` under ``data_dir``."""
    loaded = translator.loaded
    if links is not None:
        pairs, refs = read_links_file(links)
        words, where = "whitespace tokens and hand-written links", str(Path(links).name)
    else:
        if data_dir is None:
            raise DataError("pass --links FILE or a --data-dir with align-corpus references")
        pairs = load_parallel(data_dir, split, loaded.source_lang, loaded.target_lang)
        refs = load_references(align_dir or default_align_dir(data_dir), split, loaded.source_lang,
                               loaded.target_lang, expected=len(pairs))  # fmt: skip
        words, where = "Moses tokens, eflomal both directions + grow-diag-final-and", split
    report = score_llm_heads(translator, pairs, refs, rows=rows)
    logger.info("%s %s: best head %s, average of heads %s", loaded.id, where, report["best_head"],
                report["average_of_heads"])  # fmt: skip
    return {"split": where, "convention": CONVENTION.format(row=ROW_WORDS[rows], words=words), **report}
