"""Norm-based attention (Kobayashi, Kuribayashi, Yokoi & Inui 2020, "Attention is Not Only a
Weight: Analyzing Transformers with Vector Norms").

An attention head's output at query i is Σ_j α_ij f(x_j): the weight only says how much of the
vector f(x_j) is taken, not how large that vector is. The norm ‖α_ij f(x_j)‖ = α_ij ‖f(x_j)‖ is
what token j actually moves to position i.

* Transformer: per head, f_h(x) = (x W_V^h + b_V^h) W_O^h with x_j the vector the value
  projection reads (the layer-normed stream of a pre-norm layer; the encoder memory for
  cross-attention) and W_O^h the head's rows of the output projection.
* RNN cross-attention: the context c_t = Σ_j α_tj h_j reaches the output layer
  tanh(W [s_t; c_t; y_{t-1}] + b) through W's context columns W_c, so f(h_j) = W_c h_j.
* Self-attentive RNN encoder: c_t = Σ_i α_ti h_i enters the next state through the cell's
  context columns A_c (h_{t+1} = tanh(A [x_{t+1}; c_t] + b)), so f(h_i) = A_c h_i.

Every answer has the shape of the weights: ``{kind: (L, H, Q, K)}``; the sizes ‖f(x_j)‖ alone,
the same for every query, come as ``{kind: (L, H, K)}`` (:func:`transformer_value_norms`,
:func:`rnn_value_norms`) so a reader sees why a high weight on a short vector moves little.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import torch
from torch import Tensor

from attnscope.explain.decoder_only import teacher_forced
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
from attnscope.explain.trace import Block, Trace, transformed, weight_of
from attnscope.llm.explain import source_norms
from attnscope.nn.ablation import is_off
from attnscope.nn.family import geometry_of
from attnscope.nn.rnn import RNNSeq2Seq
from attnscope.nn.self_attentive import SelfAttentiveEncoder


def block_sizes(block: Block) -> Tensor:
    """(H, K) ‖f_h(x_j)‖ of one attention sublayer (first copy of the batch)."""
    return transformed(block)[0].norm(dim=-1)


def block_norms(block: Block) -> Tensor:
    """(H, Q, K) ‖α_ij f_h(x_j)‖ of one attention sublayer (first copy of the batch)."""
    return block.weights[0].float() * block_sizes(block)[:, None, :]


def transformer_value_norms(trace: Trace) -> dict[str, Tensor]:
    """kind -> (L, H, K) ‖f_h(x_j)‖ of every layer, head and key."""
    return {
        "cross": torch.stack([block_sizes(b) for b in trace.cross]),
        "encoder_self": torch.stack([block_sizes(b) for b in trace.encoder]),
        "decoder_self": torch.stack([block_sizes(b) for b in trace.decoder_self]),
    }


def transformer_norms(trace: Trace) -> dict[str, Tensor]:
    """kind -> (L, H, Q, K) norm-based attention of every layer and head."""
    return {
        "cross": torch.stack([block_norms(b) for b in trace.cross]),
        "encoder_self": torch.stack([block_norms(b) for b in trace.encoder]),
        "decoder_self": torch.stack([block_norms(b) for b in trace.decoder_self]),
    }


@torch.no_grad()
def rnn_value_norms(model: RNNSeq2Seq, source_ids: list[int]) -> dict[str, Tensor]:
    """kind -> (1, 1, S) ‖f(h_j)‖ of each source state for each attention an RNN model has."""
    c = model.config
    memory = model.encode(torch.tensor([source_ids], device=model.device)).memory[0].float()  # (S, H)
    found: dict[str, Tensor] = {}
    if model.score is not None:
        h = c.hidden_dim
        w_c = weight_of(model.pre_output)[:, h : 2 * h]  # (E, H) the context's columns
        sizes = (memory @ w_c.T).norm(dim=-1)  # (S,)
        found["cross"] = torch.zeros_like(sizes) if is_off(model.score) else sizes
    if "encoder_self" in geometry_of(c).kinds:  # the self-attentive encoder
        encoder = cast(SelfAttentiveEncoder, model.encoder)
        a_c = weight_of(encoder.cell)[:, c.emb_dim :]  # (H, H) the context's columns
        sizes = (memory @ a_c.T).norm(dim=-1)  # (S,)
        found["encoder_self"] = torch.zeros_like(sizes) if is_off(encoder.align) else sizes
    return {kind: sizes[None, None] for kind, sizes in found.items()}


@torch.no_grad()
def rnn_norms(model: RNNSeq2Seq, source_ids: list[int], target_ids: list[int]) -> dict[str, Tensor]:
    """kind -> (1, 1, Q, K) for each attention an RNN model has (none for ``score`` "none")."""
    c, device = model.config, model.device
    src = torch.tensor([source_ids], device=device)
    tgt_in = torch.tensor([[c.bos_id, *target_ids[:-1]]], device=device)
    out = model(src, tgt_in, need_weights=True)
    sizes = rnn_value_norms(model, source_ids)
    found: dict[str, Tensor] = {}
    if out.cross is not None and "cross" in sizes:
        found["cross"] = out.cross[0].float() * sizes["cross"][0, 0]  # (1, 1, T, S)
    if out.encoder_self is not None and "encoder_self" in sizes:
        found["encoder_self"] = out.encoder_self[0].float() * sizes["encoder_self"][0, 0]  # (1, 1, S, S)
    return found


@dataclass(frozen=True)
class Norms:
    """weighted: kind -> (L, H, Q, K) ‖α_ij f_h(x_j)‖; values: kind -> (L, H, K) ‖f_h(x_j)‖."""

    weighted: dict[str, Tensor]
    values: dict[str, Tensor]


def _rnn(sentence: Sentence) -> Norms:
    rnn = cast(RNNSeq2Seq, sentence.model)
    return Norms(rnn_norms(rnn, sentence.source_ids, sentence.target_ids), rnn_value_norms(rnn, sentence.source_ids))


def _value_floats(size: Size) -> int:
    g, s, t = size.geometry, size.s, size.t
    decoder = g.decoder_layers * g.heads_of("cross")
    values = {"cross": decoder * s, "decoder_self": decoder * t, "encoder_self": g.encoder_layers * g.heads_of("encoder_self") * s}
    return sum(size.attention().values()) + sum(values[kind] for kind in g.kinds)


def _decoder_only(sentence: Sentence) -> Norms:
    """A decoder-only model's norm per query head, cut to output × source like its ``cross`` kind."""
    views, model, ids = teacher_forced(sentence)
    weighted, sizes = source_norms(views, sentence.source_span or (0, 0), model, ids)
    return Norms({"cross": weighted}, {"cross": sizes})


