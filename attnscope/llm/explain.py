"""Explanations of a decoder-only answer beyond the raw weights: attention rollout (Abnar &
Zuidema 2020) over the one causal stack, cut like the views (:mod:`attnscope.llm.views`).

Each layer's weights, averaged over its query heads, are mixed with the identity for the
residual, Ã_l = 0.5·Ā_l + 0.5·I, and multiplied up the stack, R_l = Ã_l · R_{l-1} (R_0 = Ã_0),
over every position the model ran (prompt + output but the last). Row i of R_l says how much of
position i after layer l came from each input token. ``target_source`` is the output rows over
the source's prompt tokens, renormalised to sum to 1; ``source_share`` is each such row's mass
on the source before renormalising (the rest came from the instruction, the first token and the
output so far). Rollout is per layer, not per head: the head average is its definition.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from attnscope.llm.views import Views

METHODS: tuple[str, ...] = ("rollout",)


def rollout(full: Tensor) -> Tensor:
    """full: (L, H, n, n) causal attention -> (L, n, n) the rollout after each layer."""
    mean = full.float().mean(1)  # (L, n, n)
    eye = torch.eye(mean.size(-1), dtype=mean.dtype, device=mean.device)
    layers, flow = [], None
    for layer in mean:
        mixed = 0.5 * layer + 0.5 * eye
        flow = mixed if flow is None else mixed @ flow
        layers.append(flow)
    return torch.stack(layers)


def explanations(views: Views, span: tuple[int, int], methods: tuple[str, ...]) -> dict[str, Any]:
    """The answer's ``explanations``: per method, ``target_source`` [L][T][S] (rows sum to 1)
    and ``source_share`` [L][T]."""
    out: dict[str, Any] = {}
    if "rollout" in methods:
        rolled = rollout(views.full)
        first, s0, s1 = views.first_target_row, span[0], span[1]
        source = rolled[:, first:, s0:s1]  # (L, T, S)
        share = source.sum(-1)
        out["rollout"] = {
            "target_source": (source / share.clamp(min=1e-12)[..., None]).tolist(),
            "source_share": share.tolist(),
        }
    return out
