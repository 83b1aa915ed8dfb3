"""The explorer's additions to an answer: the beam tree, how many tokens a prefix forced, the raw
scores and context vectors behind the attention, the model's alternatives at each position, and
what the attention cost.

Scores, contexts and alternatives come from one teacher-forced pass over the returned hypothesis
(:func:`attnscope.anatomy.anatomy`), run only when asked for, so plain translation stays as fast."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, cast

import torch

from attnscope.anatomy import anatomy
from attnscope.decoding.output import Hypothesis
from attnscope.decoding.tree import SearchTree
from attnscope.engine.errors import InvalidInput
from attnscope.engine.explanations import explanations
from attnscope.engine.schemas import (
    Alternative,
    AttentionKind,
    BeamHypothesis,
    BeamNode,
    BeamTree,
    ScoreMatrix,
)
from attnscope.nn.family import geometry_of
from attnscope.repository import LoadedModel
from attnscope.text.interface import Tokenizer
from attnscope.translator import Translation, Translator


@dataclass(frozen=True)
class Extras:
    """What a request asked for beyond the translation and its attention."""

    return_beam: bool = False
    return_scores: bool = False
    alternatives: int = 0
    explain: tuple[str, ...] = ()  # methods of attnscope.explain (attnscope.engine.explanations)

    @property
    def needs_pass(self) -> bool:
        """Whether the teacher-forced pass has to run."""
        return self.return_scores or self.alternatives > 0


NO_EXTRAS = Extras()
PREFIX_ROOM = 10  # tokens a long prefix gets after it to finish in


def forced_prefixes(
    translator: Translator, prefix: str | None, budgets: list[int], *, fixed: bool, cap: int | None
) -> tuple[list[list[int]] | None, list[int]]:
    """The ``prefix`` text as target ids for each sentence (None: no prefix) and the output
    budgets to decode with, one per sentence: a prefix longer than a default budget gets room to
    finish (``PREFIX_ROOM`` more tokens, up to ``cap``) unless the caller ``fixed`` max_length.
    InvalidInput (422 on ``prefix``) when it is too long or leaves no room."""
    if prefix is None or not prefix.strip():
        return None, budgets
    try:
        ids = translator.target_ids(prefix)
    except ValueError as err:
        raise InvalidInput(("body", "prefix"), str(err)) from None
    if not fixed:
        budgets = [max(budget, len(ids) + PREFIX_ROOM) for budget in budgets]
        budgets = budgets if cap is None else [min(budget, cap) for budget in budgets]
    if len(ids) >= min(budgets):
        raise InvalidInput(
            ("body", "prefix"), f"has {len(ids)} tokens, leaving no room within the {min(budgets)}-token output budget"
        )
    return [ids] * len(budgets), budgets


def attention_cost(hyp: Hypothesis) -> dict[AttentionKind, int]:
    """Weights computed per kind: layers × heads × queries × keys of each returned matrix."""
    cost: dict[AttentionKind, int] = {}
    for kind in ("cross", "encoder_self", "decoder_self"):
        weights = getattr(hyp, kind)
        if weights is not None:
            cost[cast(AttentionKind, kind)] = math.prod(weights.shape)
    return cost


def score_matrix(scores: torch.Tensor, decimals: int = 6) -> ScoreMatrix:
    """(L, H, Q, K) raw scores -> nested lists, ``-inf`` (masked) as None."""
    rounded = scores.detach().to("cpu", torch.float64).round(decimals=decimals).tolist()
    return [[[[v if v != -math.inf else None for v in row] for row in head] for head in layer] for layer in rounded]


def beam_tree(tokenizer: Tokenizer, tree: SearchTree) -> BeamTree:
    pieces = tokenizer.pieces([node.token for node in tree.nodes])
    return BeamTree(
        nodes=[
            BeamNode(
                id=node.id,
                parent=node.parent,
                step=node.step,
                token=piece,
                token_id=node.token,
                logprob=round(node.logprob, 6),
                score=round(node.score, 6),
                finished=node.finished,
            )
            for node, piece in zip(tree.nodes, pieces, strict=True)
        ],
        best=list(tree.best),
        hypotheses=[
            BeamHypothesis(
                node=h.node,
                translation=tokenizer.decode(h.tokens),
                tokens=tokenizer.pieces(h.tokens),
                score=round(h.score, 6),
                ranking=round(h.ranking, 6),
            )
            for h in tree.hypotheses
        ],
    )


def extra_fields(loaded: LoadedModel, result: Translation, extras: Extras, decimals: int = 6) -> dict[str, Any]:
    """The answer's fields beyond the translation and its attention for ``result``: what the
    attention cost, the forced tokens and what ``extras`` asks for (explanations rounded to
    ``decimals``, as the attention)."""
    hyp = result.hypothesis
    fields: dict[str, Any] = {"attention_cost": attention_cost(hyp), "forced_tokens": hyp.forced_tokens}
    if extras.return_beam and hyp.tree is not None:
        fields["beam"] = beam_tree(loaded.tokenizer, hyp.tree)
    if extras.explain:
        fields["explanations"] = explanations(
            loaded, result.source_ids, result.target_ids, methods=extras.explain, decimals=decimals
        )
    if not extras.needs_pass or not result.target_ids:
        return fields
    found = anatomy(loaded.model, result.source_ids, result.target_ids, top_k=extras.alternatives)
    if extras.return_scores:
        fields["attention_scores"] = {cast(AttentionKind, k): score_matrix(v) for k, v in found.scores.items()}
        norms = found.context_norms
        if found.contexts is not None and norms is not None:
            fields["context_norms"] = norms.to("cpu", torch.float64).round(decimals=6).tolist()
            fields["context_vectors"] = found.contexts.to("cpu", torch.float64).round(decimals=6).tolist()
        geometry = geometry_of(loaded.config)
        fields["key_dim"] = geometry.key_dim
        fields["score_scale"] = geometry.score_scale
    if extras.alternatives:
        ids = [i for step in found.alternatives for i, _ in step]
        pieces = iter(loaded.tokenizer.pieces(ids))
        fields["alternatives"] = [
            [Alternative(token=next(pieces), token_id=i, logprob=round(lp, 6)) for i, lp in step]
            for step in found.alternatives
        ]
    return fields
