"""The model repository: a folder per trained model <-> a loaded model.

A model folder holds ``config.json`` (architecture and hyper-parameters, language pair),
``model.safetensors`` (fp16 weights, loaded with the pickle-free safetensors loader),
``tokenizer.model`` (SentencePiece) and ``card.json`` (metrics: BLEU, curves, training time).
Adding a model is adding a folder.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from attnscope.nn import native
from attnscope.nn.base import Seq2Seq
from attnscope.nn.config import CONFIG_VERSION, ModelConfig, config_from_dict, config_to_dict
from attnscope.nn.factory import build_model
from attnscope.staging import (
    COMPLETE_FILE,
    IncompleteFolder,
    read_marker,
    staged_folder,
    write_text_atomic,
)
from attnscope.text.bpe import JSON_FILE, JsonTokenizer
from attnscope.text.interface import Tokenizer
from attnscope.text.tokenizer import SentencePieceTokenizer
from attnscope.text.vocab_tokenizer import VOCAB_FILE, VocabTokenizer

logger = logging.getLogger(__name__)

CONFIG_FILE, WEIGHTS_FILE, TOKENIZER_FILE, CARD_FILE = (
    "config.json",
    "model.safetensors",
    "tokenizer.model",
    "card.json",
)
FORMAT_VERSION = CONFIG_VERSION  # config.json's "format_version"; version 1 folders still load


class ModelFolderError(ValueError):
    """A model folder that cannot be loaded; ``file`` names the file at fault."""

    def __init__(self, folder: Path, file: str, message: str) -> None:
        self.folder, self.file, self.reason = folder, file, message
        super().__init__(f"{folder}: {message}")


class MissingModelFile(ModelFolderError, FileNotFoundError):
    pass


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
    warnings: list[str] = field(default_factory=list)  # e.g. a card.json that could not be read


def is_model_folder(path: Path) -> bool:
    """A sequence-to-sequence model folder: a config.json, not hidden (attnscope.staging's folders
    being written are), and not a decoder-only LLM's (attnscope.llm serves those)."""
    return not path.name.startswith(".") and path.is_dir() and (path / CONFIG_FILE).is_file() and not _decoder_only(path)
def _decoder_only(path: Path) -> bool:
    try:
        meta = json.loads((path / CONFIG_FILE).read_text(encoding="utf-8"))
        return bool(meta["model"]["architecture"] == "decoder_only")
    except (OSError, ValueError, KeyError, TypeError):
        return False


def discover(models_dir: str | Path) -> list[Path]:
    """Every model folder directly inside ``models_dir``, sorted by name."""
    root = Path(models_dir)
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if is_model_folder(p))


class ModelIdClash(ValueError):
    """Two model repositories hold a folder of the same name (a model id is its folder's name)."""


def discover_all(roots: Iterable[str | Path]) -> list[Path]:
    """Every model folder of every root (the shipped models and those ``--models-dir`` adds),
    sorted by id; ModelIdClash naming both folders when an id is in two roots."""
    found: dict[str, Path] = {}
    for root in roots:
        for folder in discover(root):
            if folder.name in found and found[folder.name].resolve() != folder.resolve():
                raise ModelIdClash(
                    f"model id {folder.name!r} is in both {found[folder.name].parent} and {folder.parent}: rename one "
                    "folder, or serve only yours (attnscope serve --only-models-dir)"
                )
            found.setdefault(folder.name, folder)
    return [found[name] for name in sorted(found)]


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
    check: Callable[[Path], None] | None = None,
) -> Path:
    """Write a complete model folder (weights in ``dtype``; fp16 for shipping): under a temporary
    name, then ``check(staged folder)`` (which may raise, leaving ``folder`` as it was, or rewrite
    the card), then the completion marker and one rename into place (attnscope.staging). An
    existing model folder at ``folder`` is replaced (its ``analysis`` kept)."""
    folder = Path(folder)
    with staged_folder(folder, kind="model", owns=lambda p: (p / CONFIG_FILE).is_file(), carry=("analysis",)) as staged:
        _write_model_files(staged, model, tokenizer, source_lang=source_lang, target_lang=target_lang, card=card, dtype=dtype)
        if check is not None:
            check(staged)
    return folder


