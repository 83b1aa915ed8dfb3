"""How peaked a model's cross-attention is: the mean entropy of its attention rows.

Each row of a cross-attention matrix is a distribution over the source tokens; its entropy
``-sum_j a_j log a_j`` (nats) is 0 when one source token gets all the weight and ``log S`` when
the weight is spread evenly over S tokens. We measure it teacher-forced on the references, so
every model is scored on the same target sequences (the beam's own outputs would differ from
model to model), over every real target position (EOS included, padding excluded) and, for a
Transformer, over every layer and head. ``normalized`` divides each row's entropy by ``log S``
(0: one-hot, 1: uniform), so sentences of different lengths weigh alike.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from attnscope.translator import Translator

ENTROPY_CONVENTION = (
    "teacher-forced on the references; mean over every target position (EOS included), layer and head; nats"
)


def row_entropy(weights: Tensor) -> Tensor:
    """weights: (..., S) rows summing to one (zeros allowed) -> (...) entropy in nats (0 log 0 = 0)."""
    logs = torch.log(weights.clamp_min(torch.finfo(weights.dtype).tiny))
    return -(weights * logs).sum(-1)


def cross_attention_entropy(
    translator: Translator, pairs: Sequence[tuple[str, str]], *, batch_size: int = 64
) -> dict[str, Any] | None:
    """Mean entropy of the cross-attention rows over ``pairs`` (source, reference), or None for a
    model without cross-attention (the no-attention baseline).

    Returns ``{"mean": nats, "normalized": mean of H / log S over rows with S > 1, "rows": count}``."""
    if "cross" not in translator.loaded.config.attention_kinds:
        return None
    total = normalized_total = 0.0
    rows = normalized_rows = 0
    order = sorted(range(len(pairs)), key=lambda i: len(pairs[i][0]))
    for start in range(0, len(order), batch_size):
        batch = [pairs[i] for i in order[start : start + batch_size]]
        results = translator.align([s for s, _ in batch], [t for _, t in batch])
        for result in results:
            cross = result.hypothesis.cross  # (L, H, T, S), trimmed to the real lengths
            assert cross is not None
            entropy = row_entropy(cross.float())  # (L, H, T)
            total += float(entropy.sum())
            rows += entropy.numel()
            if cross.size(-1) > 1:
                normalized_total += float(entropy.sum()) / math.log(cross.size(-1))
                normalized_rows += entropy.numel()
    return {
        "mean": round(total / max(rows, 1), 4),
        "normalized": round(normalized_total / max(normalized_rows, 1), 4),
        "rows": rows,
    }
