"""Human gold word alignments with *sure* and *possible* links, and the scores the field reports on
them (Och & Ney 2003): with S the sure links, P ⊇ S the possible links and A the predicted links,

    precision = |A∩P| / |A|,   recall = |A∩S| / |S|,   AER = 1 − (|A∩S| + |A∩P|) / (|A| + |S|).

The reader takes the RWTH German–English set (Vilar et al. 2006; 508 Europarl sentence pairs) as
redistributed with tokenised text (``test.uc.de``, ``test.uc.en``, ``alignment.talp``): a link
``i-j`` is sure, ``ipj`` possible, ``i`` the German and ``j`` the English token, both from 1. Pairs
are read in the model's direction: for an en→de model the sentences swap and every link is
transposed, so links are always ``(source word, target word)``, 0-based. The model reads the
tokenised sentence joined by spaces, and its words are exactly those tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from attnscope.alignment.links import Links
from attnscope.alignment.words import Span, locate
from attnscope.text.corpus import DataError

GOLD_SETS = {"rwth-de-en": ("de", "en")}
"""Named gold sets -> (language of the first index, language of the second)."""

PUBLISHED_DE_EN = [
    {"system": "fast_align", "aer": 0.270, "source": "Dyer et al. 2013; published figure"},
    {"system": "eflomal", "aer": 0.226, "source": "Östling & Tiedemann 2016; published figure"},
    {"system": "GIZA++ (Mgiza)", "aer": 0.206, "source": "Och & Ney 2003; published figure"},
    {"system": "SimAlign argmax, XLM-R", "aer": 0.19, "source": "Jalili Sabet et al. 2020; published, about 19"},
    {"system": "awesome-align, multilingually fine-tuned", "aer": 0.151, "source": "Dou & Neubig 2021; its README"},
    {"system": "Mask-Align", "aer": 0.144, "source": "Chen et al. 2021; its README"},
]
"""Published German–English AER on the RWTH set: cited numbers, not runs of ours. Those systems were
trained on Europarl-scale text."""


@dataclass
class GoldPair:
    """One gold pair in the model's direction: the texts it reads, the spans of their words and
    the sure and possible links ``(source word, target word)`` (``sure ⊆ possible``)."""

    source: str
    target: str
    source_words: list[Span]
    target_words: list[Span]
    sure: Links
    possible: Links = field(default_factory=set)


def parse_talp(line: str, where: str = "") -> tuple[Links, Links]:
    """``"1-1 2p3"`` -> (sure, possible) as 0-based ``(first, second)`` pairs, every sure link also
    in possible; DataError naming the bad item."""
    sure: Links = set()
    possible: Links = set()
    for item in line.split():
        sep = "-" if "-" in item else "p"
        left, found, right = item.partition(sep)
        if not found or not left.isdigit() or not right.isdigit() or int(left) < 1 or int(right) < 1:
            raise DataError(f"{where}: not a gold link (expected i-j or ipj, counted from 1): {item!r}")
        link = (int(left) - 1, int(right) - 1)
        (sure if sep == "-" else possible).add(link)
    return sure, possible | sure


def _lines(path: Path) -> list[str]:
    if not path.is_file():
        raise DataError(f"missing gold alignment file {path}")
    return path.read_text(encoding="utf-8").rstrip("\n").split("\n")


def resolve_gold(name_or_path: str, data_root: str | Path | None = None) -> Path:
    """A named gold set (``rwth-de-en``, looked up under ``data_root``) or a folder path."""
    path = Path(name_or_path)
    if path.is_dir():
        return path
    if name_or_path in GOLD_SETS and data_root is not None and (Path(data_root) / name_or_path).is_dir():
        return Path(data_root) / name_or_path
    raise DataError(
        f"gold alignments {name_or_path!r}: not a folder"
        + (f" and not under {data_root}" if data_root is not None else "")
        + " (expected test.uc.de, test.uc.en and alignment.talp)"
    )


def read_gold(folder: str | Path, source_lang: str, target_lang: str, *, cased: bool = True) -> list[GoldPair]:
    """The RWTH-style gold set in ``folder`` read for a ``source_lang``→``target_lang`` model
    (either direction of the set's pair); DataError if the files disagree or the pair differs."""
    folder = Path(folder)
    first, second = GOLD_SETS["rwth-de-en"]
    if {source_lang, target_lang} != {first, second}:
        raise DataError(f"the gold set in {folder} is {first}-{second}; the model is {source_lang}-{target_lang}")
    infix = "uc." if cased else ""
    a_lines = _lines(folder / f"test.{infix}{first}")
    b_lines = _lines(folder / f"test.{infix}{second}")
    links = _lines(folder / "alignment.talp")
    if not len(a_lines) == len(b_lines) == len(links):
        raise DataError(f"{folder}: {len(a_lines)} {first}, {len(b_lines)} {second} and {len(links)} alignment lines")
    swap = source_lang != first
    out = []
    for number, (a, b, line) in enumerate(zip(a_lines, b_lines, links, strict=True), start=1):
        a_tokens, b_tokens = a.split(), b.split()
        sure, possible = parse_talp(line, f"{folder / 'alignment.talp'}:{number}")
        if any(i >= len(a_tokens) or j >= len(b_tokens) for i, j in possible):
            raise DataError(f"{folder / 'alignment.talp'}:{number}: a link points past the sentence")
        if swap:
            a_tokens, b_tokens = b_tokens, a_tokens
            sure, possible = {(j, i) for i, j in sure}, {(j, i) for i, j in possible}
        src, tgt = " ".join(a_tokens), " ".join(b_tokens)
        out.append(GoldPair(src, tgt, locate(src, a_tokens), locate(tgt, b_tokens), sure, possible))
    return out


@dataclass
class GoldCounts:
    """Corpus-level counts for the sure/possible scores."""

    hypothesis: int = 0
    sure: int = 0
    hit_sure: int = 0
    hit_possible: int = 0

    def add(self, hypothesis: Links, sure: Links, possible: Links) -> None:
        """``possible`` should contain ``sure``; it is widened to do so if not."""
        possible = possible | sure
        self.hypothesis += len(hypothesis)
        self.sure += len(sure)
        self.hit_sure += len(hypothesis & sure)
        self.hit_possible += len(hypothesis & possible)

    def scores(self) -> dict[str, float]:
        """precision, recall and AER, rounded to 4 places (precision 0 with no predictions; AER
        1 when there is nothing to count)."""
        p = self.hit_possible / self.hypothesis if self.hypothesis else 0.0
        r = self.hit_sure / self.sure if self.sure else 0.0
        total = self.hypothesis + self.sure
        aer = 1.0 - (self.hit_sure + self.hit_possible) / total if total else 1.0
        return {"precision": round(p, 4), "recall": round(r, 4), "aer": round(aer, 4)}


def score_links(hypotheses: Sequence[Links], gold: Sequence[GoldPair]) -> dict[str, float]:
    """Corpus precision/recall/AER of one link set per gold pair."""
    counts = GoldCounts()
    for links, pair in zip(hypotheses, gold, strict=True):
        counts.add(links, pair.sure, pair.possible)
    return counts.scores()
