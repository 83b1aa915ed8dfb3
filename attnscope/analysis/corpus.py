"""The corpus of an analysis: sentences (plain or gzipped text, one a line), optional reference
translations and Pharaoh alignments, read into :class:`Item` s and cut into batches.

Alignments are either plain Pharaoh lines (``i-j``: 0-based source word, reference word; words
are Moses tokens, the convention of ``attnscope.alignment``) or the ``align-corpus`` files
(``links<TAB>source spans<TAB>target spans``), whose spans name the words themselves."""

from __future__ import annotations

import gzip
import logging
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from attnscope.alignment.corpus import _parse_spans
from attnscope.alignment.links import parse_pharaoh
from attnscope.alignment.words import Span, word_spans
from attnscope.analysis.statistics import rarest_position
from attnscope.text.interface import Tokenizer as AnyTokenizer
from attnscope.text.tokenizer import Tokenizer

logger = logging.getLogger(__name__)


@dataclass
class Item:
    """One sentence to analyse: its 0-based line in the corpus, its text, its reference (None:
    translate greedily), the index of its corpus-rarest source piece and, when alignments were
    given, the reference links with the word spans of source and reference. ``rare_id`` is that
    piece's id (a decoder-only model finds it among the source's tokens in its prompt)."""

    line: int
    source: str
    reference: str | None
    rare: int
    rare_id: int | None = None
    links: list[tuple[int, int]] | None = None
    source_words: list[Span] | None = None
    target_words: list[Span] | None = None


def read_lines(path: str | Path, limit: int | None = None) -> list[str]:
    """The first ``limit`` lines (all when None) of a text file, gzipped when it starts with
    gzip's magic bytes; FileNotFoundError naming the file."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no such file: {path}")
    with path.open("rb") as f:
        gzipped = f.read(2) == b"\x1f\x8b"
    opened = gzip.open(path, "rt", encoding="utf-8") if gzipped else path.open(encoding="utf-8")
    lines: list[str] = []
    with opened as f:
        for line in f:
            if limit is not None and len(lines) >= limit:
                break
            lines.append(line.rstrip("\n").rstrip("\r"))
    return lines


def _alignment(line: str, where: str, source: str, reference: str, langs: tuple[str, str]
) -> tuple[list[tuple[int, int]], list[Span], list[Span]]:
    """(links, source spans, reference spans) of one alignments line; ValueError naming it."""
    cols = line.split("\t")
    try:
        links = parse_pharaoh(cols[0])
    except ValueError as err:
        raise ValueError(f"{where}: {err}") from err
    if len(cols) == 3:
        src, tgt = _parse_spans(cols[1], where), _parse_spans(cols[2], where)
    elif len(cols) == 1:
        src, tgt = word_spans(source, langs[0]), word_spans(reference, langs[1])
    else:
        raise ValueError(f"{where}: expected Pharaoh links, or links<TAB>source spans<TAB>target spans")
    if any(i >= len(src) or j >= len(tgt) for i, j in links):
        raise ValueError(f"{where}: a link points past the {len(src)} source or {len(tgt)} reference words")
    return sorted(links), src, tgt


def read_items(
    tokenizer: Tokenizer,
    corpus: str | Path,
    *,
    references: str | Path | None = None,
    alignments: str | Path | None = None,
    langs: tuple[str, str] = ("en", "de"),
    limit: int | None = None,
    max_tokens: int = 200,
) -> list[Item]:
    """Read and check the inputs (ValueError when files disagree in length or alignments come
    without references) and return the items to analyse (:func:`make_items`)."""
    sources = read_lines(corpus, limit)
    refs: list[str] | None = None if references is None else read_lines(references, len(sources))
    if refs is not None and len(refs) != len(sources):
        raise ValueError(f"{references} has {len(refs)} lines but {corpus} has {len(sources)}")
    if alignments is not None and refs is None:
        raise ValueError("--alignments needs --references: the links point at the reference's words")
    links = None if alignments is None else read_lines(alignments, len(sources))
    if links is not None and len(links) != len(sources):
        raise ValueError(f"{alignments} has {len(links)} lines but {corpus} has {len(sources)}")
    return make_items(tokenizer, sources, references=refs, links=links, langs=langs, max_tokens=max_tokens, where=str(alignments))


def make_items(
    tokenizer: AnyTokenizer,
    sources: Sequence[str],
    *,
    references: Sequence[str] | None = None,
    links: Sequence[str] | None = None,
    langs: tuple[str, str] = ("en", "de"),
    max_tokens: int = 200,
    where: str = "alignments",
) -> list[Item]:
    """The items of ``sources`` (with their ``references`` and alignment ``links`` lines, of
    equal length; ``where`` names the links in errors). Empty lines and sentences longer than
    ``max_tokens`` pieces (source or reference) are skipped with a log line; rarity is counted
    over the source pieces of every line given."""
    ids = [tokenizer.encode(s) for s in sources]
    counts = Counter(piece for row in ids for piece in row)
    items, skipped = [], 0
    for k, (text, row) in enumerate(zip(sources, ids, strict=True)):
        ref = None if references is None else references[k]
        too_long = len(row) > max_tokens or (ref is not None and len(tokenizer.encode(ref)) > max_tokens)
        if not row or too_long or (ref is not None and not ref.strip()):
            skipped += 1
            continue
        rare = rarest_position(row, counts)
        item = Item(k, text, ref, rare, rare_id=row[rare])
        if links is not None and ref is not None:
            item.links, item.source_words, item.target_words = _alignment(links[k], f"{where}:{k + 1}", text, ref, langs)
        items.append(item)
    if skipped:
        logger.info("skipped %d empty or over-long lines of %d", skipped, len(sources))
    return items


def batches(items: Sequence[Item], batch_size: int) -> Iterator[list[Item]]:
    """Consecutive batches of ``batch_size`` items: the one cut both runners use, so a sentence
    is computed with the same batch mates (and the same padding) in-process and on Ray."""
    if batch_size < 1:
        raise ValueError(f"batch size must be positive, got {batch_size}")
    for start in range(0, len(items), batch_size):
        yield list(items[start : start + batch_size])
