"""``explain`` in an answer: the registered methods of :mod:`attnscope.explain` run on the
returned (or given) target, each as the JSON fields its registry entry encodes (rounded like the
attention), ``{field: value}`` with null for every registered method's field not asked for.
Admission charges for them (:func:`attnscope.engine.limits.admit_explain`) before the request
takes a decode slot."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from attnscope.engine.schemas import Explanations
from attnscope.explain import explain
from attnscope.explain import methods as registered
from attnscope.repository import LoadedModel


def explanations(
    loaded: LoadedModel, source_ids: list[int], target_ids: list[int], *, methods: Sequence[str], decimals: int = 6
) -> Explanations:
    """The answer's ``explanations``: ``methods`` on one sentence (source ids with EOS, the
    target's ids as answered). An empty target explains nothing (every method unavailable)."""
    fields: dict[str, Any] = {f.name: None for m in registered().values() for f in m.fields}
    if not target_ids:
        reason = "the target has no tokens to explain"
        return Explanations.model_construct(**fields, unavailable={m: reason for m in methods})
    found = explain(loaded.model, source_ids, target_ids, methods=methods)
    for name, result in found.results.items():
        fields.update(registered()[name].encode(result, decimals))
    return Explanations.model_construct(**fields, unavailable=found.unavailable)
