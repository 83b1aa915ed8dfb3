"""What a test-set job reads: sources, optional references and optional gold word alignments.

Three kinds of test set: a shipped Multi30k split (sources and references), the RWTH
German–English gold set (``rwth-de-en``: sources, references and human sure/possible links, read in
the model's direction by :func:`attnscope.alignment.gold.read_gold`), and an upload (sources,
optional references, optional alignments).

Uploaded alignments are Pharaoh lines, one per sentence pair: ``i-j`` a **sure** link, ``i?j`` (or
``ipj``, the RWTH spelling) a **possible** one, ``i`` a source and ``j`` a reference word, counted
from **0** over the whitespace-separated words of the source and the reference as uploaded (tokenise
them before uploading if the links are over tokens). An empty line is a pair without links (every
predicted link counts against precision); an alignment needs references.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from attnscope.alignment.gold import GoldPair, read_gold
from attnscope.alignment.links import Links
from attnscope.alignment.words import locate
from attnscope.text.corpus import DataError

GOLD_SET = "rwth-de-en"


@dataclass
class TestSet:
    """A test set as a job runs it: ``references`` and ``gold`` (one pair per sentence, in the
    model's direction; None where absent) are None when the set has none."""

    __test__ = False  # not a pytest class

    name: str
    sources: list[str]
    references: list[str] | None = None
    gold: list[GoldPair] | None = None

    def limited(self, limit: int | None) -> TestSet:
        """The first ``limit`` sentences (all when None)."""
        if limit is None:
            return self
        return TestSet(
            self.name,
            self.sources[:limit],
            None if self.references is None else self.references[:limit],
            None if self.gold is None else self.gold[:limit],
        )


def parse_links(line: str, where: str) -> tuple[Links, Links]:
    """``"0-0 1?2 2p1"`` -> (sure, possible ⊇ sure), 0-based; DataError naming the bad item."""
    sure: Links = set()
    possible: Links = set()
    for item in line.split():
        sep = next((s for s in ("-", "?", "p") if s in item), "")
        left, _, right = item.partition(sep) if sep else (item, "", "")
        if not sep or not left.isdigit() or not right.isdigit():
            raise DataError(
                f"{where}: not an alignment link (expected i-j sure or i?j possible, from 0): {item!r}"
            )
        (sure if sep == "-" else possible).add((int(left), int(right)))
    return sure, possible | sure


def uploaded(
    sources: Sequence[str], references: Sequence[str] | None, alignments: Sequence[str] | None
) -> TestSet:
    """An upload as a test set; ValueError naming the problem when the parts do not match."""
    sources = [s.strip() for s in sources]
    if not sources:
        raise ValueError("the test set has no sentences")
    if references is not None and len(references) != len(sources):
        raise ValueError(f"{len(sources)} sources but {len(references)} references")
    if alignments is None:
        return TestSet(
            "upload", sources, None if references is None else [r.strip() for r in references]
        )
    if references is None:
        raise ValueError("alignments need references: the links point at reference words")
    if len(alignments) != len(sources):
        raise ValueError(f"{len(sources)} sources but {len(alignments)} alignment lines")
    refs = [r.strip() for r in references]
    gold = []
    for number, (src, ref, line) in enumerate(zip(sources, refs, alignments, strict=True), start=1):
        where = f"alignment line {number}"
        try:
            sure, possible = parse_links(line, where)
        except DataError as err:
            raise ValueError(str(err)) from err
        s_words, t_words = src.split(), ref.split()
        bad = next(
            ((i, j) for i, j in sorted(possible) if i >= len(s_words) or j >= len(t_words)), None
        )
        if bad is not None:
            raise ValueError(
                f"{where}: link {bad[0]}-{bad[1]} points past the {len(s_words)} source or {len(t_words)} "
                "reference words (links count whitespace words from 0)"
            )
        gold.append(GoldPair(src, ref, locate(src, s_words), locate(ref, t_words), sure, possible))
    return TestSet("upload", sources, refs, gold)


def gold_folder(gold_dir: Path | None, data_dir: Path) -> Path:
    """The RWTH folder: the setting, else ``<data_dir>/../rwth-de-en``."""
    return gold_dir if gold_dir is not None else data_dir.parent / GOLD_SET


def rwth(folder: Path, source_lang: str, target_lang: str) -> TestSet:
    """The RWTH gold set read for a ``source_lang``→``target_lang`` model (DataError if the folder
    is missing or the model's pair is not German–English in either direction)."""
    if not folder.is_dir():
        raise DataError(
            f"the {GOLD_SET} gold set is not at {folder} (set ATTNSCOPE_GOLD_DIR; docs/testsets.md)"
        )
    pairs = read_gold(folder, source_lang, target_lang)
    return TestSet(GOLD_SET, [p.source for p in pairs], [p.target for p in pairs], pairs)


def split(data_dir: Path, name: str, source_lang: str, target_lang: str) -> TestSet:
    """A shipped Multi30k split (DataError naming an unknown split or missing files)."""
    from attnscope.text.corpus import SPLITS, load_parallel

    if name not in SPLITS:  # before looking for the data folder: the name is the mistake
        raise DataError(f"unknown split {name!r}; choose one of {', '.join([*SPLITS, GOLD_SET])}")
    pairs = load_parallel(data_dir, name, source_lang, target_lang)
    return TestSet(name, [s for s, _ in pairs], [t for _, t in pairs])
