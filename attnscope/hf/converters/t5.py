"""The T5 converter (T5 and mT5) in attnscope's terms: their config and parameter names onto
:class:`~attnscope.nn.config.TransformerConfig` / :class:`~attnscope.nn.transformer.Transformer` with T5's
pieces (:mod:`attnscope.nn.t5_parts`): relative position bias (computed by layer 0 of each stack in
the original, shared by every layer; here one module per stack), RMS norms, pre-norm with
final norms, attention without 1/sqrt(d) scaling and projections without biases, a ReLU (T5) or
gated-GELU (T5 v1.1, mT5) feed-forward, no position table, unscaled embeddings, and the decoder
output times d_model**-0.5 before a tied output layer (T5's ``scale_decoder_outputs``).
"""

from __future__ import annotations

import re
from typing import Any, ClassVar

import torch
from torch import Tensor

from attnscope.hf import ImportFailure, renamed
from attnscope.hf.converters import Converter, register

MAX_POSITIONS = 512  # no position table: the limit of what attnscope decodes, T5's training length

_STACK = r"^(encoder|decoder)\.block\.(\d+)\.layer\."
T5_NAMES = [  # (HF pattern, attnscope replacement)
    (_STACK + r"0\.SelfAttention\.relative_attention_bias\.weight$", r"\1_relative.embed.weight"),
    (_STACK + r"0\.SelfAttention\.q\.", r"\1_layers.\2.self_attn.q_proj."),
    (_STACK + r"0\.SelfAttention\.k\.", r"\1_layers.\2.self_attn.k_proj."),
    (_STACK + r"0\.SelfAttention\.v\.", r"\1_layers.\2.self_attn.v_proj."),
    (_STACK + r"0\.SelfAttention\.o\.", r"\1_layers.\2.self_attn.out_proj."),
    (r"^encoder\.block\.(\d+)\.layer\.0\.layer_norm\.", r"encoder_layers.\1.res_attn.norm."),
    (r"^encoder\.block\.(\d+)\.layer\.1\.", r"encoder_layers.\1.ff@"),
    (r"^decoder\.block\.(\d+)\.layer\.0\.layer_norm\.", r"decoder_layers.\1.res_self.norm."),
    (r"^decoder\.block\.(\d+)\.layer\.1\.EncDecAttention\.q\.", r"decoder_layers.\1.cross_attn.q_proj."),
    (r"^decoder\.block\.(\d+)\.layer\.1\.EncDecAttention\.k\.", r"decoder_layers.\1.cross_attn.k_proj."),
    (r"^decoder\.block\.(\d+)\.layer\.1\.EncDecAttention\.v\.", r"decoder_layers.\1.cross_attn.v_proj."),
    (r"^decoder\.block\.(\d+)\.layer\.1\.EncDecAttention\.o\.", r"decoder_layers.\1.cross_attn.out_proj."),
    (r"^decoder\.block\.(\d+)\.layer\.1\.layer_norm\.", r"decoder_layers.\1.res_cross.norm."),
    (r"^decoder\.block\.(\d+)\.layer\.2\.", r"decoder_layers.\1.ff@"),
    (r"^(encoder|decoder)\.final_layer_norm\.", r"\1_norm."),
]
FF_NAMES = {  # the feed-forward sublayer's names after "ff@"
    "layer_norm.": "@res_ff.norm.",
    "DenseReluDense.wi.": "net.0.",
    "DenseReluDense.wi_0.": "net.0.",
    "DenseReluDense.wi_1.": "gate.",
    "DenseReluDense.wo.": "net.3.",
}
T5_SKIPPED = re.compile(r"^(shared|encoder\.embed_tokens|decoder\.embed_tokens|lm_head)\.")


class T5Converter(Converter):
    """T5 and mT5: pre-norm, final norms, no position table (a bias on the scores)."""

    model_types: ClassVar[tuple[str, ...]] = ("t5", "mt5")
    label: ClassVar[str] = "T5"

    def config_fields(self, hf_config: Any, max_positions: int) -> dict[str, Any]:
        return t5_config_fields(hf_config)

    def convert_weights(self, hf_model: Any) -> tuple[dict[str, Tensor], dict[str, Any]]:
        return t5_convert_weights(hf_model)


