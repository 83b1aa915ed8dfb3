"""The anatomy of a decoder-only model's attention, and its alternatives, for one answer.

One teacher-forced pass over the ids the decode ran (prompt + output but its last token) gives,
stage by stage, what every query head computed at every step (the explorer's anatomy):

* ``dot`` (L, H, n, n): q·k of the query head's query and the key of the key/value head it
  shares (grouped-query attention), *after* rotary positions (and q/k norm where the model has
  it): each layer's queries and keys are recomputed from that layer's own input, caught by a
  pre-hook, with the layer's own projections;
* ``scores`` (L, H, n, n): ``dot × scale``, then soft-capped, ``cap·tanh(x / cap)``, where the
  model caps (Gemma 2), with ``-inf`` at the keys the causal (and sliding-window) mask hides:
  ``softmax(scores)`` is the attention the model returned;
* ``logsumexp`` (L, H, n): each row's normaliser, so ``exp(score − logsumexp)`` is a weight even
  when a view shows only part of the row (the source columns of a target row: the instruction,
  the sink and the output so far share the softmax);
* ``alternatives``: per output position the model's ``top_k`` next tokens (id, log-prob), given
  the tokens before it, from the same pass.

Heads switched off by the caller (:func:`attnscope.nn.ablation.disabled_heads`) stay off: their
own scores are still those the head computed, but the layers after them read the changed stream.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import cast

import torch
from torch import Tensor

from attnscope.nn.decoder_only import (
    Attention,
    DecoderOnlyLM,
    Layer,
    causal_mask,
    run_catching_inputs,
)


@dataclass
class LLMAnatomy:
    """See the module docstring; ``scale`` and ``softcap`` are the model's (None: no cap)."""

    dot: Tensor
    scores: Tensor
    logsumexp: Tensor
    weights: Tensor
    alternatives: list[list[tuple[int, float]]]
    scale: float
    softcap: float | None


def _head_scores(attn: Attention, x: Tensor, positions: Tensor) -> tuple[Tensor, Tensor]:
    """(dot, scores), each (H, T, T), of one layer's attention on its input x (1, T, D)."""
    q, k, _ = attn._project(x, positions)  # (1, H, T, Dh), (1, KVH, T, Dh) after rotary
    group = attn.heads // attn.kv_heads
    dot = torch.matmul(q, k.repeat_interleave(group, dim=1).transpose(2, 3))[0]  # (H, T, T)
    scores = dot * attn.scale
    if attn.softcap is not None:
        scores = torch.tanh(scores / attn.softcap) * attn.softcap
    hidden = ~causal_mask(positions, x.size(1), attn.window)
    return dot.masked_fill(hidden, -math.inf), scores.masked_fill(hidden, -math.inf)


@torch.inference_mode()
def anatomy(model: DecoderOnlyLM, ids: list[int], first_row: int, *, top_k: int = 0) -> LLMAnatomy:
    """The anatomy of ``ids`` (prompt + output[:-1]); ``first_row`` = prompt − 1, the query that
    chose the first output token (alternatives are given from it on)."""
    attns = [cast(Layer, layer).attn for layer in model.layers]
    # each attention's input: the layer's normed stream
    out, inputs = run_catching_inputs(model, list(attns), ids, need_weights=True)
    positions = torch.arange(len(ids), device=model.device)
    parts = [_head_scores(attn, inputs[i], positions) for i, attn in enumerate(attns)]
    dot, scores = torch.stack([d for d, _ in parts]), torch.stack([s for _, s in parts])  # (L, H, n, n)
    alternatives: list[list[tuple[int, float]]] = []
    if top_k > 0:
        log_probs = torch.log_softmax(out.logits[0, first_row:].float(), dim=-1)
        values, found = log_probs.topk(min(top_k, log_probs.size(-1)), dim=-1)
        alternatives = [list(zip(i, v, strict=True)) for i, v in zip(found.tolist(), values.tolist(), strict=True)]
    assert out.attention is not None
    return LLMAnatomy(dot=dot, scores=scores, logsumexp=torch.logsumexp(scores.float(), dim=-1),
                      weights=out.attention[0], alternatives=alternatives, scale=float(attns[0].scale),
                      softcap=attns[0].softcap)  # fmt: skip


def rows_of(kind: str, first_row: int, outputs: int, span: tuple[int, int]) -> slice:
    """The query rows of a common kind in the full matrix (``attnscope.llm.views``)."""
    return slice(span[0], span[1]) if kind == "encoder_self" else slice(first_row, first_row + outputs)
