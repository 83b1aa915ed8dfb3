"""Attention rollout (Abnar & Zuidema 2020, "Quantifying Attention Flow in Transformers").

Each layer's weights, averaged over heads, are mixed with the identity for the residual
connection, Ã = 0.5·Ā + 0.5·I, and multiplied up the stack: rollout_l = Ã_l · rollout_{l-1},
so row i of layer l says how much of position i after layer l came from each input token.

* ``encoder_self``: the encoder stack, over source tokens.
* ``decoder_self``: the decoder self-attentions alone, over the decoder's input tokens.
* ``cross``: the decoder as a graph over source and target tokens together. A decoder position
  starts as itself, R_0 = [0 | I]; a self-attention sublayer mixes R ← Ã_self R, and a
  cross-attention sublayer R ← 0.5·R + 0.5·Ā_cross [E | 0], where E is the encoder's full
  rollout (what each encoder output is made of). ``cross`` at layer l is the source part of R
  after layer l, renormalised so each row sums to 1 (its mass before renormalising is the
  position's source share, which the ``alti`` method reports in its own terms).

Every answer is ``{kind: (L, Q, K)}``; every row sums to 1.
"""

from __future__ import annotations

import torch
from torch import Tensor

from attnscope.explain.decoder_only import teacher_forced
from attnscope.explain.registry import (
    AnswerField,
    Draw,
    ExplainMethod,
    Sentence,
    kinds_json,
    per_kind,
    register,
)
from attnscope.explain.trace import Block, Trace
from attnscope.llm.explain import source_rollout


def mixed(block: Block) -> Tensor:
    """(Q, Q) 0.5·Ā + 0.5·I of a self-attention sublayer (first copy of the batch)."""
    mean = block.weights[0].float().mean(0)  # (Q, K)
    return 0.5 * mean + 0.5 * torch.eye(mean.size(0), device=mean.device)


def stack_rollout(blocks: list[Block]) -> Tensor:
    """(L, Q, Q) the rollout after each layer of a self-attention stack."""
    rows, flow = [], None
    for block in blocks:
        layer = mixed(block)
        flow = layer if flow is None else layer @ flow
        rows.append(flow)
    return torch.stack(rows)


def cross_rollout(trace: Trace, encoder: Tensor) -> Tensor:
    """(L, T, S) the source part of the joint decoder rollout (module docstring), rows
    renormalised. encoder: (S, S) the encoder's full rollout."""
    length, sources = trace.decoder_self[0].weights.size(-1), encoder.size(0)
    flow = torch.cat([encoder.new_zeros(length, sources), torch.eye(length, device=encoder.device)], dim=1)
    layers = []
    for own, cross in zip(trace.decoder_self, trace.cross, strict=True):
        flow = mixed(own) @ flow
        reads = cross.weights[0].float().mean(0) @ encoder  # (T, S)
        flow = 0.5 * flow + 0.5 * torch.cat([reads, encoder.new_zeros(length, length)], dim=1)
        source = flow[:, :sources]
        layers.append(source / source.sum(-1, keepdim=True).clamp(min=1e-12))
    return torch.stack(layers)


def transformer_rollout(trace: Trace) -> dict[str, Tensor]:
    """kind -> (L, Q, K) attention rollout of every layer."""
    encoder = stack_rollout(trace.encoder)
    return {
        "cross": cross_rollout(trace, encoder[-1]),
        "encoder_self": encoder,
        "decoder_self": stack_rollout(trace.decoder_self),
    }


def decoder_only_rollout(sentence: Sentence) -> dict[str, Tensor]:
    """A decoder-only model's rollout over the one causal stack, cut to output × source (rows
    renormalised over the source) like its ``cross`` kind: ``{"cross": (L, T, S)}``."""
    views, _, _ = teacher_forced(sentence)
    return {"cross": source_rollout(views, sentence.source_span or (0, 0))[0]}


register(
    ExplainMethod(
        name="rollout",
        label="rollout",
        long_label="rollout",
        paper="Abnar & Zuidema 2020, Quantifying Attention Flow in Transformers",
        url="https://aclanthology.org/2020.acl-main.385/",
        help=(
            "Attention rollout (Abnar & Zuidema 2020): weights averaged over heads, mixed with the residual and "
            "multiplied through the layers up to this one. Per layer: every head shows the same."
        ),
        runs={"transformer": lambda sentence: transformer_rollout(sentence.trace), "decoder_only": decoder_only_rollout},
        reasons={
            "recurrent": (
                "rollout multiplies residual-mixed attention up a stack of layers; an RNN has one attention "
                "per kind and no residual stream of token positions to roll out"
            ),
        },
        fields=(AnswerField("rollout", "[layer][query][key] attention rollout after each layer; rows sum to 1.", per_kind(3)),),
        encode=lambda found, decimals: {"rollout": kinds_json(found, decimals)},
        draw=Draw(field="rollout"),
        floats=lambda size: size.per_layer(),
    )
)
