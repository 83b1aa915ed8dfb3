"""The anatomy of attention for one sentence: the raw scores before the softmax, the context
vectors after it, and the model's top alternatives at every target position.

A teacher-forced pass over a given source and target runs under
:func:`attnscope.nn.recording.recording`; teacher-forced attention equals the attention of decoding
(a tested property of every model), so the scores returned here are those behind the weights a
decoder produced, and ``softmax(scores[l][h][q])`` gives ``attention[l][h][q]``. Decoding itself
never pays for this: the pass runs only when a caller asks for scores or alternatives.

Shapes follow the one attention format, ``(layers, heads, query, key)``:

* Transformer: every kind is ``q·k/√d_k`` per head; an RNN model is 1 layer × 1 head.
* RNN cross-attention: the model's own score function (additive ``vᵀtanh(W_s s + W_h h)``, dot,
  scaled dot, general, query–key, concat, cosine, location) of the previous decoder state
  against every source state.
* Self-attentive RNN encoder: the additive score of each state against its own past; keys after
  the query are masked (``-inf``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from attnscope.decoding.output import never_emit
from attnscope.nn.base import Seq2Seq
from attnscope.nn.family import family_of
from attnscope.nn.recording import recording


@dataclass
class Anatomy:
    """scores: kind -> (L, H, Q, K) raw scores, ``-inf`` where a key is masked.
    contexts: (L, H, T, Dv) cross-attention context vectors c_t = Σ_i α_ti v_i (per head; for an
    RNN the weighted sum of the encoder states), or None for a model without attention.
    alternatives: per target position, the ``top_k`` most likely next tokens as (id, log-prob)."""

    scores: dict[str, Tensor]
    contexts: Tensor | None
    alternatives: list[list[tuple[int, float]]]

    @property
    def context_norms(self) -> Tensor | None:
        """(L, H, T) the Euclidean norm of each context vector."""
        return None if self.contexts is None else self.contexts.norm(dim=-1)


@torch.no_grad()
def anatomy(model: Seq2Seq, source_ids: list[int], target_ids: list[int], *, top_k: int = 0) -> Anatomy:
    """Teacher-force ``model`` on one sentence (source ids end with EOS; target ids are the output
    tokens, usually ending with EOS) and collect its scores, contexts and top-``top_k`` choices."""
    if not target_ids:
        raise ValueError("the target has no tokens")
    c, device = model.config, model.device
    src = torch.tensor([source_ids], device=device)
    tgt_in = torch.tensor([[c.bos_id, *target_ids[:-1]]], device=device)
    with recording() as recorder:
        out = model(src, tgt_in, need_weights=True)
    alternatives: list[list[tuple[int, float]]] = []
    if top_k > 0:
        log_probs = never_emit(torch.log_softmax(out.logits[0].float(), dim=-1), c.pad_id, c.bos_id)
        values, ids = log_probs.topk(min(top_k, log_probs.size(-1)), dim=-1)  # (T, k)
        alternatives = [list(zip(i, v, strict=True)) for i, v in zip(ids.tolist(), values.tolist(), strict=True)]
    scores, contexts = family_of(c).read_scores(model, recorder, len(source_ids))
    return Anatomy(scores=scores, contexts=contexts, alternatives=alternatives)

