"""Alignment links as sets of ``(source_word, target_word)`` pairs: Pharaoh text, the
grow-diag-final-and symmetrisation (Koehn et al. 2003/2005) and the scores of an alignment against
a reference (precision, recall, F1, AER).

Pharaoh format is ``"i-j i-j ..."`` with ``i`` the 0-based source word and ``j`` the 0-based
target word, the convention of Moses, fast_align and eflomal.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

Links = set[tuple[int, int]]

# The eight neighbours of a point, sides first (the order of Koehn's pseudo-code).
NEIGHBOURS: tuple[tuple[int, int], ...] = ((-1, 0), (0, -1), (1, 0), (0, 1), (-1, -1), (-1, 1), (1, -1), (1, 1))


def parse_pharaoh(text: str) -> Links:
    """``"0-0 1-2"`` -> ``{(0, 0), (1, 2)}``; ValueError naming the bad item."""
    links: Links = set()
    for item in text.split():
        left, sep, right = item.partition("-")
        if not sep or not left.isdigit() or not right.isdigit():
            raise ValueError(f"not a Pharaoh link (expected i-j with 0-based word indices): {item!r}")
        links.add((int(left), int(right)))
    return links


def format_pharaoh(links: Iterable[tuple[int, int]]) -> str:
    """Links -> ``"i-j ..."`` sorted by target word, then source word."""
    return " ".join(f"{i}-{j}" for i, j in sorted(set(links), key=lambda p: (p[1], p[0])))


def grow_diag_final_and(forward: Links, reverse: Links) -> Links:
    """Symmetrise two directional alignments (both given as (source, target) pairs).

    Start from the intersection; repeatedly add a union point that neighbours (including
    diagonally) an alignment point, when its source word or its target word is still unaligned;
    then, for ``forward`` and after it ``reverse``, add each of its points whose source word and
    target word are both still unaligned ("final-and")."""
    union = forward | reverse
    alignment = forward & reverse
    src_aligned = {i for i, _ in alignment}
    tgt_aligned = {j for _, j in alignment}

    def add(point: tuple[int, int]) -> None:
        alignment.add(point)
        src_aligned.add(point[0])
        tgt_aligned.add(point[1])

    added = True
    while added:
        added = False
        for i, j in sorted(alignment):
            for di, dj in NEIGHBOURS:
                point = (i + di, j + dj)
                if point in union and point not in alignment and (
                    point[0] not in src_aligned or point[1] not in tgt_aligned
                ):
                    add(point)
                    added = True
    for direction in (forward, reverse):
        for i, j in sorted(direction):
            if i not in src_aligned and j not in tgt_aligned:
                add((i, j))
    return alignment


@dataclass
class AlignmentCounts:
    """Corpus-level counts: hypothesis links, reference links and links in both.

    With one kind of reference link (every link "sure", as from an automatic aligner)
    AER = 1 - 2|A∩S| / (|A| + |S|) = 1 - F1 (Och & Ney 2003 with P = S)."""

    hypothesis: int = 0
    reference: int = 0
    correct: int = 0

    def add(self, hypothesis: Links, reference: Links) -> None:
        self.hypothesis += len(hypothesis)
        self.reference += len(reference)
        self.correct += len(hypothesis & reference)

    def scores(self) -> dict[str, float]:
        """precision, recall, f1, aer (rounded to 4 places)."""
        p = self.correct / self.hypothesis if self.hypothesis else 0.0
        r = self.correct / self.reference if self.reference else 0.0
        f1 = 2 * p * r / (p + r) if p + r else 0.0
        total = self.hypothesis + self.reference
        aer = 1.0 - 2 * self.correct / total if total else 1.0
        return {"precision": round(p, 4), "recall": round(r, 4), "f1": round(f1, 4), "aer": round(aer, 4)}


def diagonal_links(source_words: int, target_words: int) -> Links:
    """The baseline aligner: target word ``j`` -> source word ``round(j * (m-1) / (n-1))``
    (first to first, last to last, evenly in between; a one-word target goes to word 0)."""
    m, n = source_words, target_words
    if m == 0:
        return set()
    if n == 1:
        return {(0, 0)}
    return {(int(j * (m - 1) / (n - 1) + 0.5), j) for j in range(n)}
