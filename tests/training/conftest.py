"""Fixtures for the training tests: a tiny Multi30k-shaped corpus written as gz files, and a
writer for corpora with a chosen defect."""

from __future__ import annotations

import gzip
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
import torch

from attnscope.testing import TINY_PAIRS
from attnscope.training.data import SPLITS

Pairs = Sequence[tuple[str, str]]
CorpusWriter = Callable[..., Path]

# Tiny models gain nothing from intra-op threads; on a busy two-core machine they only slow down.
torch.set_num_threads(1)

# Test captions of 22, 12 and 3 words, so that several BLEU-by-length buckets are filled.
LONG_PAIRS: list[tuple[str, str]] = [
    (
        "A man in a blue shirt and a woman in a red dress are walking their dog along the beach at sunset.",
        "Ein Mann in einem blauen Hemd und eine Frau in einem roten Kleid gehen bei Sonnenuntergang mit ihrem Hund am Strand.",
    ),
    (
        "Two children are playing football in the park near a big tree.",
        "Zwei Kinder spielen Fußball im Park neben einem großen Baum.",
    ),
    ("A dog runs.", "Ein Hund rennt."),
]


def write_lines(path: Path, lines: Sequence[str]) -> None:
    """One caption per line, gzip-compressed when ``path`` ends in ``.gz``."""
    text = "".join(line + "\n" for line in lines)
    if path.suffix == ".gz":
        with gzip.open(path, "wt", encoding="utf-8") as f:
            f.write(text)
    else:
        path.write_text(text, encoding="utf-8")


def write_corpus(
    folder: Path, splits: dict[str, Pairs], langs: tuple[str, str] = ("en", "de")
) -> Path:
    """``<stem>.<lang>.gz`` for each of our split names in ``splits``, as the dataset names them."""
    folder.mkdir(parents=True, exist_ok=True)
    for split, pairs in splits.items():
        for side, lang in enumerate(langs):
            write_lines(folder / f"{SPLITS[split]}.{lang}.gz", [pair[side] for pair in pairs])
    return folder


@pytest.fixture
def corpus_writer() -> CorpusWriter:
    return write_corpus


@pytest.fixture(scope="session")
def tiny_corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every split of en-de: 10 training pairs, 4 validation pairs, 3-6 pairs per test split."""
    return write_corpus(
        tmp_path_factory.mktemp("multi30k"),
        {
            "train": TINY_PAIRS,
            "val": TINY_PAIRS[:4],
            "test2016": TINY_PAIRS[4:7] + LONG_PAIRS,
            "test2017": TINY_PAIRS[7:],
            "mscoco2017": LONG_PAIRS,
        },
    )
