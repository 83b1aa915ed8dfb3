"""The Hugging Face families attnscope imports, each a registered :class:`Family`.

A family says how its config maps onto :class:`~attnscope.nn.config.TransformerConfig` and how its
parameter names map onto :class:`~attnscope.nn.transformer.Transformer`'s. The BART lineage (Marian,
M2M100/NLLB, BART, mBART) shares one layer and one set of names; the families differ in norm
position, embedding norm, final norms and where their position table starts. T5 and mT5 have
names and pieces of their own (:mod:`attnscope.hf.t5`). A model type not
registered here is refused with the reason (:data:`REFUSED`) or the list of those that are.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from attnscope.hf import ImportFailure
from attnscope.hf.t5 import t5_config_fields, t5_convert_weights

ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "gelu_new": "gelu_new", "swish": "silu", "silu": "silu"}


@dataclass(frozen=True)
class Family:
    """One Hugging Face model type and its layout in attnscope's terms."""

    name: str
    pre_norm: bool
    embedding_norm: bool
    final_norm: bool
    first_position: Callable[[nn.Module], int]  # the row of HF's position table for position 0
    languages: bool = False  # target language chosen per request (a forced first token)
    lineage: str = "bart"  # whose names and config: "bart" (this module's) or "t5" (attnscope.hf.t5)


def _first_learned(module: nn.Module) -> int:
    return int(getattr(module, "offset", 0))


def _first_padded(module: nn.Module) -> int:
    """fairseq's sinusoidal table: position ids count from ``padding_idx + 1``."""
    return int(getattr(module, "padding_idx", 1)) + 1


FAMILIES: dict[str, Family] = {
    "marian": Family("marian", pre_norm=False, embedding_norm=False, final_norm=False, first_position=_first_learned),
    "m2m_100": Family(
        "m2m_100", pre_norm=True, embedding_norm=False, final_norm=True, first_position=_first_padded, languages=True
    ),
    "bart": Family("bart", pre_norm=False, embedding_norm=True, final_norm=False, first_position=_first_learned),
    "mbart": Family(
        "mbart", pre_norm=True, embedding_norm=True, final_norm=True, first_position=_first_learned, languages=True
    ),
}

for _t5 in ("t5", "mt5"):  # pre-norm, final norms, no position table (a bias on the scores)
    FAMILIES[_t5] = Family(_t5, pre_norm=True, embedding_norm=False, final_norm=True, first_position=_first_learned, lineage="t5")

REFUSED: dict[str, str] = {
    "fsmt": "FSMT has separate source and target vocabularies; attnscope's Transformer shares one",
    "pegasus": "Pegasus is not a translation family attnscope imports",
}


def family_of(hf_config: Any) -> Family:
    """The registered family of a Hugging Face config; ImportFailure naming what is missing."""
    model_type = str(getattr(hf_config, "model_type", ""))
    if model_type in FAMILIES:
        return FAMILIES[model_type]
    if model_type in REFUSED:
        raise ImportFailure(f"cannot import model type {model_type!r}: {REFUSED[model_type]}")
    known = ", ".join(sorted(FAMILIES))
    raise ImportFailure(f"cannot import model type {model_type!r}: attnscope imports {known}")


def config_fields(family: Family, hf_config: Any, max_positions: int) -> dict[str, Any]:
    """The TransformerConfig fields (vocab_size and tied_output aside) of ``hf_config``."""
    if family.lineage == "t5":
        return t5_config_fields(hf_config)
    c = hf_config
    if c.encoder_attention_heads != c.decoder_attention_heads:
        raise ImportFailure("encoder and decoder head counts differ; attnscope's Transformer has one")
    if c.encoder_ffn_dim != c.decoder_ffn_dim:
        raise ImportFailure("encoder and decoder feed-forward sizes differ; attnscope's Transformer has one")
    activation = ACTIVATIONS.get(str(c.activation_function))
    if activation is None:
        raise ImportFailure(f"activation {c.activation_function!r} is not one attnscope has ({', '.join(ACTIVATIONS)})")
    if getattr(c, "share_encoder_decoder_embeddings", True) is False:
        raise ImportFailure("separate encoder and decoder vocabularies; attnscope's Transformer shares one")
    return dict(
        d_model=c.d_model,
        heads=c.encoder_attention_heads,
        ff_dim=c.encoder_ffn_dim,
        encoder_layers=c.encoder_layers,
        decoder_layers=c.decoder_layers,
        pre_norm=family.pre_norm,
        max_positions=max_positions,
        dropout=0.0,
        activation=activation,
        scale_embedding=bool(getattr(c, "scale_embedding", False)),
        positions="learned",
        embedding_norm=family.embedding_norm,
        final_norm=family.final_norm,
        output_bias=True,
    )


