"""Reading Multi30k: parallel splits from gz or plain files, a clear DataError naming the file and
the problem for every kind of bad data; token batches and their padded tensors."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from attnscope.nn.config import BOS_ID, EOS_ID, PAD_ID
from attnscope.testing import TINY_PAIRS
from attnscope.training.data import (
    DataError,
    Example,
    collate,
    encode_pairs,
    load_parallel,
    token_batches,
)

PAIRS = TINY_PAIRS[:3]
CorpusWriter = Callable[..., Path]  # the conftest fixture


def test_reads_a_split_in_the_asked_direction(tmp_path: Path, corpus_writer: CorpusWriter) -> None:
    corpus_writer(tmp_path, {"train": PAIRS, "test2017": PAIRS[:1]}, langs=("en", "fr"))
    assert load_parallel(tmp_path, "train", "en", "fr") == PAIRS
    assert load_parallel(tmp_path, "train", "fr", "en") == [(t, s) for s, t in PAIRS]
    assert load_parallel(str(tmp_path), "test2017", "en", "fr") == PAIRS[:1]


def test_reads_uncompressed_files_and_strips_line_ends(tmp_path: Path) -> None:
    (tmp_path / "val.en").write_text(" A dog runs. \r\nTwo cats.\n", encoding="utf-8")
    (tmp_path / "val.de").write_text(
        "Ein Hund rennt.\r\nZwei Katzen.", encoding="utf-8"
    )  # no final newline
    assert load_parallel(tmp_path, "val", "en", "de") == [
        ("A dog runs.", "Ein Hund rennt."),
        ("Two cats.", "Zwei Katzen."),
    ]


def test_a_data_error_is_a_value_error() -> None:
    assert issubclass(DataError, ValueError)  # the CLI reports ValueErrors as clean errors


def test_missing_folder_names_the_folder(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    with pytest.raises(DataError, match="does not exist") as err:
        load_parallel(missing, "train", "en", "de")
    assert str(missing) in str(err.value)


def test_missing_file_names_the_path(tmp_path: Path, corpus_writer: CorpusWriter) -> None:
    corpus_writer(tmp_path, {"train": PAIRS})
    (tmp_path / "train.de.gz").unlink()
    with pytest.raises(DataError, match="missing") as err:
        load_parallel(tmp_path, "train", "en", "de")
    assert str(tmp_path / "train.de.gz") in str(err.value)
    assert "attnscope download" in str(err.value)


def test_mismatched_line_counts_name_both_files_and_counts(
    tmp_path: Path, corpus_writer: CorpusWriter
) -> None:
    corpus_writer(tmp_path, {"val": PAIRS})
    corpus_writer(tmp_path / "short", {"val": PAIRS[:2]})
    (tmp_path / "short" / "val.de.gz").replace(tmp_path / "val.de.gz")
    with pytest.raises(DataError) as err:
        load_parallel(tmp_path, "val", "en", "de")
    message = str(err.value)
    assert f"{tmp_path / 'val.en.gz'} has 3 lines" in message
    assert f"{tmp_path / 'val.de.gz'} has 2" in message


@pytest.mark.parametrize("blank", ["", "   "])
def test_an_empty_line_names_the_file_and_line_number(
    tmp_path: Path, corpus_writer: CorpusWriter, blank: str
) -> None:
    pairs = [PAIRS[0], (PAIRS[1][0], blank), PAIRS[2]]
    corpus_writer(tmp_path, {"train": pairs})
    with pytest.raises(DataError) as err:
        load_parallel(tmp_path, "train", "en", "de")
    assert str(err.value) == f"{tmp_path / 'train.de.gz'}: line 2 is empty"


def test_an_empty_file_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "val.en").write_text("")
    (tmp_path / "val.de").write_text("")
    with pytest.raises(DataError, match="is empty"):
        load_parallel(tmp_path, "val", "en", "de")


def test_a_corrupt_gz_file_is_an_error_naming_it(
    tmp_path: Path, corpus_writer: CorpusWriter
) -> None:
    corpus_writer(tmp_path, {"train": PAIRS})
    (tmp_path / "train.en.gz").write_bytes(b"this is not gzip")
    with pytest.raises(DataError, match="cannot read") as err:
        load_parallel(tmp_path, "train", "en", "de")
    assert str(tmp_path / "train.en.gz") in str(err.value)


def test_an_unknown_split_lists_the_known_ones(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="unknown split 'dev'") as err:
        load_parallel(tmp_path, "dev", "en", "de")
    for split in ("train", "val", "test2016", "test2017", "mscoco2017"):
        assert split in str(err.value)


def test_encode_pairs_appends_eos_and_drops_empty_or_long_pairs() -> None:
    def encode(text: str) -> list[int]:
        return [10 + len(w) for w in text.split()]

    pairs = [("a bb", "ccc"), ("", "x"), ("a b c d", "a"), ("a", "b c d e f")]
    examples = encode_pairs(pairs, encode, max_tokens=4)
    assert examples == [
        Example([11, 12, EOS_ID], [13, EOS_ID]),
        Example([11, 11, 11, 11, EOS_ID], [11, EOS_ID]),
    ]


def random_examples(n: int, seed: int = 0) -> list[Example]:
    rng = random.Random(seed)
    return [
        Example([5] * rng.randint(1, 30) + [EOS_ID], [6] * rng.randint(1, 30) + [EOS_ID])
        for _ in range(n)
    ]


@pytest.mark.parametrize("max_tokens", [32, 100, 512])
@pytest.mark.parametrize("shuffle", [False, True])
def test_token_batches_hold_every_example_once_within_the_token_budget(
    max_tokens: int, shuffle: bool
) -> None:
    examples = random_examples(300)
    batches = token_batches(examples, max_tokens, shuffle=shuffle, seed=3)
    assert sorted(i for batch in batches for i in batch) == list(range(len(examples)))
    for batch in batches:
        # The function's own measure: the longer side, the target counted with its BOS shift.
        longest = max(max(len(examples[i].src), len(examples[i].tgt) + 1) for i in batch)
        assert longest * len(batch) <= max_tokens
        # What that bounds: the padded tensors the model sees.
        src, tgt_in, gold = collate([examples[i] for i in batch])
        assert (
            src.numel() <= max_tokens
            and tgt_in.numel() <= max_tokens
            and gold.numel() <= max_tokens
        )


def test_token_batches_fill_up_and_group_similar_lengths() -> None:
    examples = random_examples(300)
    batches = token_batches(examples, 512, shuffle=False)
    lengths = [(len(examples[i].src), len(examples[i].tgt)) for batch in batches for i in batch]
    assert lengths == sorted(lengths)
    assert len(batches) < len(examples) / 5  # not one example a batch


def test_an_example_longer_than_the_budget_gets_a_batch_of_its_own() -> None:
    examples = random_examples(20) + [Example([5] * 99 + [EOS_ID], [EOS_ID])]
    batches = token_batches(examples, 64, shuffle=True)
    assert [20] in batches
    assert sorted(i for batch in batches for i in batch) == list(range(21))


def test_token_batches_are_deterministic_for_a_seed() -> None:
    examples = random_examples(300)
    first = token_batches(examples, 100, shuffle=True, seed=7)
    assert token_batches(examples, 100, shuffle=True, seed=7) == first
    other = token_batches(examples, 100, shuffle=True, seed=8)
    assert other != first  # a different order of the same batches
    assert sorted(first) == sorted(other) == sorted(token_batches(examples, 100, shuffle=False))


def test_collate_pads_and_shifts_the_target_by_bos() -> None:
    examples = [Example([7, 8, EOS_ID], [9, EOS_ID]), Example([7, EOS_ID], [9, 10, 11, EOS_ID])]
    src, tgt_in, gold = collate(examples)
    assert src.tolist() == [[7, 8, EOS_ID], [7, EOS_ID, PAD_ID]]
    assert gold.tolist() == [[9, EOS_ID, PAD_ID, PAD_ID], [9, 10, 11, EOS_ID]]
    assert tgt_in.tolist() == [[BOS_ID, 9, PAD_ID, PAD_ID], [BOS_ID, 9, 10, 11]]
    assert src.dtype == tgt_in.dtype == gold.dtype == torch.long
