"""Tiny synthetic Fashion-MNIST files and tiny vision model folders, for tests and demos: the
suite never needs the real data set."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from attnscope.vision import folders
from attnscope.vision.baseline import BaselineConfig, FullImageCNN
from attnscope.vision.captioner import Captioner, CaptionerConfig
from attnscope.vision.data import ITEM, write_idx
from attnscope.vision.ram import RAMConfig, RecurrentAttentionModel

TINY_RAM = {"glimpses": 3, "glimpse_hidden": 8, "hidden": 16}
TINY_CAPTIONER = {"channels": (4, 8, 8), "embed": 8, "hidden": 16, "attn_dim": 8, "max_len": 10}


def synthetic_items(count: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``count`` 28×28 uint8 items, labels cycling 0-9: class c is a bright bar in rows
    2c+3 to 2c+8 over faint noise, so a model can tell the classes apart."""
    rng = np.random.default_rng(seed)
    labels = np.arange(count) % 10
    images = rng.integers(0, 30, size=(count, ITEM, ITEM)).astype(np.uint8)
    for i, c in enumerate(labels):
        images[i, 2 * c + 3 : 2 * c + 9, 4:24] = 200 + rng.integers(0, 55)
    return images, labels.astype(np.uint8)


def write_tiny_fashion_mnist(folder: str | Path, train: int = 200, test: int = 50) -> Path:
    """The four Fashion-MNIST IDX files (gzipped, as Debian ships them) with synthetic items."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for prefix, count, seed in (("train", train, 0), ("t10k", test, 1)):
        images, labels = synthetic_items(count, seed)
        write_idx(folder / f"{prefix}-images-idx3-ubyte.gz", images)
        write_idx(folder / f"{prefix}-labels-idx1-ubyte.gz", labels)
    return folder


def build_tiny_vision_models(root: str | Path, seed: int = 0) -> list[Path]:
    """Tiny random model folders (fp32): a RAM per canvas kind, the baseline, and both
    captioners, named like the shipped ones, with cards that carry a curve and test numbers."""
    root = Path(root)
    torch.manual_seed(seed)
    made = []
    specs: list[tuple[str, torch.nn.Module, str]] = [
        ("vision-ram-translated", RecurrentAttentionModel(RAMConfig(**TINY_RAM)), "translated"),
        ("vision-ram-cluttered", RecurrentAttentionModel(RAMConfig(**TINY_RAM)), "cluttered"),
        ("vision-cnn-translated", FullImageCNN(BaselineConfig(width=2)), "translated"),
        ("vision-sat-scenes", Captioner(CaptionerConfig(**TINY_CAPTIONER)), "scenes"),  # type: ignore[arg-type]
        ("vision-noattn-scenes", Captioner(CaptionerConfig(attention=False, **TINY_CAPTIONER)), "scenes"),  # type: ignore[arg-type]
    ]
    for name, model, dataset in specs:
        metric = "val_exact_match" if dataset == "scenes" else "val_accuracy"
        card = {
            "kind": folders.config_of(model)[0],
            "dataset": dataset,
            "parameters": sum(p.numel() for p in model.parameters()),
            "note": "tiny random model for tests",
            "curve": [{"step": s, "train_loss": 2.3 / s, metric: 0.1 * s} for s in (1, 2, 3)],
        }
        if dataset == "scenes":  # made-up test numbers in the card's shape, for the pages to show
            card["test"] = {"split": "test", "bleu": 12.5, "chrf": 40.25, "exact_match": 0.1, "examples": 6}
        made.append(folders.save_folder(root / name, model.eval(), dataset=dataset, card=card, dtype=torch.float32))
    return made