def t5_config_fields(hf_config: Any) -> dict[str, Any]:
    """The TransformerConfig fields (vocab_size and tied_output aside) of a T5/mT5 config."""
    c = hf_config
    activation = {"relu": "relu", "gelu_new": "gelu_new", "gelu": "gelu", "silu": "silu"}.get(str(c.dense_act_fn))
    if activation is None:
        raise ImportFailure(f"T5 feed-forward activation {c.dense_act_fn!r} is not one attnscope has")
    return dict(
        d_model=c.d_model,
        heads=c.num_heads,
        head_dim=c.d_kv,
        ff_dim=c.d_ff,
        encoder_layers=c.num_layers,
        decoder_layers=c.num_decoder_layers,
        pre_norm=True,
        final_norm=True,
        max_positions=MAX_POSITIONS,
        dropout=0.0,
        activation=activation,
        gated_ff=bool(c.is_gated_act),
        scale_embedding=False,
        positions="relative",
        relative_buckets=c.relative_attention_num_buckets,
        relative_max_distance=c.relative_attention_max_distance,
        norm="rms",
        norm_eps=float(c.layer_norm_epsilon),
        linear_bias=False,
        scale_attention=False,
        output_bias=True,  # zeros: where the renumbering's copy of pad gets its -inf
    )


def _rename(name: str) -> str | None:
    new = renamed(name, T5_NAMES)
    if new is None or "ff@" not in new:
        return new
    layer, rest = new.split("ff@")  # the feed-forward sublayer: its own names
    for prefix, ours in FF_NAMES.items():
        if rest.startswith(prefix):
            part = ours[1:] if ours.startswith("@") else "ff." + ours
            return layer + part + rest[len(prefix) :]
    return None


def t5_convert_weights(hf_model: Any) -> tuple[dict[str, Tensor], dict[str, Any]]:
    """The attnscope state dict of a T5/mT5 ``hf_model`` in its vocabulary's order, and the facts
    the config needs (``max_positions``, ``tied_output``, ``scale_output``). ImportFailure for a
    parameter no rule maps (naming it)."""
    embed = hf_model.shared.weight
    out: dict[str, Tensor] = {"embed.weight": embed.detach().float()}
    unmapped = []
    for name, tensor in hf_model.state_dict().items():
        if T5_SKIPPED.search(name):
            continue
        ours = _rename(name)
        if ours is None:
            unmapped.append(name)
        else:
            out[ours] = tensor.detach().float()
    if unmapped:
        raise ImportFailure(f"parameters attnscope has no place for: {', '.join(unmapped[:5])}")
    head = hf_model.get_output_embeddings().weight
    tied = head.data_ptr() == embed.data_ptr() or torch.equal(head, embed)
    if not tied:
        out["output.weight"] = head.detach().float()
    out["output_bias"] = torch.zeros(embed.size(0))
    return out, {"max_positions": MAX_POSITIONS, "tied_output": tied, "scale_output": _scales_output(hf_model)}


def _scales_output(hf_model: Any) -> bool:
    """Whether the original multiplies the decoder output by d_model**-0.5 before its output
    layer, measured on one token: the rule moved between transformers versions (4.x: when the
    output is tied; 5.x T5: ``scale_decoder_outputs``; 5.x mT5: never)."""
    c = hf_model.config
    ids = torch.tensor([[int(c.eos_token_id)]])
    start = torch.tensor([[int(c.decoder_start_token_id)]])
    with torch.no_grad():
        out = hf_model(input_ids=ids, decoder_input_ids=start, output_hidden_states=True)
        hidden = out.decoder_hidden_states[-1]  # (1, 1, D) after the final norm
        plain = hf_model.get_output_embeddings()(hidden)
    scaled = plain * c.d_model**-0.5
    return bool((out.logits - scaled).abs().max() < (out.logits - plain).abs().max())


register(T5Converter())
