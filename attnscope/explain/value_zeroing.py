"""Value zeroing (Mohebbi, Zuidema, Chrupała & Alishahi 2023, "Quantifying Context Mixing in
Transformers").

How much does position i's output of layer l depend on token j? Run layer l again with token
j's value vector zeroed in every head of one attention (keys, queries and everything else left
as they were) and measure the cosine distance between position i's layer output with and without
it: 1 - cos(ỹ_i^{¬j}, y_i). Each row is then normalised to sum to 1 (a row nothing changes stays
0). The layer output is the whole layer's (attention, residual, norm and feed-forward).

* ``encoder_self``: token j's value in the encoder layer's self-attention.
* ``decoder_self``: decoder input j's value in the decoder layer's self-attention (future keys
  are masked, so they come out 0).
* ``cross``: encoder output j's value in the decoder layer's cross-attention.

One batched run of the layer per layer and kind: 1 + K copies of the sentence, copy 1 + j with
token j zeroed (copy 0 untouched, so both outputs come from the same products). Answers are ``{kind: (L, Q, K)}``.
"""

from __future__ import annotations

from typing import cast

import torch
from torch import Tensor

from attnscope.explain.registry import (
    AnswerField,
    Draw,
    ExplainMethod,
    Sentence,
    Size,
    kinds_json,
    per_kind,
    register,
)
from attnscope.explain.trace import Trace, decoder_layer, encoder_layer
from attnscope.nn.decoder_only import DecoderOnlyLM, Layer, run_catching_inputs
from attnscope.nn.layers import DecoderLayer, EncoderLayer
from attnscope.nn.transformer import Transformer


def distances(outputs: Tensor, dtype: torch.dtype = torch.float32) -> Tensor:
    """outputs: (1 + K, Q, D), copy 0 untouched and copy 1 + j with token j's value zeroed ->
    (Q, K) normalised cosine distances (rows summing to 1, or 0 where nothing changed; a
    distance under 1e-6 is float rounding and counts as none), computed in ``dtype``."""
    original, zeroed = outputs[:1].to(dtype), outputs[1:].to(dtype)
    cos = torch.nn.functional.cosine_similarity(zeroed, original, dim=-1)  # (K, Q)
    d = (1.0 - cos).T  # (Q, K)
    d = torch.where(d > 1e-6, d, torch.zeros_like(d))
    return d / d.sum(-1, keepdim=True).clamp(min=1e-12)


def _zeroing(count: int, like: Tensor) -> Tensor:
    """(1 + count, count): row 0 keeps every value, row 1 + j every value but token j's."""
    keep = 1.0 - torch.eye(count, device=like.device, dtype=like.dtype)
    return torch.cat([torch.ones_like(keep[:1]), keep])


@torch.no_grad()
def transformer_value_zeroing(model: Transformer, trace: Trace) -> dict[str, Tensor]:
    """kind -> (L, Q, K) value zeroing of every layer of a traced sentence."""
    found: dict[str, list[Tensor]] = {"cross": [], "encoder_self": [], "decoder_self": []}
    for module, x in zip(model.encoder_layers, trace.encoder_inputs, strict=True):
        s = x.size(1)
        out, _ = encoder_layer(cast(EncoderLayer, module), x.expand(s + 1, -1, -1), _zeroing(s, x), trace.encoder_bias)
        found["encoder_self"].append(distances(out))
    memory = trace.memory
    for module, y in zip(model.decoder_layers, trace.decoder_inputs, strict=True):
        layer = cast(DecoderLayer, module)
        t, s = y.size(1), memory.size(1)
        bias = trace.decoder_bias
        out = decoder_layer(layer, y.expand(t + 1, -1, -1), memory.expand(t + 1, -1, -1), keep_self=_zeroing(t, y), bias=bias)[0]
        found["decoder_self"].append(distances(out))
        out = decoder_layer(layer, y.expand(s + 1, -1, -1), memory.expand(s + 1, -1, -1), keep_cross=_zeroing(s, y), bias=bias)[0]
        found["cross"].append(distances(out))
    return {kind: torch.stack(rows) for kind, rows in found.items()}


@torch.inference_mode()
def decoder_only_value_zeroing(sentence: Sentence) -> dict[str, Tensor]:
    """``{"cross": (L, T, S)}``: value zeroing of a decoder-only model's output rows over its source tokens: per
    layer, the layer rerun once on 1 + S copies of its input, copy 1 + j with source token j's
    value vector zeroed (every key/value head), and each output row's 1 - cos against copy 0,
    normalised over the source (:func:`distances`; the ``cross`` analogue: only source tokens
    are zeroed, as only encoder outputs are for an encoder-decoder)."""
    if sentence.source_span is None or not sentence.target_ids:
        raise ValueError("a decoder-only explanation needs the prompt's source span and an output")
    model = cast(DecoderOnlyLM, sentence.model)
    ids = [*sentence.source_ids, *sentence.target_ids][:-1]
    s0, s1 = sentence.source_span
    _, inputs = run_catching_inputs(model, list(model.layers), ids)  # each layer's input (1, n, D)
    n, first = len(ids), len(sentence.source_ids) - 1
    keep = torch.ones(1 + s1 - s0, n, 1, device=model.device)
    keep[torch.arange(1, 1 + s1 - s0), torch.arange(s0, s1)] = 0.0  # copy 1 + j: source token j zeroed
    positions = torch.arange(n, device=model.device)
    found = []
    for layer, x in zip(model.layers, inputs, strict=True):
        attn = cast(Layer, layer).attn
        hook = attn.v.register_forward_hook(lambda _m, _args, out: out * keep.to(out.dtype))
        try:
            out, _, _ = layer(x.expand(keep.size(0), -1, -1), positions, None, False)
        finally:
            hook.remove()
        found.append(distances(out[:, first:], torch.float64).float())  # (T, S); 1 - cos of close vectors needs float64
    return {"cross": torch.stack(found)}


def _cost(size: Size) -> int:
    """Each layer rerun once per token: L_e·S·(S+1) + L_d·T·(T+S+2)."""
    g, s, t = size.geometry, size.s, size.t
    return g.encoder_layers * s * (s + 1) + g.decoder_layers * t * (t + s + 2)


def _run(sentence: Sentence) -> dict[str, Tensor]:
    return transformer_value_zeroing(cast(Transformer, sentence.model), sentence.trace)


register(
    ExplainMethod(
        name="value_zeroing",
        label="value zeroing",
        long_label="value zeroing",
        paper="Mohebbi, Zuidema, Chrupała & Alishahi 2023, Quantifying Context Mixing in Transformers",
        url="https://aclanthology.org/2023.eacl-main.245/",
        help=(
            "Value zeroing (Mohebbi et al. 2023): how much a position's layer output changes when a token's "
            "value vector is zeroed; rows normalised. Per layer."
        ),
        runs={"transformer": _run, "decoder_only": decoder_only_value_zeroing},
        reasons={
            "recurrent": (
                "value zeroing reruns a Transformer layer with one token's value vector zeroed; an RNN has "
                "no value projection or layer to rerun (its attention's context is defined by the recurrence)"
            ),
        },
        fields=(
            AnswerField(
                "value_zeroing", "[layer][query][key] value zeroing of each layer; rows sum to 1 (0 where nothing changes).", per_kind(3)
            ),
        ),
        encode=lambda found, decimals: {"value_zeroing": kinds_json(found, decimals)},
        draw=Draw(field="value_zeroing"),
        cost=_cost,
        floats=lambda size: size.per_layer(),
    )
)
