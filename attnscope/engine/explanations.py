"""``explain`` in an answer: the methods of :mod:`attnscope.explain` run on the returned (or given)
target, as JSON-ready nested lists rounded like the attention. Admission charges for them
(:func:`attnscope.engine.limits.admit_explain`) before the request takes a decode slot."""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import torch

from attnscope.engine.schemas import AltiExplanation, AttentionKind, ExplainMethod, Explanations
from attnscope.explain import explain
from attnscope.repository import LoadedModel


def _lists(t: torch.Tensor, decimals: int) -> list:
    """Any tensor -> nested lists of floats rounded to ``decimals``."""
    values: list = t.detach().to("cpu", torch.float64).round(decimals=decimals).tolist()
    return values


def _kinds(found: dict[str, torch.Tensor] | None, decimals: int) -> dict[AttentionKind, list] | None:
    if found is None:
        return None
    return {cast(AttentionKind, kind): _lists(m, decimals) for kind, m in found.items()}


def explanations(
    loaded: LoadedModel, source_ids: list[int], target_ids: list[int], *, methods: Sequence[str], decimals: int = 6
) -> Explanations:
    """The answer's ``explanations``: ``methods`` on one sentence (source ids with EOS, the
    target's ids as answered). An empty target explains nothing (every method unavailable)."""
    if not target_ids:
        reason = "the target has no tokens to explain"
        return Explanations.model_construct(unavailable={cast(ExplainMethod, m): reason for m in methods})
    found = explain(loaded.model, source_ids, target_ids, methods=methods)
    alti = None
    if found.alti is not None:
        alti = AltiExplanation.model_construct(
            source=_lists(found.alti.source, decimals),
            target=_lists(found.alti.target, decimals),
            source_share=_lists(found.alti.source_share, decimals),
            encoder=_lists(found.alti.encoder, decimals),
        )
    return Explanations.model_construct(
        norm=_kinds(found.norm, decimals),
        norm_values=_kinds(found.norm_values, decimals),
        rollout=_kinds(found.rollout, decimals),
        value_zeroing=_kinds(found.value_zeroing, decimals),
        alti=alti,
        unavailable={cast(ExplainMethod, m): why for m, why in found.unavailable.items()},
    )
