"""Explanations beyond raw attention weights, from one teacher-forced pass over a given source
and target. Each method is one module registered in :mod:`.registry` (norm-based attention
:mod:`.norm`, attention rollout :mod:`.rollout`, value zeroing :mod:`.value_zeroing`, ALTI+
:mod:`.alti`); the registry says which families each applies to, what it costs and how it runs.

:func:`explain` runs the methods asked for on one sentence and says, for each method a model's
family has no definition for, why (``Explanations.unavailable``). Nothing here knows the web.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from attnscope.explain.alti import Alti
from attnscope.explain.norm import Norms
from attnscope.explain.registry import (
    ExplainMethod,
    Sentence,
    applicable_to,
    method,
    methods,
    names,
    register,
    unregister,
)
from attnscope.nn.base import Seq2Seq
from attnscope.nn.family import family_of

Method = str  # a registered method's name (attnscope.explain.registry.names())


@dataclass
class Explanations:
    """results: method -> its result, for each method asked for that ran (norm: :class:`Norms`,
    rollout and value_zeroing: kind -> (L, Q, K), alti: :class:`Alti`; a registered method's
    own type); unavailable: method -> why this model has none."""

    results: dict[str, Any] = field(default_factory=dict)
    unavailable: dict[str, str] = field(default_factory=dict)

    def get(self, name: str) -> Any:
        """The result of ``name`` (None when it was not asked for or is unavailable)."""
        return self.results.get(name)


@torch.no_grad()
def explain(model: Seq2Seq, source_ids: list[int], target_ids: list[int], *, methods: Sequence[str]) -> Explanations:
    """Run ``methods`` (registered names, :func:`attnscope.explain.registry.names`) on one
    sentence: source ids end with EOS; target ids are the output tokens (usually ending with
    EOS). ValueError for an unknown method or an empty target. The Transformer's trace runs
    once, shared by every method that reads it."""
    chosen = [method(name) for name in methods]
    if not target_ids:
        raise ValueError("the target has no tokens")
    found = Explanations()
    sentence = Sentence(model, source_ids, target_ids)
    explainer = family_of(model.config).explainer
    for m in chosen:
        why = m.why_not(model.config)
        if why is not None:
            found.unavailable[m.name] = why
        else:
            found.results[m.name] = m.runs[explainer](sentence)
    return found


def applicable(model: Seq2Seq) -> tuple[Method, ...]:
    """The methods :func:`explain` computes for ``model`` (the rest come back unavailable)."""
    return applicable_to(model.config)


__all__ = [
    "Alti", "ExplainMethod", "Explanations", "Method", "Norms", "applicable", "explain", "method", "methods", "names",
    "register", "unregister",
]  # fmt: skip
