"""``attnscope import``: a Hugging Face encoder-decoder -> an attnscope model folder.

The steps: resolve the source (a ``save_pretrained`` folder, or a hub id fetched with the hub's
own client), load it with ``transformers`` (float32, eager attention), rename its weights and
renumber its vocabulary into a :class:`~attnscope.nn.transformer.Transformer`
(the converter registered for its ``model_type``, :mod:`attnscope.hf.converters`;
:mod:`attnscope.hf.vocab`), check the conversion against the original
(:mod:`attnscope.hf.checks`; a failed check stops the import), write the folder, load it back the way
serving does and check that copy too (its weights are in ``dtype``: the card records what the
rounding cost).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, cast

import torch

from attnscope.hf import ImportFailure, require_transformers
from attnscope.hf.checks import LOGIT_TOLERANCE, run_checks
from attnscope.hf.converters import Converter, converter_for
from attnscope.hf.vocab import (
    Renumbering,
    check_tokenizer_files,
    export_tokenizer,
    language_pieces,
    source_prefix,
)
from attnscope.nn.config import TransformerConfig
from attnscope.nn.transformer import Transformer
from attnscope.repository import load_model_folder, save_model_folder
from attnscope.text.vocab_tokenizer import Languages

logger = logging.getLogger(__name__)

DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}


@dataclass
class Imported:
    """What an import wrote: the folder and its card."""

    folder: Path
    card: dict[str, Any]


def resolve_source(source: str) -> Path:
    """A local folder as it is; otherwise a hub id downloaded with ``huggingface_hub``."""
    path = Path(source)
    if path.is_dir():
        return path
    if path.exists() or source.startswith((".", "/")):
        raise ImportFailure(f"{source} is not a folder saved with save_pretrained")
    try:
        from huggingface_hub import snapshot_download
    except ImportError as err:
        raise ImportFailure(f"{source!r} is not a local folder, and fetching it needs huggingface_hub") from err
    try:
        return Path(snapshot_download(source))
    except Exception as err:  # noqa: BLE001 - the hub client raises many kinds (network, 404, auth)
        raise ImportFailure(f"could not fetch {source!r} from the Hugging Face hub: {err}") from err


def _load(folder: Path) -> tuple[Any, Any]:
    transformers = require_transformers()
    major, minor = (int(x) for x in re.findall(r"\d+", transformers.__version__)[:2])
    dtype_key = "dtype" if (major, minor) >= (4, 56) else "torch_dtype"
    try:
        config = transformers.AutoConfig.from_pretrained(folder)
    except (OSError, ValueError) as err:
        raise ImportFailure(f"{folder}: no readable Hugging Face config ({err})") from err
    converter_for(config).check_config(config)  # refuse an unknown model type or a config, or a
    check_tokenizer_files(folder)  # tokenizer the text layer cannot read, before loading the weights
    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(
        folder, attn_implementation="eager", **{dtype_key: torch.float32}
    ).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    return model, tokenizer


def convert(
    hf_model: Any, hf_tokenizer: Any, folder: Path, languages: Languages | None = None
) -> tuple[Transformer, Renumbering, Any, Converter]:
    """The attnscope Transformer of ``hf_model`` (eval mode, float32), its renumbering and
    tokenizer (with a multilingual model's ``languages``). ImportFailure naming what does not fit."""
    c = hf_model.config
    converter = converter_for(c)
    state, facts = converter.convert_weights(hf_model)
    numbering = Renumbering.of(
        pad=int(c.pad_token_id),
        unk=int(hf_tokenizer.unk_token_id),
        eos=int(c.eos_token_id),
        start=int(c.decoder_start_token_id),
        vocab_size=state["embed.weight"].size(0),
    )
    config = TransformerConfig(
        vocab_size=len(numbering.order),
        tied_output=facts["tied_output"],
        scale_output=facts.get("scale_output", False),
        **converter.config_fields(c, facts["max_positions"]),
    )
    model = Transformer(config)
    missing, unexpected = model.load_state_dict(numbering.apply(state), strict=False)
    if missing or unexpected:
        raise ImportFailure(f"weights do not fit: missing {missing[:5]}, unexpected {unexpected[:5]}")
    tokenizer = export_tokenizer(hf_tokenizer, folder, numbering, languages)
    return model.eval(), numbering, tokenizer, converter


def _pair(hf_tokenizer: Any, source: str, pair: tuple[str, str] | None, *, multilingual: bool) -> tuple[str, str]:
    """The language pair: ``--pair``, else what the saved tokenizer says (Marian's
    ``source_lang``/``target_lang``, M2M100/NLLB/mBART's ``src_lang``/``tgt_lang``), else the
    end of the source's name (``opus-mt-en-de``). A multilingual model without one is an
    ImportFailure naming ``--pair``; another gets "src"-"tgt" (a label only)."""
    if pair is not None:
        return pair
    for src_key, tgt_key in (("source_lang", "target_lang"), ("src_lang", "tgt_lang")):
        src, tgt = getattr(hf_tokenizer, src_key, None), getattr(hf_tokenizer, tgt_key, None)
        if src and tgt:
            return str(src), str(tgt)
    found = re.search(r"(?:^|[-_/])([a-z]{2,3})-([a-z]{2,3})$", source.rstrip("/"))
    if found:
        return found.group(1), found.group(2)
    if multilingual:
        raise ImportFailure(
            "this multilingual model's saved tokenizer names no language pair: give one with --pair SOURCE-TARGET "
            "(its own codes, e.g. --pair en-de for M2M100, eng_Latn-deu_Latn for NLLB, en_XX-de_DE for mBART-50)"
        )
    return ("src", "tgt")


def check_tokenizer(hf_tokenizer: Any, tokenizer: Any, numbering: Renumbering) -> int:
    """How many of the check sentences attnscope's tokenizer encodes to the original's source
    ids (ImportFailure naming the first that differs: a tokenizer that does not match would
    make every answer wrong)."""
    from attnscope.hf.checks import SAMPLES

    for text in SAMPLES:
        theirs = numbering.from_hf([int(i) for i in hf_tokenizer(text).input_ids])
        ours = tokenizer.source_prefix_ids() + tokenizer.encode(text) + [tokenizer.eos_id]
        if ours != theirs:
            raise ImportFailure(f"the converted tokenizer splits {text!r} unlike the original ({ours} against {theirs})")
    return len(SAMPLES)


def import_model(
    source: str,
    out: str | Path,
    *,
    name: str | None = None,
    dtype: str = "float16",
    pair: tuple[str, str] | None = None,
) -> Imported:
    """Import ``source`` into the model folder ``out`` (see the module docstring)."""
    if dtype not in DTYPES:
        raise ImportFailure(f"unknown dtype {dtype!r}; choose one of {', '.join(DTYPES)}")
    require_transformers()  # first: a hub id would otherwise fail naming huggingface_hub, not the extra
    folder = resolve_source(source)
    from attnscope.hf.llm_import import import_llm, is_decoder_only

    if is_decoder_only(folder):  # a decoder-only LLM (docs/llm.md): its own converter and folder
        written, llm_card = import_llm(folder, out, source=source, name=name, dtype=DTYPES[dtype], pair=pair)
        return Imported(written, llm_card)
    hf_model, hf_tokenizer = _load(folder)
    multilingual = converter_for(hf_model.config).languages
    source_lang, target_lang = _pair(hf_tokenizer, source, pair, multilingual=multilingual)
    languages, forced = None, None
    if multilingual:
        languages, forced = language_pieces(hf_tokenizer, (source_lang, target_lang))
    elif prefix := source_prefix(hf_tokenizer):  # BART's <s> before every source
        languages = Languages(source_prefix=prefix)
    model, numbering, tokenizer, converter = convert(hf_model, hf_tokenizer, folder, languages)
    tokenizer_equal = check_tokenizer(hf_tokenizer, tokenizer, numbering)
    logger.info("converted %s (%s); checking it against the original", source, converter.label)
    checks = run_checks(hf_model, hf_tokenizer, model, numbering, forced=forced)
    if checks["max_logit_difference"] > LOGIT_TOLERANCE:
        raise ImportFailure(f"the converted model's logits differ from the original's by {checks['max_logit_difference']:.3g}")
    checked: dict[str, Any] = {"float32": checks, "tokenizer_equal": tokenizer_equal}
    card: dict[str, Any] = {
        "name": name or Path(out).name,
        "imported_from": source,  # scalar: /api/models shows it (the whole card: the Models page)
        "origin": {"source": source, "family": converter.label, "model_type": hf_model.config.model_type},
        "license": _license(folder),
        "parameters": model.num_parameters,
        "sizes": _sizes(model.config),
        **({"language_codes": tokenizer.language_codes()} if tokenizer.language_codes() else {}),
        "dtype": dtype,
        # beam search ranks by the plain log-probability, as generate(length_penalty=0) does; no
        # placeholders by default: a general MT model copies numbers and names itself, and its
        # output should be the original's (protect exists for the caption-trained shipped models)
        "decoding": {"length_penalty": 0.0, "protect": False},
        "conversion_checks": checked,
    }

    def check_saved(staged: Path) -> None:  # the written copy, checked before it is renamed into place
        saved = load_model_folder(staged, require_complete=False)
        checked["saved"] = run_checks(hf_model, hf_tokenizer, cast(Transformer, saved.model), numbering, forced=forced)
        save_card(staged, card)

    save_model_folder(
        out, model, tokenizer, source_lang=source_lang, target_lang=target_lang, card=card, dtype=DTYPES[dtype],
        check=check_saved,
    )  # fmt: skip
    return Imported(Path(out), card)


def _sizes(config: TransformerConfig) -> dict[str, Any]:
    """What the Models page shows of the converted sizes, per stack."""
    stacks: tuple[tuple[Literal["encoder", "decoder"], int], ...] = (
        ("encoder", config.encoder_layers), ("decoder", config.decoder_layers)
    )
    return {
        "d_model": config.d_model,
        "vocabulary": config.vocab_size,
        **{
            stack: {"layers": layers, "heads": config.heads_of(stack), "ff_dim": config.ff_dim_of(stack)}
            for stack, layers in stacks
        },
    }


def save_card(folder: Path, card: dict[str, Any]) -> None:
    from attnscope.repository import write_card

    write_card(folder, card)


def _license(folder: Path) -> str | None:
    """The ``license:`` of the model card's front matter (README.md), when there is one."""
    readme = folder / "README.md"
    if not readme.is_file():
        return None
    found = re.search(r"^license:\s*(\S+)", readme.read_text(encoding="utf-8", errors="replace"), re.MULTILINE)
    return found.group(1) if found else None
