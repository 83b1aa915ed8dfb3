"""Fashion-MNIST (IDX files) and the 60×60 translated / cluttered canvases of the RAM paper.

The IDX files come from Debian's ``dataset-fashion-mnist`` (``/usr/share/datasets/fashion-mnist``);
another folder is chosen with ``--data-dir`` or ``ATTNSCOPE_FASHION_MNIST_DIR``. Files may be gzipped
or not. Canvases are built with tensor indexing on whatever device the items live on, so training
on a GPU never waits for the CPU to draw images."""

from __future__ import annotations

import gzip
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import torch
from torch import Tensor

from attnscope import config

DEFAULT_DIR = config.DEBIAN_FASHION_MNIST
ENV_VAR = "ATTNSCOPE_FASHION_MNIST_DIR"  # Settings.fashion_mnist_dir, named in messages
CLASSES: tuple[str, ...] = (
    "t-shirt", "trouser", "pullover", "dress", "coat",
    "sandal", "shirt", "sneaker", "bag", "ankle boot",
)  # fmt: skip
ITEM = 28  # side of a Fashion-MNIST item, pixels
Split = Literal["train", "test"]
_PREFIX: dict[str, str] = {"train": "train", "test": "t10k"}
_INSTALL_HINT = (
    "install Debian's package (apt-get install dataset-fashion-mnist), or point --data-dir / "
    f"{ENV_VAR} at a folder holding the four IDX files"
)


class DataMissing(FileNotFoundError):
    """The Fashion-MNIST files are not where they were looked for (the message says how to fix)."""


def data_dir(path: str | Path | None = None) -> Path:
    """``path``, else ``$ATTNSCOPE_FASHION_MNIST_DIR``, else the Debian package's folder
    (``Settings.fashion_mnist_dir``, read afresh)."""
    return Path(path) if path else Path(config.current("fashion_mnist_dir"))


