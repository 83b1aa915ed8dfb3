"""``attnscope import`` for decoder-only models (Llama, Mistral, Qwen2/3, Gemma 2/3, GPT-2).

Load the original with ``transformers`` (float32, eager attention), convert its weights into
:class:`~attnscope.nn.decoder_only.DecoderOnlyLM` (:mod:`attnscope.hf.llm_families`), check the
conversion's logits against the original's on a translation prompt (a failed check stops the
import), write the folder (:mod:`attnscope.llm.folder`) with the prompt template on its card, load
it back and check the stored copy too (the card records what storing in ``dtype`` cost).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import torch

from attnscope.hf import ImportFailure, require_transformers
from attnscope.hf.llm_families import LLM_TYPES, llm_config_fields, llm_state
from attnscope.llm.folder import load_llm_folder, save_llm_folder
from attnscope.llm.prompt import PromptError, default_template, fill
from attnscope.nn.decoder_only import DecoderOnlyLM
from attnscope.nn.decoder_only_config import DecoderOnlyConfig

logger = logging.getLogger(__name__)

LOGIT_TOLERANCE = 1e-3  # float32 against float32; measured differences are ~1e-6 (docs/llm.md)
CHECK_SENTENCE = "A man is riding a bicycle."
SPECIAL = ("bos_token", "eos_token", "pad_token", "unk_token")


MULTIMODAL = ("gemma3",)  # image + text checkpoints whose text part is imported (text_part)


def is_decoder_only(folder: Path) -> bool:
    """Whether the Hugging Face folder holds a model type :mod:`attnscope.hf.llm_families` imports
    (or a multimodal one whose text part it imports)."""
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(config, dict) and config.get("model_type") in (*LLM_TYPES, *MULTIMODAL)


def text_part(hf_model: Any, transformers: Any) -> Any:
    """The text-only causal LM inside a multimodal checkpoint (Gemma 3's
    ``Gemma3ForConditionalGeneration``: its ``language_model`` and ``lm_head`` in a
    ``Gemma3ForCausalLM`` of its ``text_config``; the vision tower and projector are left out),
    or ``hf_model`` itself for a text model."""
    if hf_model.config.model_type not in MULTIMODAL:
        return hf_model
    text = transformers.Gemma3ForCausalLM(hf_model.config.text_config)
    state = {f"model.{k}": v for k, v in hf_model.model.language_model.state_dict().items()}
    state["lm_head.weight"] = hf_model.lm_head.weight
    text.load_state_dict(state, strict=True)
    text.config._attn_implementation = "eager"
    return text.eval()


def chat_template_of(folder: Path) -> str | None:
    """The chat template saved with the tokenizer (``chat_template.jinja``, or
    ``tokenizer_config.json``'s ``chat_template``; the "default" one of a list)."""
    jinja = folder / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8")
    try:
        template = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8")).get("chat_template")
    except (OSError, ValueError):
        return None
    if isinstance(template, list):
        template = next((t.get("template") for t in template if t.get("name") == "default"), None)
    return template if isinstance(template, str) else None


def special_tokens(hf_tokenizer: Any) -> dict[str, str]:
    """The special tokens a chat template may name (bos_token, eos_token, ...), as strings."""
    return {name: str(getattr(hf_tokenizer, name)) for name in SPECIAL if getattr(hf_tokenizer, name, None)}


def convert_llm(hf_model: Any) -> DecoderOnlyLM:
    """The attnscope model of ``hf_model`` (eval, float32); ImportFailure naming what does not fit."""
    fields = llm_config_fields(hf_model)
    state = llm_state(hf_model, fields)
    try:
        config = DecoderOnlyConfig(**fields)
    except ValueError as err:
        raise ImportFailure(f"the model's layout is not one attnscope has: {err}") from err
    model = DecoderOnlyLM(config)
    missing, unexpected = model.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise ImportFailure(f"weights do not fit: missing {missing[:5]}, unexpected {unexpected[:5]}")
    return model.eval()


@torch.inference_mode()
def logit_difference(hf_model: Any, model: DecoderOnlyLM, ids: list[int]) -> float:
    """Largest |logit difference| between the original and ``model`` over a prompt's positions."""
    x = torch.tensor([ids])
    theirs = hf_model(input_ids=x).logits.float()
    return float((model(x).logits - theirs).abs().max())


def _prompt_ids(folder: Path, template: str, kind: str, pair: tuple[str, str]) -> list[int]:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))  # the backend: ids with specials
    text = fill(template, CHECK_SENTENCE, source_lang=pair[0], target_lang=pair[1]).text
    return list(tok.encode(text, add_special_tokens=kind == "completion").ids)


def import_llm(folder: Path, out: str | Path, *, source: str, name: str | None, dtype: torch.dtype,
               pair: tuple[str, str] | None) -> tuple[Path, dict[str, Any]]:  # fmt: skip
    """Import the decoder-only model saved in ``folder`` into the model folder ``out``."""
    transformers = require_transformers()
    if not (folder / "tokenizer.json").is_file():
        raise ImportFailure(f"{folder} has no tokenizer.json: attnscope reads decoder-only tokenizers from it")
    hf_model = transformers.AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager", dtype=torch.float32).eval()
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    model = convert_llm(text_part(hf_model, transformers))  # checked below against the original, images aside
    pair = pair or ("en", "de")
    try:
        template, kind = default_template(chat_template_of(folder), special_tokens(hf_tokenizer))
    except PromptError as err:
        raise ImportFailure(str(err)) from err
    ids = _prompt_ids(folder, template, kind, pair)
    checks = {"float32": {"max_logit_difference": logit_difference(hf_model, model, ids), "prompt_tokens": len(ids)}}
    if checks["float32"]["max_logit_difference"] > LOGIT_TOLERANCE:
        raise ImportFailure(f"the converted model's logits differ from the original's by {checks['float32']['max_logit_difference']:.3g}")
    card: dict[str, Any] = {
        "name": name or Path(out).name, "imported_from": source,
        "origin": {"source": source, "family": "decoder_only", "model_type": hf_model.config.model_type},
        "parameters": model.num_parameters, "dtype": str(dtype).removeprefix("torch."),
        "prompt": {"template": template, "kind": kind, "add_special_tokens": kind == "completion"},
        "decoding": {"length_penalty": 1.0, "max_new_tokens": 256}, "conversion_checks": checks,
    }  # fmt: skip
    meta = {"source_lang": pair[0], "target_lang": pair[1], "card": card}
    save_llm_folder(out, model, tokenizer_json=folder / "tokenizer.json", meta=meta, dtype=dtype)
    saved = load_llm_folder(out, memory_limit=None)
    checks["saved"] = {"max_logit_difference": logit_difference(hf_model, saved.model, ids)}
    (Path(out) / "card.json").write_text(json.dumps(card, indent=2, ensure_ascii=False) + "\n")
    logger.info("imported %s (%s): logits within %.2g", source, hf_model.config.model_type, checks["float32"]["max_logit_difference"])
    return Path(out), card