def _write_model_files(
    folder: Path,
    model: Seq2Seq,
    tokenizer: Tokenizer,
    *,
    source_lang: str,
    target_lang: str,
    card: dict[str, Any] | None,
    dtype: torch.dtype,
) -> None:
    meta = {
        "format_version": FORMAT_VERSION,
        "source_lang": source_lang,
        "target_lang": target_lang,
        "model": config_to_dict(model.config),
    }
    (folder / CONFIG_FILE).write_text(json.dumps(meta, indent=2) + "\n")
    save_file(_state_dict_for_saving(model, dtype), str(folder / WEIGHTS_FILE), metadata={"format": "pt"})
    tokenizer.save(folder / tokenizer.file_name)
    write_card(folder, card or {})


def write_card(folder: str | Path, card: dict[str, Any]) -> None:
    """Replace the card whole (a temporary file and a rename: a reader never sees half of it)."""
    write_text_atomic(Path(folder) / CARD_FILE, json.dumps(card, indent=2, ensure_ascii=False) + "\n")


def read_config(folder: str | Path) -> tuple[ModelConfig, dict[str, Any]]:
    """``config.json`` -> (the model's configuration, any supported format version, and the
    whole file). ModelFolderError naming config.json for a file that is not JSON, has an
    unsupported format or invalid fields."""
    folder = Path(folder)
    try:
        meta = json.loads((folder / CONFIG_FILE).read_text(encoding="utf-8"))
        if not isinstance(meta, dict):
            raise ValueError("is not a JSON object")
        version = meta.get("format_version")
        if version not in (1, FORMAT_VERSION) or not isinstance(meta.get("model"), dict):
            raise ValueError(f"unsupported model format {version!r} (this attnscope reads 1 and {FORMAT_VERSION})")
        for key in ("source_lang", "target_lang"):
            if key not in meta:
                raise ValueError(f"has no {key!r} field")
        return config_from_dict(meta["model"], version=version), meta
    except FileNotFoundError:
        raise MissingModelFile(folder, CONFIG_FILE, f"missing {CONFIG_FILE}") from None
    except (OSError, ValueError, TypeError) as err:  # JSONDecodeError and UnicodeError are ValueErrors
        raise ModelFolderError(folder, CONFIG_FILE, f"{CONFIG_FILE}: {err}") from err


def check_complete(folder: Path) -> None:
    """ModelFolderError naming complete.json unless the folder carries its completion marker
    (attnscope.staging): a folder written in place and interrupted is never loaded."""
    try:
        read_marker(folder, "model")
    except IncompleteFolder as err:
        raise ModelFolderError(folder, COMPLETE_FILE, str(err)) from err


def check_weights_header(folder: Path, config: ModelConfig) -> None:
    """Compare the shapes ``config`` implies (its network built on the meta device: no memory)
    with the tensors model.safetensors's header lists (a few KB read), before any allocation:
    ModelFolderError naming model.safetensors and config.json where they differ."""
    from attnscope.weights_header import BadHeader, expected_shapes, mismatches, read_header

    try:
        header = read_header(folder / WEIGHTS_FILE)
    except (OSError, BadHeader) as err:
        raise ModelFolderError(folder, WEIGHTS_FILE, f"{WEIGHTS_FILE} could not be read: {err}") from err
    try:
        expected = expected_shapes(build_model, config)
    except BadHeader as err:
        raise ModelFolderError(folder, CONFIG_FILE, f"{CONFIG_FILE}: {err}") from err
    wrong = [] if expected is None else mismatches(expected, header)
    if wrong:
        raise ModelFolderError(
            folder, WEIGHTS_FILE,
            f"weights do not match config.json ({WEIGHTS_FILE}'s header, checked before loading): {'; '.join(wrong)}",
        )  # fmt: skip


def read_card(folder: str | Path) -> tuple[dict[str, Any], list[str]]:
    """``card.json`` -> (the card, warnings). The card is optional and only informative, so a
    broken one gives an empty card and a warning naming the problem instead of an error."""
    path = Path(folder) / CARD_FILE
    if not path.is_file():
        return {}, []
    try:
        card = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        return {}, [f"{CARD_FILE} could not be read ({err}); serving the model without its card"]
    if not isinstance(card, dict):
        return {}, [f"{CARD_FILE} is not a JSON object; serving the model without its card"]
    return card, []


