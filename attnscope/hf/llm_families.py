"""Hugging Face decoder-only layouts -> :class:`~attnscope.nn.decoder_only.DecoderOnlyLM`.

Each model type maps its config onto :class:`~attnscope.nn.decoder_only_config.DecoderOnlyConfig`
and its parameter names onto attnscope's. The Llama lineage (llama, which covers Mistral,
TinyLlama, SmolLM, EuroLLM and Tower; mistral; qwen2; qwen3; gemma2; gemma3_text) shares one
set of names; GPT-2 has its own (fused ``c_attn``, Conv1D weights stored transposed). Rotary
frequencies are copied from the original's rotary module per layer (so any static scaling it
computed, linear, Llama 3, YaRN's factor, is taken as it is); dynamic scaling, whose
frequencies change with the length, is refused.
"""

from __future__ import annotations

import re
from typing import Any

import torch
from torch import Tensor

from attnscope.hf import ImportFailure, renamed_state

LLAMA_LINEAGE = ("llama", "mistral", "qwen2", "qwen3", "gemma2", "gemma3_text")
LLM_TYPES: tuple[str, ...] = (*LLAMA_LINEAGE, "gpt2")
GEMMA = ("gemma2", "gemma3_text")
HF_ACTIVATIONS = {"silu": "silu", "swish": "silu", "gelu_pytorch_tanh": "gelu_tanh", "gelu_new": "gelu_tanh",
                  "gelu": "gelu"}  # fmt: skip
REFUSED_ROPE = ("dynamic", "longrope")

LLAMA_NAMES = [  # (HF pattern, attnscope replacement) for the Llama lineage
    (r"^model\.embed_tokens\.weight$", "embed.weight"),
    (r"^model\.norm\.", "final_norm."),
    (r"^lm_head\.weight$", "output.weight"),
    (r"^model\.layers\.(\d+)\.self_attn\.([qkvo])_proj\.", r"layers.\1.attn.\2."),
    (r"^model\.layers\.(\d+)\.self_attn\.([qk])_norm\.", r"layers.\1.attn.\2_norm."),
    (r"^model\.layers\.(\d+)\.mlp\.(gate|up|down)_proj\.", r"layers.\1.ff.\2."),
    (r"^model\.layers\.(\d+)\.input_layernorm\.", r"layers.\1.attn_norm."),
]
PLAIN_NORMS = [(r"^model\.layers\.(\d+)\.post_attention_layernorm\.", r"layers.\1.ff_norm.")]
SANDWICH_NORMS = [
    (r"^model\.layers\.(\d+)\.post_attention_layernorm\.", r"layers.\1.post_attn_norm."),
    (r"^model\.layers\.(\d+)\.pre_feedforward_layernorm\.", r"layers.\1.ff_norm."),
    (r"^model\.layers\.(\d+)\.post_feedforward_layernorm\.", r"layers.\1.post_ff_norm."),
]
GPT2_NAMES = [
    (r"^transformer\.wte\.weight$", "embed.weight"),
    (r"^transformer\.wpe\.weight$", "positions.weight"),
    (r"^transformer\.ln_f\.", "final_norm."),
    (r"^lm_head\.weight$", "output.weight"),
    (r"^transformer\.h\.(\d+)\.ln_1\.", r"layers.\1.attn_norm."),
    (r"^transformer\.h\.(\d+)\.ln_2\.", r"layers.\1.ff_norm."),
    (r"^transformer\.h\.(\d+)\.attn\.c_proj\.", r"layers.\1.attn.o."),
    (r"^transformer\.h\.(\d+)\.mlp\.c_fc\.", r"layers.\1.ff.up."),
    (r"^transformer\.h\.(\d+)\.mlp\.c_proj\.", r"layers.\1.ff.down."),
]


def check_model_type(hf_config: Any) -> str:
    """The model type of a decoder-only config attnscope imports; ImportFailure otherwise."""
    model_type = str(getattr(hf_config, "model_type", ""))
    if model_type not in LLM_TYPES:
        raise ImportFailure(f"cannot import decoder-only model type {model_type!r}: attnscope imports {', '.join(LLM_TYPES)}")
    return model_type


