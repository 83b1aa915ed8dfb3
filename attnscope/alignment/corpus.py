"""Reference word alignments for a language pair: eflomal (Östling & Tiedemann 2016) run in both
directions over Moses words, symmetrised with grow-diag-final-and, stored per split beside the
corpus.

Each split is one gzipped text file ``<split>.<src>-<tgt>.tsv.gz``, a line per sentence pair with
three tab-separated columns: the Pharaoh links (``i-j``: source word, target word), the source
word spans and the target word spans (``start:end`` character offsets into the raw sentence).
The spans make the file self-contained: scoring and alignment-supervised training map subword
pieces to these words without re-running the word tokenizer. ``zcat F | cut -f1`` is plain Pharaoh.
"""

from __future__ import annotations

import gzip
import logging
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from attnscope.alignment.links import Links, format_pharaoh, grow_diag_final_and, parse_pharaoh
from attnscope.alignment.words import Span, locate, moses_words
from attnscope.extras import require
from attnscope.text.corpus import DataError, load_parallel

logger = logging.getLogger(__name__)

ALIGNMENTS_SUBDIR = "alignments"


@dataclass
class AlignedPair:
    """One reference sentence pair: its links and the character spans of its words."""

    links: Links
    source_words: list[Span]
    target_words: list[Span]


def references_path(align_dir: str | Path, split: str, source_lang: str, target_lang: str) -> Path:
    return Path(align_dir) / f"{split}.{source_lang}-{target_lang}.tsv.gz"


def default_align_dir(data_dir: str | Path) -> Path:
    """References live beside the corpus, in ``<data-dir>/alignments``."""
    return Path(data_dir) / ALIGNMENTS_SUBDIR


def _format_spans(spans: Sequence[Span]) -> str:
    return " ".join(f"{a}:{b}" for a, b in spans)


def _parse_spans(text: str, where: str) -> list[Span]:
    spans = []
    for item in text.split():
        a, sep, b = item.partition(":")
        if not sep or not a.isdigit() or not b.isdigit():
            raise DataError(f"{where}: bad word span {item!r} (expected start:end)")
        spans.append((int(a), int(b)))
    return spans


def write_references(path: Path, pairs: Sequence[AlignedPair]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".part")
    with gzip.open(partial, "wt", encoding="utf-8") as f:
        for p in pairs:
            f.write(f"{format_pharaoh(p.links)}\t{_format_spans(p.source_words)}\t{_format_spans(p.target_words)}\n")
    partial.rename(path)


def read_references(path: str | Path) -> list[AlignedPair]:
    """Read a references file; DataError naming the file and line if it is malformed."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"missing reference alignments {path}: make them with `attnscope align-corpus`")
    out = []
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            where = f"{path}:{number}"
            cols = line.rstrip("\n").split("\t")
            if len(cols) != 3:
                raise DataError(f"{where}: expected 3 tab-separated columns, got {len(cols)}")
            try:
                links = parse_pharaoh(cols[0])
            except ValueError as err:
                raise DataError(f"{where}: {err}") from err
            src, tgt = _parse_spans(cols[1], where), _parse_spans(cols[2], where)
            if any(i >= len(src) or j >= len(tgt) for i, j in links):
                raise DataError(f"{where}: a link points past the {len(src)} source or {len(tgt)} target words")
            out.append(AlignedPair(links, src, tgt))
    return out


def load_references(
    align_dir: str | Path, split: str, source_lang: str, target_lang: str, expected: int | None = None
) -> list[AlignedPair]:
    """The references of ``split``; DataError if the count differs from ``expected`` lines."""
    path = references_path(align_dir, split, source_lang, target_lang)
    refs = read_references(path)
    if expected is not None and len(refs) != expected:
        raise DataError(f"{path} has {len(refs)} lines but the {split} split has {expected} sentence pairs")
    return refs


def eflomal_links(sources: list[list[str]], targets: list[list[str]]) -> list[Links]:
    """Run eflomal both directions over tokenised sentences and symmetrise each pair with
    grow-diag-final-and. eflomal lower-cases words itself. Returns one link set per pair."""
    eflomal = require("eflomal", "align", purpose="align-corpus")
    with tempfile.TemporaryDirectory() as tmp:
        fwd, rev = Path(tmp) / "fwd", Path(tmp) / "rev"
        logger.info("eflomal over %d sentence pairs", len(sources))
        eflomal.Aligner().align(
            [" ".join(s) for s in sources], [" ".join(t) for t in targets],
            links_filename_fwd=str(fwd), links_filename_rev=str(rev), quiet=True,
        )
        forward = fwd.read_text().split("\n")[: len(sources)]
        reverse = rev.read_text().split("\n")[: len(sources)]
    return [grow_diag_final_and(parse_pharaoh(f), parse_pharaoh(r)) for f, r in zip(forward, reverse, strict=True)]


def align_corpus(
    data_dir: str | Path,
    source_lang: str,
    target_lang: str,
    *,
    splits: Sequence[str] = ("train", "val", "test2016"),
    align_dir: str | Path | None = None,
) -> dict[str, Path]:
    """Align all ``splits`` of a pair in one eflomal run (more text, better statistics; the
    training split is always included) and write one references file per split."""
    splits = list(dict.fromkeys(["train", *splits]))
    out_dir = Path(align_dir) if align_dir else default_align_dir(data_dir)
    sentences: list[tuple[str, str]] = []
    bounds: dict[str, tuple[int, int]] = {}
    for split in splits:
        pairs = load_parallel(data_dir, split, source_lang, target_lang)
        bounds[split] = (len(sentences), len(sentences) + len(pairs))
        sentences.extend(pairs)
    src_tokens = [moses_words(s, source_lang) for s, _ in sentences]
    tgt_tokens = [moses_words(t, target_lang) for _, t in sentences]
    links = eflomal_links(src_tokens, tgt_tokens)
    written = {}
    for split, (lo, hi) in bounds.items():
        rows = [
            AlignedPair(links[k], locate(sentences[k][0], src_tokens[k]), locate(sentences[k][1], tgt_tokens[k]))
            for k in range(lo, hi)
        ]
        path = references_path(out_dir, split, source_lang, target_lang)
        write_references(path, rows)
        written[split] = path
        logger.info("wrote %s (%d pairs)", path, len(rows))
    return written