LAYER_NAMES = [  # (HF pattern, attnscope replacement); the BART lineage's names
    (r"^model\.encoder\.layers\.(\d+)\.self_attn\.", r"encoder_layers.\1.self_attn."),
    (r"^model\.encoder\.layers\.(\d+)\.self_attn_layer_norm\.", r"encoder_layers.\1.res_attn.norm."),
    (r"^model\.encoder\.layers\.(\d+)\.fc1\.", r"encoder_layers.\1.ff.net.0."),
    (r"^model\.encoder\.layers\.(\d+)\.fc2\.", r"encoder_layers.\1.ff.net.3."),
    (r"^model\.encoder\.layers\.(\d+)\.final_layer_norm\.", r"encoder_layers.\1.res_ff.norm."),
    (r"^model\.decoder\.layers\.(\d+)\.self_attn\.", r"decoder_layers.\1.self_attn."),
    (r"^model\.decoder\.layers\.(\d+)\.self_attn_layer_norm\.", r"decoder_layers.\1.res_self.norm."),
    (r"^model\.decoder\.layers\.(\d+)\.encoder_attn\.", r"decoder_layers.\1.cross_attn."),
    (r"^model\.decoder\.layers\.(\d+)\.encoder_attn_layer_norm\.", r"decoder_layers.\1.res_cross.norm."),
    (r"^model\.decoder\.layers\.(\d+)\.fc1\.", r"decoder_layers.\1.ff.net.0."),
    (r"^model\.decoder\.layers\.(\d+)\.fc2\.", r"decoder_layers.\1.ff.net.3."),
    (r"^model\.decoder\.layers\.(\d+)\.final_layer_norm\.", r"decoder_layers.\1.res_ff.norm."),
    (r"^model\.encoder\.layer_norm\.", "encoder_norm."),
    (r"^model\.decoder\.layer_norm\.", "decoder_norm."),
    (r"^model\.encoder\.layernorm_embedding\.", "encoder_embed_norm."),
    (r"^model\.decoder\.layernorm_embedding\.", "decoder_embed_norm."),
]
SKIPPED = re.compile(r"^model\.(shared|encoder\.embed_tokens|decoder\.embed_tokens|encoder\.embed_positions|decoder\.embed_positions)\.|^lm_head\.|^final_logits_bias$")


def _position_table(module: nn.Module, first: int) -> Tensor:
    """(P, D) the rows of HF's position table from position 0 on (``weights`` for fairseq's
    sinusoidal buffer, ``weight`` otherwise)."""
    table = getattr(module, "weights", None)
    if not isinstance(table, Tensor):
        table = getattr(module, "weight")  # noqa: B009 - nn.Module types attributes as Tensor | Module
    assert isinstance(table, Tensor)
    return table.detach()[first:].float()


def convert_weights(family: Family, hf_model: Any) -> tuple[dict[str, Tensor], dict[str, Any]]:
    """The attnscope state dict of ``hf_model`` in the HF vocabulary's order (renumbering is
    :mod:`attnscope.hf.vocab`'s), and the facts the config needs (``max_positions``, ``tied_output``).
    ImportFailure for a parameter no rule maps (naming it)."""
    if family.lineage == "t5":
        return t5_convert_weights(hf_model)
    base = hf_model.get_base_model() if hasattr(hf_model, "get_base_model") else hf_model.model
    encoder_embed, decoder_embed = base.encoder.embed_tokens.weight, base.decoder.embed_tokens.weight
    if encoder_embed.data_ptr() != decoder_embed.data_ptr() and not torch.equal(encoder_embed, decoder_embed):
        raise ImportFailure("encoder and decoder embeddings differ; attnscope's Transformer shares one")
    out: dict[str, Tensor] = {"embed.weight": encoder_embed.detach().float()}
    for side, stack in (("encoder", base.encoder), ("decoder", base.decoder)):
        module = stack.embed_positions
        out[f"{side}_positions"] = _position_table(module, family.first_position(module))
    max_positions = min(out["encoder_positions"].size(0), out["decoder_positions"].size(0))
    for side in ("encoder", "decoder"):
        out[f"{side}_positions"] = out[f"{side}_positions"][:max_positions].contiguous()
    unmapped = []
    for name, tensor in hf_model.state_dict().items():
        if SKIPPED.search(name):
            continue
        for pattern, replacement in LAYER_NAMES:
            if re.search(pattern, name):
                out[re.sub(pattern, replacement, name)] = tensor.detach().float()
                break
        else:
            unmapped.append(name)
    if unmapped:
        raise ImportFailure(f"parameters attnscope has no place for: {', '.join(unmapped[:5])}")
    head = hf_model.get_output_embeddings().weight
    tied = head.data_ptr() == encoder_embed.data_ptr() or torch.equal(head, encoder_embed)
    if not tied:
        out["output.weight"] = head.detach().float()
    bias = getattr(hf_model, "final_logits_bias", None)
    vocab = encoder_embed.size(0)
    out["output_bias"] = bias.detach().float().reshape(-1) if isinstance(bias, Tensor) else torch.zeros(vocab)
    return out, {"max_positions": max_positions, "tied_output": tied}