def read_idx(path: str | Path) -> np.ndarray:
    """An IDX file (unsigned bytes, any number of dimensions; ``.gz`` or plain) as a uint8 array."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        raw = f.read()
    if len(raw) < 4:
        raise ValueError(f"{path}: not an IDX file (only {len(raw)} bytes)")
    zero, dtype_code, ndim = struct.unpack(">HBB", raw[:4])
    if zero != 0 or dtype_code != 0x08:
        raise ValueError(f"{path}: not an unsigned-byte IDX file (magic {raw[:4].hex()})")
    header = 4 + 4 * ndim
    shape = struct.unpack(f">{ndim}I", raw[4:header])
    count = int(np.prod(shape)) if shape else 0
    if len(raw) - header != count:
        raise ValueError(f"{path}: expected {count} bytes of data for shape {shape}, found {len(raw) - header}")
    return np.frombuffer(raw, dtype=np.uint8, offset=header).reshape(shape)


def write_idx(path: str | Path, array: np.ndarray) -> None:
    """Write a uint8 array as an IDX file (gzipped when the name ends in ``.gz``); for tests."""
    path = Path(path)
    data = np.ascontiguousarray(array, dtype=np.uint8)
    header = struct.pack(">HBB", 0, 0x08, data.ndim) + struct.pack(f">{data.ndim}I", *data.shape)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "wb") as f:
        f.write(header + data.tobytes())


def _find(folder: Path, stem: str) -> Path:
    for name in (stem, f"{stem}.gz"):
        if (folder / name).is_file():
            return folder / name
    raise DataMissing(f"Fashion-MNIST file {stem}[.gz] not found in {folder}: {_INSTALL_HINT}")


@dataclass(frozen=True)
class Items:
    """One split of Fashion-MNIST: ``images`` (N, 28, 28) uint8, ``labels`` (N,) int64."""

    images: Tensor
    labels: Tensor

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    def to(self, device: torch.device | str) -> Items:
        return Items(self.images.to(device), self.labels.to(device))


def load_items(split: Split, folder: str | Path | None = None) -> Items:
    """Read a split (``train`` or ``test``) from the IDX files; :class:`DataMissing` if absent."""
    root = data_dir(folder)
    if not root.is_dir():
        raise DataMissing(f"Fashion-MNIST folder {root} does not exist: {_INSTALL_HINT}")
    images = read_idx(_find(root, f"{_PREFIX[split]}-images-idx3-ubyte"))
    labels = read_idx(_find(root, f"{_PREFIX[split]}-labels-idx1-ubyte"))
    if images.ndim != 3 or images.shape[1:] != (ITEM, ITEM) or labels.shape != images.shape[:1]:
        raise ValueError(f"{root}: {split} images {images.shape} and labels {labels.shape} do not pair up")
    if labels.size and int(labels.max()) >= len(CLASSES):
        raise ValueError(f"{root}: {split} labels go up to {int(labels.max())}, expected 0-9")
    return Items(torch.from_numpy(images.copy()), torch.from_numpy(labels.astype(np.int64)))


def paste(canvas: Tensor, patches: Tensor, top: Tensor, left: Tensor) -> None:
    """Draw ``patches`` (B, h, w) into ``canvas`` (B, H, W) in place at ``top``/``left`` (B,),
    keeping the brighter pixel where they overlap (items are light on black)."""
    b, h, w = patches.shape
    device = canvas.device
    rows = (top.to(device)[:, None] + torch.arange(h, device=device))[:, :, None]  # (B, h, 1)
    cols = (left.to(device)[:, None] + torch.arange(w, device=device))[:, None, :]  # (B, 1, w)
    index = torch.arange(b, device=device)[:, None, None]
    canvas[index, rows, cols] = torch.maximum(canvas[index, rows, cols], patches)


def crop(images: Tensor, top: Tensor, left: Tensor, size: int) -> Tensor:
    """``size``×``size`` crops of ``images`` (B, H, W) at ``top``/``left`` (B,) -> (B, size, size)."""
    device = images.device
    rows = (top.to(device)[:, None] + torch.arange(size, device=device))[:, :, None]
    cols = (left.to(device)[:, None] + torch.arange(size, device=device))[:, None, :]
    return images[torch.arange(images.shape[0], device=device)[:, None, None], rows, cols]


@dataclass(frozen=True)
class Canvases:
    """A batch of canvases: ``images`` (B, 1, S, S) in [0, 1], ``labels`` (B,), and the item's
    top-left corner ``corners`` (B, 2) as (x, y) pixels."""

    images: Tensor
    labels: Tensor
    corners: Tensor


def make_canvases(
    items: Items,
    index: Tensor,
    *,
    size: int = 60,
    clutter: int = 0,
    clutter_size: int = 8,
    generator: torch.Generator | None = None,
) -> Canvases:
    """Items ``index`` (B,) each at a uniformly random position on a black ``size``² canvas; with
    ``clutter`` > 0, that many ``clutter_size``² crops of other random items are added first
    (the RAM paper's cluttered translated MNIST uses 4 pieces of 8×8 on 60×60).
    Random numbers come from ``generator`` (on the CPU for the fixed evaluation sets, on the
    items' device while training), so a seed fixes the whole batch."""
    if size < ITEM:
        raise ValueError(f"canvas size {size} is smaller than an item ({ITEM})")
    device = items.images.device
    rng = generator.device if generator is not None else device  # a generator on the GPU: no copies
    b = int(index.shape[0])
    canvas = torch.zeros(b, size, size, device=device)
    for _ in range(clutter):
        other = torch.randint(len(items), (b,), generator=generator, device=rng)
        at = torch.randint(ITEM - clutter_size + 1, (b, 2), generator=generator, device=rng)
        to = torch.randint(size - clutter_size + 1, (b, 2), generator=generator, device=rng)
        pieces = crop(items.images[other.to(device)].float() / 255, at[:, 0], at[:, 1], clutter_size)
        paste(canvas, pieces, to[:, 0], to[:, 1])
    corner = torch.randint(size - ITEM + 1, (b, 2), generator=generator, device=rng)  # (x, y)
    paste(canvas, items.images[index.to(device)].float() / 255, corner[:, 1], corner[:, 0])
    return Canvases(canvas[:, None], items.labels[index.to(device)], corner.to(device))


CANVAS_KINDS: dict[str, int] = {"translated": 0, "cluttered": 4}


def fixed_canvases(items: Items, kind: str, *, n: int | None = None, seed: int = 0, size: int = 60) -> Canvases:
    """The first ``n`` items of a split (all by default) on canvases fixed by ``seed``: the
    evaluation sets (test split, seed 0) are the same in every run."""
    if kind not in CANVAS_KINDS:
        raise ValueError(f"unknown canvas kind {kind!r}; choose one of {', '.join(CANVAS_KINDS)}")
    count = len(items) if n is None else min(n, len(items))
    generator = torch.Generator().manual_seed(seed)
    return make_canvases(
        items, torch.arange(count), size=size, clutter=CANVAS_KINDS[kind], generator=generator
    )
