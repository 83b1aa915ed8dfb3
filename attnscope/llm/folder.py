"""A decoder-only model folder: ``config.json`` (architecture ``decoder_only``, language pair),
``model.safetensors``, ``tokenizer.json`` (byte-level BPE, read with the ``tokenizers`` library)
and ``card.json`` (with the translation prompt template under ``prompt``).

The folder is written under a temporary name and renamed into place, so a server never reads a
half-written one. Loading refuses a model whose float32 weights would not fit in memory."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import torch
from safetensors.torch import load_file, save_file

from attnscope.nn.config import config_from_dict, config_to_dict
from attnscope.nn.decoder_only import DecoderOnlyLM
from attnscope.nn.decoder_only_config import DecoderOnlyConfig
from attnscope.nn.family import families
from attnscope.text.bpe import JsonTokenizer
from attnscope.text.interface import SpecialIds

CONFIG_FILE, WEIGHTS_FILE, TOKENIZER_JSON, CARD_FILE = "config.json", "model.safetensors", "tokenizer.json", "card.json"
FORMAT_VERSION = 2


class LLMFolderError(ValueError):
    """A decoder-only folder that cannot be loaded; the message names the file and the reason."""


@dataclass
class LoadedLLM:
    """A loaded decoder-only model: its config, model (float32, eval), tokenizer (the interface's
    :class:`~attnscope.text.bpe.JsonTokenizer`; ``tokenizer.backend`` encodes with offsets), card."""

    id: str
    path: Path
    config: DecoderOnlyConfig
    model: DecoderOnlyLM
    tokenizer: JsonTokenizer
    source_lang: str
    target_lang: str
    card: dict[str, Any] = field(default_factory=dict)


def is_llm_folder(folder: str | Path) -> bool:
    """Whether ``folder``'s config.json names the decoder-only architecture."""
    try:
        meta = json.loads((Path(folder) / CONFIG_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(meta, dict) and isinstance(meta.get("model"), dict) and meta["model"].get("architecture") == "decoder_only"


def llm_tokenizer(tokenizer_json: Path, config: DecoderOnlyConfig) -> JsonTokenizer:
    """The model's ``tokenizer.json`` behind attnscope's tokenizer interface, its ids the file's own
    (a byte-level BPE has no unknown piece: ``unk`` is the padding id, never produced)."""
    specials = SpecialIds(pad=config.pad_id, unk=config.pad_id, bos=config.bos_id, eos=config.eos_id)
    return JsonTokenizer(tokenizer_json.read_text(encoding="utf-8"), specials=specials)


def save_llm_folder(folder: str | Path, model: DecoderOnlyLM, *, tokenizer_json: Path, meta: dict[str, Any],
                    dtype: torch.dtype = torch.float16) -> Path:  # fmt: skip
    """Write the folder (weights in ``dtype``; ``meta``: source_lang, target_lang, card) atomically;
    the tokenizer as ``tokenizer.json`` + ``tokenizer_meta.json`` (:mod:`attnscope.text.bpe`)."""
    folder = Path(folder)
    tmp = folder.with_name(f".{folder.name}.partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    config = {"format_version": FORMAT_VERSION, "source_lang": meta["source_lang"], "target_lang": meta["target_lang"],
              "model": config_to_dict(cast(Any, model.config))}  # fmt: skip  # any config's to_dict form
    (tmp / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n")
    state = {k: v.detach().to("cpu", dtype if v.is_floating_point() else v.dtype).contiguous()
             for k, v in model.state_dict().items()}  # fmt: skip
    for name in [k for k in state if k.endswith((".inv_freq", ".rope_scale"))]:
        state[name] = state[name].float()  # positions are kept exactly
    save_file(state, str(tmp / WEIGHTS_FILE), metadata={"format": "pt"})
    llm_tokenizer(tokenizer_json, model.config).save(tmp / TOKENIZER_JSON)
    (tmp / CARD_FILE).write_text(json.dumps(meta.get("card", {}), indent=2, ensure_ascii=False) + "\n")
    if folder.exists():
        shutil.rmtree(folder)
    os.replace(tmp, folder)
    return folder


def available_memory() -> int | None:
    """Bytes of memory available now (``MemAvailable``), None where it cannot be read."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def check_fits(config: DecoderOnlyConfig, limit: int | None) -> None:
    """LLMFolderError when the model's float32 weights exceed ``limit`` bytes (None: no check)."""
    d, f, v, hd = config.d_model, config.ff_dim, config.vocab_size, config.head_dim
    per_layer = d * hd * (2 * config.heads + 2 * config.kv_heads) + (3 if config.gated_ff else 2) * d * f
    params = config.layers * per_layer + v * d * (1 if config.tied_output else 2)
    if limit is not None and params * 4 > limit:
        raise LLMFolderError(
            f"the model has {params / 1e9:.2f} B parameters ({params * 4 / 2**30:.1f} GiB in float32); "
            f"only {limit / 2**30:.1f} GiB of memory is available: it is not loaded"
        )


def _read(folder: Path) -> tuple[DecoderOnlyConfig, dict[str, Any]]:
    families()  # the registry knows the decoder_only config class once its families are loaded
    try:
        meta = json.loads((folder / CONFIG_FILE).read_text(encoding="utf-8"))
        config = config_from_dict(meta["model"], version=int(meta.get("format_version", FORMAT_VERSION)))
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise LLMFolderError(f"{folder}: {CONFIG_FILE} could not be read: {err}") from err
    if not isinstance(config, DecoderOnlyConfig):
        raise LLMFolderError(f"{folder}: {CONFIG_FILE} is not a decoder-only model")
    return config, meta


def llm_folder_tokenizer(folder: str | Path) -> tuple[JsonTokenizer, tuple[str, str]]:
    """A decoder-only folder's tokenizer and (source, target) languages, without its weights (what
    a corpus needs read before the model runs); LLMFolderError naming the file at fault."""
    folder = Path(folder)
    _, meta = _read(folder)
    try:
        tokenizer = JsonTokenizer.load(folder / TOKENIZER_JSON)
    except Exception as err:  # noqa: BLE001 - tokenizers raises its own exception types
        raise LLMFolderError(f"{folder}: {TOKENIZER_JSON} could not be read: {err}") from err
    return tokenizer, (str(meta["source_lang"]), str(meta["target_lang"]))


def load_llm_folder(folder: str | Path, device: str | torch.device = "cpu", *,
                    memory_limit: int | None | str = "available") -> LoadedLLM:  # fmt: skip
    """Load a decoder-only folder for inference; LLMFolderError naming the file at fault, or
    saying the model is larger than ``memory_limit`` bytes ("available": what the machine has)."""
    folder = Path(folder)
    config, meta = _read(folder)
    check_fits(config, available_memory() if memory_limit == "available" else memory_limit)  # type: ignore[arg-type]
    tokenizer, _ = llm_folder_tokenizer(folder)
    model = DecoderOnlyLM(config)
    try:
        model.load_state_dict(load_file(str(folder / WEIGHTS_FILE)), strict=True)
    except Exception as err:  # noqa: BLE001 - safetensors and torch raise their own types
        raise LLMFolderError(f"{folder}: {WEIGHTS_FILE} does not fit config.json: {str(err)[:300]}") from err
    try:
        card = json.loads((folder / CARD_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        card = {}
    return LoadedLLM(folder.name, folder, config, model.float().to(device).eval(), tokenizer,
                     str(meta["source_lang"]), str(meta["target_lang"]), card if isinstance(card, dict) else {})  # fmt: skip
