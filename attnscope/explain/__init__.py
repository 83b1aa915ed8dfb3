"""Explanations beyond raw attention weights, from one teacher-forced pass over a given source
and target: norm-based attention (:mod:`.norm`), attention rollout (:mod:`.rollout`), ALTI+
(:mod:`.alti`) and value zeroing (:mod:`.value_zeroing`).

:func:`explain` runs the methods asked for on one sentence and says, for each method a model's
family has no definition for, why (``Explanations.unavailable``). Nothing here knows the web.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal, cast

import torch
from torch import Tensor

from attnscope.explain.alti import Alti, alti
from attnscope.explain.norm import rnn_norms, rnn_value_norms, transformer_norms, transformer_value_norms
from attnscope.explain.rollout import transformer_rollout
from attnscope.explain.trace import Trace, trace
from attnscope.explain.value_zeroing import transformer_value_zeroing
from attnscope.nn.base import Seq2Seq
from attnscope.nn.family import family_of, geometry_of
from attnscope.nn.rnn import RNNSeq2Seq
from attnscope.nn.transformer import Transformer

Method = Literal["norm", "rollout", "alti", "value_zeroing"]
METHODS: tuple[Method, ...] = ("norm", "rollout", "alti", "value_zeroing")

RNN_REASONS: dict[str, str] = {
    "rollout": (
        "rollout multiplies residual-mixed attention up a stack of layers; an RNN has one attention "
        "per kind and no residual stream of token positions to roll out"
    ),
    "alti": (
        "ALTI+ splits each layer's residual stream into one vector per input token; a GRU's "
        "recurrent state is not a sum of per-token vectors"
    ),
    "value_zeroing": (
        "value zeroing reruns a Transformer layer with one token's value vector zeroed; an RNN has "
        "no value projection or layer to rerun (its attention's context is defined by the recurrence)"
    ),
}
NO_ATTENTION = "this model has no attention (score 'none'): there are no weights to weigh by vector norms"


@dataclass
class Explanations:
    """norm: kind -> (L, H, Q, K); norm_values (with norm): kind -> (L, H, K) ‖f_h(x_j)‖; rollout, value_zeroing: kind -> (L, Q, K); alti: :class:`Alti`;
    unavailable: method -> why this model has none. Only the methods asked for are filled."""

    norm: dict[str, Tensor] | None = None
    norm_values: dict[str, Tensor] | None = None
    rollout: dict[str, Tensor] | None = None
    value_zeroing: dict[str, Tensor] | None = None
    alti: Alti | None = None
    unavailable: dict[str, str] = field(default_factory=dict)


@torch.no_grad()
def explain(model: Seq2Seq, source_ids: list[int], target_ids: list[int], *, methods: Sequence[str]) -> Explanations:
    """Run ``methods`` (each one of :data:`METHODS`) on one sentence: source ids end with EOS;
    target ids are the output tokens (usually ending with EOS). ValueError for an unknown
    method or an empty target."""
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise ValueError(f"unknown explanation method {unknown[0]!r}; choose from {', '.join(METHODS)}")
    if not target_ids:
        raise ValueError("the target has no tokens")
    found = Explanations()
    explainer = EXPLAINERS.get(family_of(model.config).explainer)
    if explainer is None:
        why = f"no explanations are defined for the {model.config.architecture} family"
        found.unavailable.update({m: why for m in methods})
        return found
    explainer(model, source_ids, target_ids, methods, found)
    return found


def _transformer(
    model: Seq2Seq, source_ids: list[int], target_ids: list[int], methods: Sequence[str], found: Explanations
) -> None:
    """Every method, from one trace of the Transformer's layers."""
    traced: Trace = trace(cast(Transformer, model), source_ids, target_ids)
    if "norm" in methods:
        found.norm = transformer_norms(traced)
        found.norm_values = transformer_value_norms(traced)
    if "rollout" in methods:
        found.rollout = transformer_rollout(traced)
    if "alti" in methods:
        found.alti = alti(traced)
    if "value_zeroing" in methods:
        found.value_zeroing = transformer_value_zeroing(cast(Transformer, model), traced)


def _recurrent(
    model: Seq2Seq, source_ids: list[int], target_ids: list[int], methods: Sequence[str], found: Explanations
) -> None:
    """Norm-based attention where the model attends; the other methods need layers it has not."""
    rnn = cast(RNNSeq2Seq, model)
    for method in methods:
        if method == "norm":
            if rnn.score is None:
                found.unavailable["norm"] = NO_ATTENTION
            else:
                found.norm = rnn_norms(rnn, source_ids, target_ids)
                found.norm_values = rnn_value_norms(rnn, source_ids)
        else:
            found.unavailable[method] = RNN_REASONS[method]


# The families' ``explainer`` (attnscope.nn.family.Family.explainer) -> how to explain their models.
Explainer = Callable[[Seq2Seq, list[int], list[int], Sequence[str], Explanations], None]
EXPLAINERS: dict[str, Explainer] = {
    "transformer": _transformer,
    "recurrent": _recurrent,
}


def applicable(model: Seq2Seq) -> tuple[Method, ...]:
    """The methods :func:`explain` computes for ``model`` (the rest come back unavailable): its
    family's (:attr:`attnscope.nn.family.Geometry.explain_methods`)."""
    computed = geometry_of(model.config).explain_methods
    return tuple(m for m in METHODS if m in computed)


__all__ = ["METHODS", "Alti", "Explanations", "Method", "applicable", "explain"]