def _rope_type(c: Any) -> str:
    params = getattr(c, "rope_parameters", None) or getattr(c, "rope_scaling", None) or {}
    if isinstance(params, dict) and any(isinstance(v, dict) for v in params.values()):  # per layer type
        types = {str(v.get("rope_type", "default")) for v in params.values() if isinstance(v, dict)}
        return next((t for t in types if t in REFUSED_ROPE), "default")
    return str(params.get("rope_type", params.get("type", "default"))) if isinstance(params, dict) else "default"


def _ids(hf_model: Any) -> dict[str, Any]:
    """bos / eos / pad and every stop token (the generation config's eos list where it has one)."""
    c, gen = hf_model.config, getattr(hf_model, "generation_config", None)
    eos = getattr(gen, "eos_token_id", None) if gen is not None else None
    eos = eos if eos is not None else c.eos_token_id
    stops = [int(e) for e in (eos if isinstance(eos, list) else [eos]) if e is not None]
    if not stops:
        raise ImportFailure("the model has no end-of-sequence token: a translation could not end")
    bos = c.bos_token_id if c.bos_token_id is not None else stops[0]
    pad = getattr(c, "pad_token_id", None)
    return {"bos_id": int(bos), "eos_id": stops[0], "pad_id": int(pad if pad is not None else stops[0]),
            "stop_ids": tuple(stops)}  # fmt: skip


def llm_config_fields(hf_model: Any) -> dict[str, Any]:
    """The DecoderOnlyConfig fields of ``hf_model`` (float32, loaded by transformers)."""
    c = hf_model.config
    model_type = check_model_type(c)
    if model_type == "gpt2":
        return _gpt2_fields(c) | _ids(hf_model)
    rope = _rope_type(c)
    if rope in REFUSED_ROPE:
        raise ImportFailure(f"rotary scaling {rope!r} changes with the length; attnscope imports static scalings only")
    activation = HF_ACTIVATIONS.get(str(getattr(c, "hidden_activation", None) or c.hidden_act))
    if activation is None:
        raise ImportFailure(f"activation {c.hidden_act!r} is not one attnscope has ({', '.join(HF_ACTIVATIONS)})")
    state = hf_model.state_dict()
    heads = c.num_attention_heads
    gemma = model_type in GEMMA
    layer_types = _layer_types(c, model_type)
    return dict(
        vocab_size=c.vocab_size, d_model=c.hidden_size, layers=c.num_hidden_layers, heads=heads,
        kv_heads=getattr(c, "num_key_value_heads", None) or heads,
        head_dim=getattr(c, "head_dim", None) or c.hidden_size // heads, ff_dim=c.intermediate_size,
        max_positions=c.max_position_embeddings, positions="rotary", norm="rms", norm_eps=c.rms_norm_eps,
        norm_offset=1.0 if gemma else 0.0, sandwich_norm=gemma, activation=activation, gated_ff=True,
        qkv_bias="model.layers.0.self_attn.q_proj.bias" in state,
        out_bias="model.layers.0.self_attn.o_proj.bias" in state,
        ff_bias="model.layers.0.mlp.gate_proj.bias" in state,
        qk_norm="model.layers.0.self_attn.q_norm.weight" in state,
        query_scale=float(c.query_pre_attn_scalar) ** -0.5 if gemma else None,
        sliding_window=getattr(c, "sliding_window", None) if "sliding_attention" in layer_types else None,
        layer_types=layer_types, attn_softcap=getattr(c, "attn_logit_softcapping", None),
        final_softcap=getattr(c, "final_logit_softcapping", None),
        embed_scale=float(c.hidden_size) ** 0.5 if gemma else 1.0,
    ) | _ids(hf_model)  # fmt: skip


def _layer_types(c: Any, model_type: str) -> tuple[str, ...]:
    """Per layer full or sliding attention (Mistral: every layer slides when it has a window)."""
    if model_type == "mistral":
        kind = "sliding_attention" if getattr(c, "sliding_window", None) else "full_attention"
        return (kind,) * c.num_hidden_layers
    return tuple(getattr(c, "layer_types", None) or ()) or ("full_attention",) * c.num_hidden_layers


