"""Per-head summaries of the analysis rows, and the role each head is given.

A head's role comes from the means of its statistics over the corpus, by the first rule that
holds (thresholds are the constants below; docs/analysis.md explains them):

1. ``sink``: it puts at least :data:`SINK` of its weight on the boundary token (``</s>``; ``<s>``
   for decoder self-attention), or, in a decoder-only model, on the prompt's first token (the
   attention sink, ``sink_share``).
2. ``positional-previous`` / ``positional-same`` / ``positional-next``: self-attention only; its
   largest positional share is at least :data:`POSITIONAL` (Voita et al. 2019 call a head
   positional when it points at a neighbour in most rows).
3. ``alignment``: cross-attention with reference links, corpus alignment F1 at least :data:`ALIGNMENT`.
4. ``rare-word``: at least :data:`RARE` of its weight on the sentence's rarest source token.
5. ``mixed``: none of these.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from attnscope.alignment.links import AlignmentCounts
from attnscope.analysis.statistics import STATISTICS

SINK = 0.5
POSITIONAL = 0.5
ALIGNMENT = 0.5
RARE = 0.3
ROLES: tuple[str, ...] = (
    "sink", "positional-previous", "positional-same", "positional-next", "alignment", "rare-word", "mixed",
)  # fmt: skip
QUANTILES: tuple[float, ...] = (0.1, 0.5, 0.9)


def _value(means: Mapping[str, float | None], name: str) -> float:
    value = means.get(name)
    return -math.inf if value is None or math.isnan(value) else float(value)


def assign_role(means: Mapping[str, float | None]) -> tuple[str, float | None]:
    """(role, the statistic that decided it) from a head's mean statistics (``eos_share``,
    ``prev_share`` ..., and ``alignment_f1``, the corpus F1; None or NaN where absent)."""
    sink = max(_value(means, "eos_share"), _value(means, "sink_share"))
    if sink >= SINK:
        return "sink", sink
    positional = {"previous": "prev_share", "same": "same_share", "next": "next_share"}
    where, name = max(positional.items(), key=lambda kv: _value(means, kv[1]))
    if _value(means, name) >= POSITIONAL:
        return f"positional-{where}", _value(means, name)
    if _value(means, "alignment_f1") >= ALIGNMENT:
        return "alignment", _value(means, "alignment_f1")
    if _value(means, "rare_share") >= RARE:
        return "rare-word", _value(means, "rare_share")
    return "mixed", None


def _group_summary(columns: Mapping[str, np.ndarray], rows: np.ndarray) -> dict[str, Any]:
    """Means and quantiles of one head's rows (indices ``rows`` into ``columns``)."""
    out: dict[str, Any] = {"sentences": int(len(np.unique(columns["sentence"][rows])))}
    means: dict[str, float | None] = {}
    for name in STATISTICS:
        values = columns[name][rows].astype(np.float64)
        values = values[~np.isnan(values)]
        mean = float(values.mean()) if values.size else None
        means[name] = mean
        out[f"{name}_mean"] = mean
        for q in QUANTILES:
            out[f"{name}_q{int(q * 100)}"] = float(np.quantile(values, q)) if values.size else None
    correct = columns["align_correct"][rows]
    known = correct >= 0
    if known.any():
        counts = AlignmentCounts(
            hypothesis=int(columns["align_hypothesis"][rows][known].sum()),
            reference=int(columns["align_reference"][rows][known].sum()),
            correct=int(correct[known].sum()),
        )
        means["alignment_f1"] = counts.scores()["f1"]
    else:
        means["alignment_f1"] = None
    out["alignment_f1"] = means["alignment_f1"]
    out["role"], out["role_score"] = assign_role(means)
    return out


def summarize(columns: Mapping[str, np.ndarray]) -> list[dict[str, Any]]:
    """One summary per (kind, layer, head) of the rows (numpy columns, ``-1``/NaN for absent
    values), sorted by kind, layer, head: ``sentences``, ``<stat>_mean`` and ``<stat>_q10/50/90``
    for each statistic, the corpus ``alignment_f1`` (None without links), ``role`` and
    ``role_score``."""
    kinds, layers, heads = columns["kind"], columns["layer"], columns["head"]
    keys = sorted({(str(k), int(layer), int(h)) for k, layer, h in zip(kinds, layers, heads, strict=True)})
    out = []
    for kind, layer, head in keys:
        rows = np.flatnonzero((kinds == kind) & (layers == layer) & (heads == head))
        out.append({"kind": kind, "layer": layer, "head": head, **_group_summary(columns, rows)})
    return out
