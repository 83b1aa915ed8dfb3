"""Fixtures for the alignment tests: the tiny corpus with diagonal reference alignments."""

from __future__ import annotations

import gzip
from collections.abc import Sequence
from pathlib import Path

import pytest
import torch

from attnscope.alignment.corpus import AlignedPair, references_path, write_references
from attnscope.alignment.links import diagonal_links
from attnscope.alignment.words import word_spans
from attnscope.testing import TINY_PAIRS
from attnscope.training.data import SPLITS

torch.set_num_threads(1)

TINY_SPLITS: dict[str, list[tuple[str, str]]] = {
    "train": TINY_PAIRS,
    "val": TINY_PAIRS[:4],
    "test2016": TINY_PAIRS[4:],
    "test2017": TINY_PAIRS[:3],
    "mscoco2017": TINY_PAIRS[3:6],
}


def diagonal_references(pairs: Sequence[tuple[str, str]], langs: tuple[str, str] = ("en", "de")) -> list[AlignedPair]:
    """Monotone references: each target word linked to the diagonal source word."""
    rows = []
    for src, tgt in pairs:
        s, t = word_spans(src, langs[0]), word_spans(tgt, langs[1])
        rows.append(AlignedPair(diagonal_links(len(s), len(t)), s, t))
    return rows


@pytest.fixture(scope="session")
def aligned_corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every split of the tiny en-de corpus, and ``alignments/`` with diagonal references."""
    folder = tmp_path_factory.mktemp("multi30k-aligned")
    for split, pairs in TINY_SPLITS.items():
        for side, lang in enumerate(("en", "de")):
            with gzip.open(folder / f"{SPLITS[split]}.{lang}.gz", "wt", encoding="utf-8") as f:
                f.write("".join(p[side] + "\n" for p in pairs))
        write_references(references_path(folder / "alignments", split, "en", "de"), diagonal_references(pairs))
    return folder
