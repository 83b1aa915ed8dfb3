"""What the BART lineage's converters share (Marian, M2M100/NLLB, BART, mBART): one layer and
one set of parameter names; the model types differ in norm position, embedding norm, final
norms and where their position table starts, which :class:`BartLineage` takes as arguments.

Encoder and decoder may differ in heads, feed-forward width and depth (all valid Hugging Face
configs): the converted :class:`~attnscope.nn.config.TransformerConfig` carries per-stack sizes.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from attnscope.hf import ImportFailure, renamed_state
from attnscope.hf.converters import Converter

ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "gelu_new": "gelu_new", "swish": "silu", "silu": "silu"}


def first_learned(module: nn.Module) -> int:
    """A learned table (BART's offset of 2, Marian's none): position 0 is row ``offset``."""
    return int(getattr(module, "offset", 0))


def first_padded(module: nn.Module) -> int:
    """fairseq's sinusoidal table: position ids count from ``padding_idx + 1``."""
    return int(getattr(module, "padding_idx", 1)) + 1


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
SKIPPED = re.compile(
    r"^model\.(shared|encoder\.embed_tokens|decoder\.embed_tokens|encoder\.embed_positions|decoder\.embed_positions)\."
    r"|^lm_head\.|^final_logits_bias$"
)


class BartLineage(Converter):
    """A BART-like model type: ``pre_norm`` layers or not, a norm after the embeddings
    (``embedding_norm``), norms after each stack (``final_norm``), and ``first_position``: the
    row of the original's position table for position 0."""

    def __init__(
        self,
        *,
        pre_norm: bool,
        embedding_norm: bool,
        final_norm: bool,
        first_position: Callable[[nn.Module], int] = first_learned,
    ) -> None:
        self.pre_norm, self.embedding_norm, self.final_norm = pre_norm, embedding_norm, final_norm
        self.first_position = first_position

    def config_fields(self, hf_config: Any, max_positions: int) -> dict[str, Any]:
        c = hf_config
        activation = ACTIVATIONS.get(str(c.activation_function))
        if activation is None:
            raise ImportFailure(
                f"activation {c.activation_function!r} is not one attnscope has ({', '.join(ACTIVATIONS)})"
            )
        if getattr(c, "share_encoder_decoder_embeddings", True) is False:
            raise ImportFailure("separate encoder and decoder vocabularies; attnscope's Transformer shares one")
        for side in ("encoder", "decoder"):
            heads = int(getattr(c, f"{side}_attention_heads"))
            if c.d_model % heads:
                raise ImportFailure(f"d_model {c.d_model} is not divisible by the {side}'s {heads} heads")
        return dict(
            d_model=c.d_model,
            heads=c.encoder_attention_heads,
            decoder_heads=c.decoder_attention_heads,
            ff_dim=c.encoder_ffn_dim,
            decoder_ff_dim=c.decoder_ffn_dim,
            encoder_layers=c.encoder_layers,
            decoder_layers=c.decoder_layers,
            pre_norm=self.pre_norm,
            max_positions=max_positions,
            dropout=0.0,
            activation=activation,
            scale_embedding=bool(getattr(c, "scale_embedding", False)),
            positions="learned",
            embedding_norm=self.embedding_norm,
            final_norm=self.final_norm,
            output_bias=True,
        )

    def convert_weights(self, hf_model: Any) -> tuple[dict[str, Tensor], dict[str, Any]]:
        base = hf_model.get_base_model() if hasattr(hf_model, "get_base_model") else hf_model.model
        encoder_embed, decoder_embed = base.encoder.embed_tokens.weight, base.decoder.embed_tokens.weight
        if encoder_embed.data_ptr() != decoder_embed.data_ptr() and not torch.equal(encoder_embed, decoder_embed):
            raise ImportFailure("encoder and decoder embeddings differ; attnscope's Transformer shares one")
        out: dict[str, Tensor] = {"embed.weight": encoder_embed.detach().float()}
        for side, stack in (("encoder", base.encoder), ("decoder", base.decoder)):
            module = stack.embed_positions
            out[f"{side}_positions"] = _position_table(module, self.first_position(module))
        max_positions = min(out["encoder_positions"].size(0), out["decoder_positions"].size(0))
        for side in ("encoder", "decoder"):
            out[f"{side}_positions"] = out[f"{side}_positions"][:max_positions].contiguous()
        kept = {name: t for name, t in hf_model.state_dict().items() if not SKIPPED.search(name)}
        layers, unmapped = renamed_state(kept, LAYER_NAMES)
        out.update(layers)
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


def _position_table(module: nn.Module, first: int) -> Tensor:
    """(P, D) the rows of HF's position table from position 0 on (``weights`` for fairseq's
    sinusoidal buffer, ``weight`` otherwise)."""
    table = getattr(module, "weights", None)
    if not isinstance(table, Tensor):
        table = getattr(module, "weight")  # noqa: B009 - nn.Module types attributes as Tensor | Module
    assert isinstance(table, Tensor)
    return table.detach()[first:].float()
