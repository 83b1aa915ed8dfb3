"""Export a shipped-layout Transformer to a Hugging Face M2M100, the family of its layout.

The shipped Transformer is pre-norm with final norms, ReLU, scaled tied embeddings and no
output bias: exactly M2M100's layer. Only its sinusoidal table differs (interleaved sin/cos
against fairseq's halves), and M2M100 computes that table instead of loading it, so the export
writes attnscope's table into the model's position buffer: the returned model (in memory)
computes what the attnscope model computes, which ``tests/hf`` checks both ways (export, then
import back). ``save_pretrained`` would not keep that buffer: saved, the positions become
fairseq's, so this is a check of the mapping, not a way to publish a model.
"""

from __future__ import annotations

from typing import Any

import torch

from attnscope.hf import ImportFailure, renamed, require_transformers
from attnscope.hf.converters.bart_lineage import LAYER_NAMES, SKIPPED
from attnscope.nn.transformer import Transformer


def to_m2m100(model: Transformer) -> Any:
    """A ``transformers`` M2M100ForConditionalGeneration (eval, float32) computing what ``model``
    computes; ImportFailure for a model not in the shipped pre-norm layout."""
    c = model.config
    if not (c.standard_layout and c.pre_norm):
        raise ImportFailure("only the shipped pre-norm layout exports (to M2M100)")
    transformers = require_transformers()
    config = transformers.M2M100Config(
        vocab_size=c.vocab_size, d_model=c.d_model, encoder_layers=c.encoder_layers, decoder_layers=c.decoder_layers,
        encoder_attention_heads=c.heads, decoder_attention_heads=c.heads, encoder_ffn_dim=c.ff_dim,
        decoder_ffn_dim=c.ff_dim, max_position_embeddings=c.max_positions, pad_token_id=c.pad_id,
        bos_token_id=c.bos_id, eos_token_id=c.eos_id, decoder_start_token_id=c.bos_id, activation_function="relu",
        scale_embedding=True, dropout=0.0, attention_dropout=0.0, activation_dropout=0.0,
        encoder_layerdrop=0.0, decoder_layerdrop=0.0, tie_word_embeddings=True,
    )  # fmt: skip
    config._attn_implementation = "eager"  # attention weights come back only from eager attention
    hf_model = transformers.M2M100ForConditionalGeneration(config).eval()
    ours = model.state_dict()
    with torch.no_grad():
        for name, tensor in hf_model.state_dict().items():
            if SKIPPED.search(name):
                continue
            if (our_name := renamed(name, LAYER_NAMES)) is not None:
                tensor.copy_(ours[our_name])
        hf_model.model.shared.weight.copy_(model.embed.weight)
        for stack in (hf_model.model.encoder, hf_model.model.decoder):
            stack.embed_tokens.weight = hf_model.model.shared.weight
            table = stack.embed_positions.weights  # (P + 2, D), position 0 at padding_idx + 1
            first = stack.embed_positions.padding_idx + 1
            rows = min(table.size(0) - first, c.max_positions)
            table[first : first + rows] = model.positions[:rows].to(table.dtype)
        hf_model.lm_head.weight = hf_model.model.shared.weight
    return hf_model
