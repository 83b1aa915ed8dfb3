"""Multi30k task 1 on disk: its splits and languages, and reading a split as parallel pairs.

Files are ``<split>.<lang>.gz`` (or uncompressed ``<split>.<lang>``), one caption per line, line i
of each language the same caption, as in the dataset's public repository. Training, evaluation,
alignment and analysis all read the corpus through this module (downloading it is
``attnscope.training.data.download``); it imports nothing of the app, so every layer may use it.
"""

from __future__ import annotations

import gzip
from pathlib import Path

# Our split names -> the dataset's file stems.
SPLITS: dict[str, str] = {
    "train": "train",
    "val": "val",
    "test2016": "test_2016_flickr",
    "test2017": "test_2017_flickr",
    "mscoco2017": "test_2017_mscoco",
}
TEST_SPLITS = ("test2016", "test2017", "mscoco2017")
LANGUAGES = ("en", "de", "fr")


class DataError(ValueError):
    """The corpus is missing or malformed; the message names the file and the problem."""


def split_path(data_dir: Path, split: str, lang: str) -> Path:
    if split not in SPLITS:
        raise DataError(f"unknown split {split!r}; choose one of {', '.join(SPLITS)}")
    stem = f"{SPLITS[split]}.{lang}"
    for candidate in (data_dir / f"{stem}.gz", data_dir / stem):
        if candidate.is_file():
            return candidate
    raise DataError(
        f"missing {data_dir / (stem + '.gz')}: point --data-dir (or ATTNSCOPE_DATA_DIR) at the "
        "Multi30k task 1 raw files, or fetch them with `attnscope download`"
    )


def read_lines(path: Path) -> list[str]:
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt", encoding="utf-8") as f:
            lines = f.read().split("\n")
    except (OSError, UnicodeDecodeError, EOFError) as err:
        raise DataError(f"cannot read {path}: {err}") from err
    if lines and lines[-1] == "":
        lines.pop()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            raise DataError(f"{path}: line {number} is empty")
    return [line.strip() for line in lines]


def load_parallel(data_dir: str | Path, split: str, src: str, tgt: str) -> list[tuple[str, str]]:
    """The ``split`` of the ``src``-``tgt`` pair as (source, target) caption pairs."""
    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        raise DataError(
            f"data folder {data_dir} does not exist: pass --data-dir, set ATTNSCOPE_DATA_DIR, "
            "or run `attnscope download`"
        )
    src_path, tgt_path = split_path(data_dir, split, src), split_path(data_dir, split, tgt)
    sources, targets = read_lines(src_path), read_lines(tgt_path)
    if len(sources) != len(targets):
        raise DataError(f"{src_path} has {len(sources)} lines but {tgt_path} has {len(targets)}")
    if not sources:
        raise DataError(f"{src_path} is empty")
    return list(zip(sources, targets, strict=True))
