"""The model repository: a folder per trained model <-> a loaded model.

A model folder holds ``config.json`` (architecture and hyper-parameters, language pair),
``model.safetensors`` (fp16 weights, loaded with the pickle-free safetensors loader),
``tokenizer.model`` (SentencePiece) and ``card.json`` (metrics: BLEU, curves, training time).
Adding a model is adding a folder.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from app.nn.base import Seq2Seq
from app.nn.config import CONFIG_VERSION, ModelConfig, config_from_dict, config_to_dict
from app.nn.factory import build_model
from app.text.tokenizer import Tokenizer

logger = logging.getLogger(__name__)

CONFIG_FILE, WEIGHTS_FILE, TOKENIZER_FILE, CARD_FILE = (
    "config.json",
    "model.safetensors",
    "tokenizer.model",
    "card.json",
)
FORMAT_VERSION = CONFIG_VERSION  # config.json's "format_version"; version 1 folders still load


@dataclass
class LoadedModel:
    id: str
    path: Path
    config: ModelConfig
    model: Seq2Seq
    tokenizer: Tokenizer
    source_lang: str
    target_lang: str
    card: dict[str, Any] = field(default_factory=dict)


def is_model_folder(path: Path) -> bool:
    return path.is_dir() and (path / CONFIG_FILE).is_file()


def discover(models_dir: str | Path) -> list[Path]:
    """Every model folder directly inside ``models_dir``, sorted by name."""
    root = Path(models_dir)
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if is_model_folder(p))


def _state_dict_for_saving(model: Seq2Seq, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """Parameters and persistent buffers on the CPU, floating point ones cast to ``dtype``.
    (Embeddings are tied by reuse in ``F.linear``, so no tensor appears under two names.)"""
    return {
        name: t.detach().to("cpu", dtype if t.is_floating_point() else t.dtype).contiguous()
        for name, t in model.state_dict().items()
    }


def save_model_folder(
    folder: str | Path,
    model: Seq2Seq,
    tokenizer: Tokenizer,
    *,
    source_lang: str,
    target_lang: str,
    card: dict[str, Any] | None = None,
    dtype: torch.dtype = torch.float16,
) -> Path:
    """Write a complete model folder (weights in ``dtype``; fp16 for shipping)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    meta = {
        "format_version": FORMAT_VERSION,
        "source_lang": source_lang,
        "target_lang": target_lang,
        "model": config_to_dict(model.config),
    }
    (folder / CONFIG_FILE).write_text(json.dumps(meta, indent=2) + "\n")
    save_file(_state_dict_for_saving(model, dtype), str(folder / WEIGHTS_FILE), metadata={"format": "pt"})
    tokenizer.save(folder / TOKENIZER_FILE)
    write_card(folder, card or {})
    return folder


def write_card(folder: str | Path, card: dict[str, Any]) -> None:
    (Path(folder) / CARD_FILE).write_text(json.dumps(card, indent=2, ensure_ascii=False) + "\n")


def read_config(folder: str | Path) -> tuple[ModelConfig, dict[str, Any]]:
    """The model config of a folder's ``config.json`` (any supported format version) and the
    whole file; ValueError naming the folder and the problem."""
    meta = json.loads((Path(folder) / CONFIG_FILE).read_text())
    version = meta.get("format_version")
    if version not in (1, FORMAT_VERSION) or not isinstance(meta.get("model"), dict):
        raise ValueError(f"{folder}: unsupported model format {version!r} (this attnscope reads 1 and {FORMAT_VERSION})")
    try:
        return config_from_dict(meta["model"], version=version), meta
    except (TypeError, ValueError) as err:
        raise ValueError(f"{folder}: {err}") from err


def load_model_folder(folder: str | Path, device: str | torch.device = "cpu") -> LoadedModel:
    """Load a model folder for inference (fp32 parameters on ``device``, eval mode).

    Raises ``FileNotFoundError`` or ``ValueError`` naming the problem if the folder is incomplete
    or does not match its configuration."""
    folder = Path(folder)
    for name in (CONFIG_FILE, WEIGHTS_FILE, TOKENIZER_FILE):
        if not (folder / name).is_file():
            raise FileNotFoundError(f"{folder}: missing {name}")
    config, meta = read_config(folder)
    tokenizer = Tokenizer.load(folder / TOKENIZER_FILE)
    if tokenizer.vocab_size != config.vocab_size:
        raise ValueError(
            f"{folder}: tokenizer has {tokenizer.vocab_size} pieces, config says {config.vocab_size}"
        )
    model = build_model(config)
    state = load_file(str(folder / WEIGHTS_FILE))
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as err:
        raise ValueError(f"{folder}: weights do not match config.json: {err}") from err
    model.to(device).eval()
    card = {}
    if (folder / CARD_FILE).is_file():
        card = json.loads((folder / CARD_FILE).read_text())
    return LoadedModel(
        id=folder.name,
        path=folder,
        config=config,
        model=model,
        tokenizer=tokenizer,
        source_lang=meta["source_lang"],
        target_lang=meta["target_lang"],
        card=card,
    )