NO_ATTENTION = "this model has no attention (score 'none'): there are no weights to weigh by vector norms"

register(
    ExplainMethod(
        name="norm",
        label="norm",
        long_label="norm ‖α f(x)‖",
        paper="Kobayashi, Kuribayashi, Yokoi & Inui 2020, Attention is Not Only a Weight: Analyzing Transformers with Vector Norms",
        url="https://aclanthology.org/2020.emnlp-main.574/",
        help=(
            "Norm-based attention ‖α f(x)‖ (Kobayashi et al. 2020): how much each token moves, not only how "
            "much weight it gets; rows rescaled to sum to 1."
        ),
        runs={
            "transformer": lambda sentence: Norms(transformer_norms(sentence.trace), transformer_value_norms(sentence.trace)),
            "recurrent": _rnn,
            "decoder_only": _decoder_only,
        },
        unavailable=lambda config: NO_ATTENTION if getattr(config, "score", None) == "none" else None,
        fields=(
            AnswerField("norm", "[layer][head][query][key] ‖α_ij f_h(x_j)‖, the shape of `attention`.", per_kind(4)),
            AnswerField(
                "norm_values",
                "With `norm`: [layer][head][key] ‖f_h(x_j)‖, the size of the vector each key moves (the same for every query).",
                per_kind(3),
            ),
        ),
        encode=lambda found, decimals: {"norm": kinds_json(found.weighted, decimals), "norm_values": kinds_json(found.values, decimals)},
        draw=Draw(field="norm", per="head", normalise=True),
        floats=_value_floats,
    )
)
