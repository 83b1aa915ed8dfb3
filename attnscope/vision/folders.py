"""A vision model folder <-> a loaded model.

A folder holds ``vision.json`` (kind, dataset and the network's config), ``model.safetensors``
(fp16 weights) and ``card.json`` (metrics, learning curve). The config file's name differs from
the translation models' ``config.json`` on purpose: the two kinds of folders live side by side
in ``models/`` and each loader picks up only its own."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from attnscope.staging import (
    COMPLETE_FILE,
    IncompleteFolder,
    read_marker,
    staged_folder,
    write_text_atomic,
)
from attnscope.vision.baseline import BaselineConfig, FullImageCNN
from attnscope.vision.captioner import Captioner, CaptionerConfig
from attnscope.vision.ram import RAMConfig, RecurrentAttentionModel

CONFIG_FILE = "vision.json"
WEIGHTS_FILE = "model.safetensors"
CARD_FILE = "card.json"
FORMAT_VERSION = 1
Kind = Literal["ram", "full-image-cnn", "captioner"]
KINDS: tuple[str, ...] = ("ram", "full-image-cnn", "captioner")
DATASETS: tuple[str, ...] = ("translated", "cluttered", "scenes")


def build(kind: str, config: dict[str, Any]) -> nn.Module:
    """A fresh network of ``kind`` from its config dict (as stored in ``vision.json``)."""
    if kind == "ram":
        return RecurrentAttentionModel(RAMConfig(**config))
    if kind == "full-image-cnn":
        return FullImageCNN(BaselineConfig(**config))
    if kind == "captioner":
        return Captioner(CaptionerConfig.from_dict(config))
    raise ValueError(f"unknown vision model kind {kind!r}; expected one of {', '.join(KINDS)}")


def config_of(model: nn.Module) -> tuple[str, dict[str, Any]]:
    if isinstance(model, RecurrentAttentionModel):
        return "ram", model.config.to_dict()
    if isinstance(model, FullImageCNN):
        return "full-image-cnn", model.config.to_dict()
    if isinstance(model, Captioner):
        return "captioner", model.config.to_dict()
    raise TypeError(f"not a vision model: {type(model).__name__}")


def is_vision_folder(path: Path) -> bool:
    """A folder with a vision.json; hidden ones (attnscope.staging's folders being written) are not."""
    return not path.name.startswith(".") and path.is_dir() and (path / CONFIG_FILE).is_file()


def discover(models_dir: str | Path) -> list[Path]:
    """Every vision model folder directly inside ``models_dir``, sorted by name."""
    root = Path(models_dir)
    return sorted(p for p in root.iterdir() if is_vision_folder(p)) if root.is_dir() else []


def save_folder(
    folder: str | Path,
    model: nn.Module,
    *,
    dataset: str,
    card: dict[str, Any] | None = None,
    dtype: torch.dtype = torch.float16,
) -> Path:
    """Write ``model`` (weights cast to ``dtype``), its config and its card into ``folder``:
    under a temporary name, then its completion marker and one rename (attnscope.staging)."""
    if dataset not in DATASETS:
        raise ValueError(f"unknown dataset {dataset!r}; expected one of {', '.join(DATASETS)}")
    target = Path(folder)
    with staged_folder(target, kind="vision", owns=lambda p: (p / CONFIG_FILE).is_file()) as staged:
        _write_files(staged, model, dataset=dataset, card={"id": target.name, **(card or {})}, dtype=dtype)
    return target


def _write_files(folder: Path, model: nn.Module, *, dataset: str, card: dict[str, Any], dtype: torch.dtype) -> None:
    kind, config = config_of(model)
    weights = {
        name: t.detach().to("cpu", dtype if t.is_floating_point() else t.dtype).contiguous()
        for name, t in model.state_dict().items()
    }
    save_file(weights, str(folder / WEIGHTS_FILE))
    meta = {"format_version": FORMAT_VERSION, "kind": kind, "dataset": dataset, "config": config}
    (folder / CONFIG_FILE).write_text(json.dumps(meta, indent=2) + "\n")
    write_card(folder, card)


def write_card(folder: str | Path, card: dict[str, Any]) -> None:
    write_text_atomic(Path(folder) / CARD_FILE, json.dumps(card, indent=2, ensure_ascii=False) + "\n")


@dataclass
class VisionModel:
    """A loaded vision model: fp32 on its device, in eval mode."""

    id: str
    kind: str
    dataset: str
    model: nn.Module
    path: Path
    card: dict[str, Any] = field(default_factory=dict)

    @property
    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.model.parameters())

    @property
    def canvas(self) -> int:
        """Side of the square image the model takes, pixels."""
        return int(getattr(getattr(self.model, "config", None), "canvas", 0))


def load_folder(folder: str | Path, device: str | torch.device = "cpu", *, require_complete: bool = True) -> VisionModel:
    """Load a vision model folder; ``FileNotFoundError``/``ValueError`` naming what is wrong."""
    folder = Path(folder)
    for name in (CONFIG_FILE, WEIGHTS_FILE):
        if not (folder / name).is_file():
            raise FileNotFoundError(f"{folder}: missing {name}")
    if require_complete:
        try:
            read_marker(folder, "vision")
        except IncompleteFolder as err:
            raise ValueError(f"{folder / COMPLETE_FILE}: {err}") from err
    try:
        meta = json.loads((folder / CONFIG_FILE).read_text())
        kind, dataset, config = meta["kind"], meta["dataset"], meta["config"]
    except (json.JSONDecodeError, KeyError, TypeError) as err:
        raise ValueError(f"{folder / CONFIG_FILE}: not a vision model config ({err})") from err
    if dataset not in DATASETS:
        raise ValueError(f"{folder / CONFIG_FILE}: unknown dataset {dataset!r}")
    try:
        model = build(kind, config)
    except TypeError as err:
        raise ValueError(f"{folder / CONFIG_FILE}: bad config for {kind}: {err}") from err
    state = load_file(str(folder / WEIGHTS_FILE))
    try:
        model.load_state_dict({k: v.float() for k, v in state.items()})
    except RuntimeError as err:
        raise ValueError(f"{folder}: weights do not fit the config: {err}") from err
    card_path = folder / CARD_FILE
    card = json.loads(card_path.read_text()) if card_path.is_file() else {}
    return VisionModel(folder.name, kind, dataset, model.to(device).eval(), folder, card)