def _gpt2_fields(c: Any) -> dict[str, Any]:
    if getattr(c, "scale_attn_by_inverse_layer_idx", False) or not getattr(c, "scale_attn_weights", True):
        raise ImportFailure("GPT-2 attention scaled by layer (or not at all) is not a layout attnscope has")
    activation = HF_ACTIVATIONS.get(str(c.activation_function))
    if activation is None:
        raise ImportFailure(f"activation {c.activation_function!r} is not one attnscope has")
    return dict(
        vocab_size=c.vocab_size, d_model=c.n_embd, layers=c.n_layer, heads=c.n_head, kv_heads=c.n_head,
        head_dim=c.n_embd // c.n_head, ff_dim=c.n_inner or 4 * c.n_embd, max_positions=c.n_positions,
        positions="learned", norm="layer", norm_eps=c.layer_norm_epsilon, activation=activation, gated_ff=False,
        qkv_bias=True, out_bias=True, ff_bias=True,
    )  # fmt: skip


def _gpt2_state(state: dict[str, Tensor], layers: int) -> tuple[dict[str, Tensor], list[str]]:
    """Conv1D weights are (in, out): transposed into Linear's (out, in); c_attn split in q, k, v."""
    state = {k: v for k, v in state.items() if not re.search(r"\.attn\.(bias|masked_bias)$", k)}
    out, unmapped = renamed_state(state, GPT2_NAMES)
    for name in list(out):
        if re.search(r"\.(attn\.o|ff\.up|ff\.down)\.weight$", name):
            out[name] = out[name].t().contiguous()
    for i in range(layers):
        weight = state[f"transformer.h.{i}.attn.c_attn.weight"].detach().float().t()  # (3D, D)
        bias = state[f"transformer.h.{i}.attn.c_attn.bias"].detach().float()
        for part, w, b in zip("qkv", weight.chunk(3, dim=0), bias.chunk(3), strict=True):
            out[f"layers.{i}.attn.{part}.weight"], out[f"layers.{i}.attn.{part}.bias"] = w.contiguous(), b.contiguous()
    return out, [n for n in unmapped if ".attn.c_attn." not in n]


def _rotary(hf_model: Any, layer_types: tuple[str, ...]) -> dict[str, Tensor]:
    """Per layer the original's rotary frequencies and cos/sin factor."""
    module = hf_model.model.rotary_emb
    out: dict[str, Tensor] = {}
    for i, kind in enumerate(layer_types):
        inv = getattr(module, f"{kind}_inv_freq", None)
        inv = inv if isinstance(inv, Tensor) else module.inv_freq
        scale = getattr(module, f"{kind}_attention_scaling", None)
        scale = scale if scale is not None else getattr(module, "attention_scaling", 1.0)
        out[f"layers.{i}.attn.inv_freq"] = inv.detach().float().clone()
        out[f"layers.{i}.attn.rope_scale"] = torch.tensor(1.0 if scale is None else float(scale))
    return out


def llm_state(hf_model: Any, fields: dict[str, Any]) -> dict[str, Tensor]:
    """The attnscope state dict of ``hf_model``; ImportFailure naming a parameter no rule maps."""
    state = dict(hf_model.state_dict())
    embed = hf_model.get_input_embeddings().weight
    head = hf_model.get_output_embeddings().weight
    tied = head.data_ptr() == embed.data_ptr() or (head.shape == embed.shape and torch.equal(head, embed))
    fields["tied_output"] = tied
    state.pop("lm_head.weight", None)
    if fields["positions"] == "learned":
        out, unmapped = _gpt2_state(state, fields["layers"])
    else:
        rules = LLAMA_NAMES + (SANDWICH_NORMS if fields["sandwich_norm"] else PLAIN_NORMS)
        out, unmapped = renamed_state(state, rules)
        out |= _rotary(hf_model, fields["layer_types"])
    if unmapped:
        raise ImportFailure(f"parameters attnscope has no place for: {', '.join(unmapped[:5])}")
    if not tied:
        out["output.weight"] = head.detach().float()
    return out
