from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from attnscope.vision.data import (
    DataMissing,
    fixed_canvases,
    load_items,
    make_canvases,
    read_idx,
    write_idx,
)


@pytest.mark.parametrize("name", ["x-idx3-ubyte", "x-idx3-ubyte.gz"])
def test_idx_round_trip(tmp_path: Path, name: str) -> None:
    array = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    write_idx(tmp_path / name, array)
    assert np.array_equal(read_idx(tmp_path / name), array)


def test_idx_rejects_other_files(tmp_path: Path) -> None:
    (tmp_path / "bad").write_bytes(b"\x00\x00\x0d\x01\x00\x00\x00\x02ab")  # float IDX
    with pytest.raises(ValueError, match="unsigned-byte"):
        read_idx(tmp_path / "bad")
    (tmp_path / "short").write_bytes(b"\x00\x00\x08\x01\x00\x00\x00\x05ab")
    with pytest.raises(ValueError, match="expected 5 bytes"):
        read_idx(tmp_path / "short")


def test_missing_data_says_how_to_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(DataMissing, match="apt-get install dataset-fashion-mnist"):
        load_items("train", tmp_path / "nowhere")
    with pytest.raises(DataMissing, match="t10k-images-idx3-ubyte"):
        load_items("test", tmp_path)
    monkeypatch.setenv("ATTNSCOPE_FASHION_MNIST_DIR", str(tmp_path / "from-env"))
    with pytest.raises(DataMissing, match="from-env"):
        load_items("test")


def test_reads_the_synthetic_split(fashion_dir: Path) -> None:
    items = load_items("train", fashion_dir)
    assert items.images.shape == (200, 28, 28) and items.images.dtype == torch.uint8
    assert items.labels.tolist()[:12] == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1]


def test_translated_canvas_holds_the_item_at_its_corner(fashion_dir: Path) -> None:
    items = load_items("train", fashion_dir)
    index = torch.tensor([3, 17, 42])
    canvases = make_canvases(items, index, size=60, generator=torch.Generator().manual_seed(5))
    assert canvases.images.shape == (3, 1, 60, 60)
    for b, i in enumerate(index.tolist()):
        x, y = canvases.corners[b].tolist()
        assert 0 <= x <= 32 and 0 <= y <= 32
        item = items.images[i].float() / 255
        assert torch.equal(canvases.images[b, 0, y : y + 28, x : x + 28], item)
        outside = canvases.images[b, 0].clone()
        outside[y : y + 28, x : x + 28] = 0
        assert outside.sum() == 0  # nothing but black around it
    assert canvases.labels.tolist() == items.labels[index].tolist()


def test_cluttered_canvas_adds_pieces_and_is_reproducible(fashion_dir: Path) -> None:
    items = load_items("test", fashion_dir)
    a = fixed_canvases(items, "cluttered", n=20, seed=3)
    b = fixed_canvases(items, "cluttered", n=20, seed=3)
    assert torch.equal(a.images, b.images)
    clean = fixed_canvases(items, "translated", n=20, seed=3)
    assert a.images.sum() > clean.images.sum()  # clutter adds light
    with pytest.raises(ValueError, match="unknown canvas kind"):
        fixed_canvases(items, "noisy")
