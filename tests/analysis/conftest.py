"""A small corpus for analysis runs: the tiny pairs, their sentences joined two by two, and
diagonal Pharaoh links over Moses words for each."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from attnscope.alignment.links import diagonal_links, format_pharaoh
from attnscope.alignment.words import moses_words
from attnscope.testing import TINY_PAIRS


def corpus_pairs(n: int) -> list[tuple[str, str]]:
    """``n`` distinct sentence pairs built from the tiny pairs (singles, then ordered couples,
    then triples)."""
    pairs = list(TINY_PAIRS)
    for a in TINY_PAIRS:
        for b in TINY_PAIRS:
            if a != b:
                pairs.append((f"{a[0]} {b[0]}", f"{a[1]} {b[1]}"))
    for c in TINY_PAIRS[:3]:
        pairs.extend((f"{a} {c[0]}", f"{b} {c[1]}") for a, b in pairs[10:100])
    if n > len(pairs):
        raise ValueError(f"at most {len(pairs)} pairs")
    return pairs[:n]


def write_corpus(folder: Path, n: int) -> dict[str, Path]:
    """source (gzipped), reference and links files of ``n`` pairs."""
    folder.mkdir(parents=True, exist_ok=True)
    pairs = corpus_pairs(n)
    paths = {"corpus": folder / "src.en.gz", "references": folder / "ref.de", "alignments": folder / "links.txt"}
    with gzip.open(paths["corpus"], "wt", encoding="utf-8") as f:
        f.writelines(s + "\n" for s, _ in pairs)
    paths["references"].write_text("".join(t + "\n" for _, t in pairs), encoding="utf-8")
    links = [diagonal_links(len(moses_words(s, "en")), len(moses_words(t, "de"))) for s, t in pairs]
    paths["alignments"].write_text("".join(format_pharaoh(x) + "\n" for x in links), encoding="utf-8")
    return paths


@pytest.fixture(scope="session")
def analysis_corpus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """40 sentence pairs with references and links."""
    return write_corpus(tmp_path_factory.mktemp("analysis-corpus"), 40)