def tokenizer_file(folder: Path) -> str:
    """The name of the folder's tokenizer file: ``tokenizer.model`` (SentencePiece), or
    ``tokenizer.json`` for an import whose tokenizer is a Hugging Face ``tokenizer.json``."""
    if not (folder / TOKENIZER_FILE).is_file() and (folder / JSON_FILE).is_file():
        return JSON_FILE
    return TOKENIZER_FILE


def required_files(folder: Path) -> tuple[str, str]:
    """The files a model folder cannot do without besides config.json: weights and tokenizer."""
    return WEIGHTS_FILE, tokenizer_file(folder)


def load_tokenizer(folder: Path) -> Tokenizer:
    """The folder's tokenizer: a ``tokenizer.json`` (attnscope.text.bpe), or SentencePiece with
    the vocabulary of ``vocab.json`` when an imported model (attnscope.hf) brought one."""
    if tokenizer_file(folder) == JSON_FILE:
        return JsonTokenizer.load(folder / JSON_FILE)
    if (folder / VOCAB_FILE).is_file():
        return VocabTokenizer.load(folder / TOKENIZER_FILE)
    return SentencePieceTokenizer.load(folder / TOKENIZER_FILE)


def load_model_folder(
    folder: str | Path,
    device: str | torch.device = "cpu",
    quantize: str | None = None,
    *,
    require_complete: bool = True,
) -> LoadedModel:
    """Load a model folder for inference (fp32 parameters on ``device``, eval mode); with
    ``quantize="int8"``, its linear layers dynamically quantised (CPU only; attnscope.nn.quantize).

    Raises ModelFolderError (MissingModelFile, a FileNotFoundError, for a missing file) whose
    ``file`` names the file at fault: config.json, tokenizer.model, model.safetensors, or
    complete.json for a folder without its completion marker (attnscope.staging). The config is
    checked against the weights file's header before the network is built. A broken card.json
    is not fatal: it becomes a warning in ``LoadedModel.warnings``."""
    folder = Path(folder)
    config, meta = read_config(folder)
    for name in required_files(folder):
        if not (folder / name).is_file():
            raise MissingModelFile(folder, name, f"missing {name}")
    if require_complete:  # False only for a folder being written (its check before the marker)
        check_complete(folder)
    tok_file = tokenizer_file(folder)
    try:
        tokenizer = load_tokenizer(folder)
    except (OSError, RuntimeError, ValueError, TypeError) as err:
        raise ModelFolderError(folder, tok_file, f"{tok_file} could not be read: {err}") from err
    if tokenizer.vocab_size != config.vocab_size:
        raise ModelFolderError(
            folder, tok_file, f"tokenizer has {tokenizer.vocab_size} pieces, config says {config.vocab_size}"
        )
    check_weights_header(folder, config)
    model = build_model(config)
    try:
        state = load_file(str(folder / WEIGHTS_FILE))
    except Exception as err:  # noqa: BLE001 - safetensors raises its own error types for corrupt files
        raise ModelFolderError(folder, WEIGHTS_FILE, f"{WEIGHTS_FILE} could not be read: {err}") from err
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as err:
        detail = " ".join(str(err).split())  # torch lists every tensor: keep the start
        detail = detail if len(detail) <= 400 else detail[:400] + " …"
        raise ModelFolderError(folder, WEIGHTS_FILE, f"weights do not match config.json: {detail}") from err
    model.to(device).eval()
    if quantize:
        from attnscope.nn.quantize import quantize as quantize_model

        quantize_model(model, quantize)
    if model.device.type == "cpu":
        # load the native operations (attnscope.nn.native: the Transformer's decoder step, every
        # model's search, quantised or not; built at install time, never here) now, not in the
        # first request; once a process, a log line saying why where there are none
        native.ops()
    card, warnings = read_card(folder)
    for warning in warnings:
        logger.warning("%s: %s", folder, warning)
    return LoadedModel(
        id=folder.name,
        path=folder,
        config=config,
        model=model,
        tokenizer=tokenizer,
        source_lang=meta["source_lang"],
        target_lang=meta["target_lang"],
        card=card,
        warnings=warnings,
    )
