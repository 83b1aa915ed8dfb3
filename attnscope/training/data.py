"""Multi30k for training: downloading it, encoding pairs, batching by tokens.

Reading the corpus (splits, languages, ``load_parallel``, ``DataError``) lives in
:mod:`attnscope.text.corpus`, below alignment and training both; its names are re-exported here.
"""

from __future__ import annotations

import http.client
import logging
import random
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from attnscope.nn.config import BOS_ID, EOS_ID, PAD_ID
from attnscope.text.corpus import (  # re-exported: the corpus reader used to live here
    LANGUAGES,
    SPLITS,
    TEST_SPLITS,
    DataError,
    load_parallel,
    read_lines,
    split_path,
)

logger = logging.getLogger(__name__)

DOWNLOAD_URL = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/{file}"
__all__ = [
    "DOWNLOAD_URL", "LANGUAGES", "SPLITS", "TEST_SPLITS", "DataError", "Example", "collate", "download",
    "encode_pairs", "iterate", "load_parallel", "read_lines", "split_path", "token_batches",
]


def download(data_dir: str | Path, langs: Sequence[str] = LANGUAGES, timeout: float = 60.0) -> Path:
    """Fetch every split in ``langs`` from the dataset's public repository into ``data_dir``.
    Existing files are kept; a file is written under a temporary name and renamed when complete."""
    data_dir = Path(data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    for stem in SPLITS.values():
        for lang in langs:
            name = f"{stem}.{lang}.gz"
            target = data_dir / name
            if target.is_file():
                continue
            url = DOWNLOAD_URL.format(file=name)
            logger.info("downloading %s", url)
            partial = target.with_suffix(".gz.part")
            try:
                with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310
                    partial.write_bytes(response.read())
            except (OSError, http.client.HTTPException) as err:  # HTTPException: a truncated reply
                partial.unlink(missing_ok=True)
                raise DataError(f"could not download {url}: {err}") from err
            partial.rename(target)
    return data_dir


@dataclass
class Example:
    src: list[int]  # ends with EOS
    tgt: list[int]  # ends with EOS


def encode_pairs(
    pairs: Sequence[tuple[str, str]], encode: Callable[[str], list[int]], max_tokens: int = 200
) -> list[Example]:
    """Tokenise pairs, append EOS, and drop pairs longer than ``max_tokens`` on either side."""
    out = []
    for src, tgt in pairs:
        s, t = encode(src), encode(tgt)
        if 0 < len(s) <= max_tokens and 0 < len(t) <= max_tokens:
            out.append(Example(s + [EOS_ID], t + [EOS_ID]))
    return out


def token_batches(
    examples: Sequence[Example], max_tokens: int, *, shuffle: bool, seed: int = 0
) -> list[list[int]]:
    """Indices of ``examples`` grouped into batches of at most ``max_tokens`` padded tokens
    (counting the longer side), sorted by length so padding stays small."""
    order = sorted(range(len(examples)), key=lambda i: (len(examples[i].src), len(examples[i].tgt)))
    batches: list[list[int]] = []
    current: list[int] = []
    longest = 0
    for i in order:
        length = max(len(examples[i].src), len(examples[i].tgt) + 1)
        if current and max(longest, length) * (len(current) + 1) > max_tokens:
            batches.append(current)
            current, longest = [], 0
        current.append(i)
        longest = max(longest, length)
    if current:
        batches.append(current)
    if shuffle:
        random.Random(seed).shuffle(batches)
    return batches


def collate(examples: Sequence[Example], device: torch.device | str = "cpu") -> tuple[Tensor, Tensor, Tensor]:
    """-> src (B, S), decoder input BOS+tgt[:-1] (B, T), gold tgt (B, T); all padded with PAD."""
    s_len = max(len(e.src) for e in examples)
    t_len = max(len(e.tgt) for e in examples)
    src = torch.full((len(examples), s_len), PAD_ID, dtype=torch.long)
    tgt_in = torch.full((len(examples), t_len), PAD_ID, dtype=torch.long)
    gold = torch.full((len(examples), t_len), PAD_ID, dtype=torch.long)
    for i, e in enumerate(examples):
        src[i, : len(e.src)] = torch.tensor(e.src)
        gold[i, : len(e.tgt)] = torch.tensor(e.tgt)
        tgt_in[i, : len(e.tgt)] = torch.tensor([BOS_ID] + e.tgt[:-1])
    return src.to(device), tgt_in.to(device), gold.to(device)


def iterate(examples: Sequence[Example], batches: list[list[int]], device: torch.device | str) -> Iterator[tuple[Tensor, Tensor, Tensor]]:
    for batch in batches:
        yield collate([examples[i] for i in batch], device)
