"""The beam tree: every hypothesis beam search kept, as nodes with back-pointers.

Built only when asked for (``beam_search(..., return_tree=True)``). The root (id 0, step 0) is the
start token; a node at step ``t`` holds the ``t``-th output token, its log-probability, the
cumulative score of the path to it and whether its hypothesis finished there (with ``</s>``, or
at the length limit). Candidates that were never kept (outside the top ``beam_size``) are not
nodes; a kept node with no finished descendant is a pruned branch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class BeamNode:
    id: int
    parent: int | None
    step: int
    token: int
    logprob: float
    score: float
    finished: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "parent": self.parent,
            "step": self.step,
            "token": self.token,
            "logprob": self.logprob,
            "score": self.score,
            "finished": self.finished,
        }


@dataclass
class FinishedHypothesis:
    """A finished hypothesis: its last node, tokens, cumulative log-probability ``score`` and the
    ``ranking`` beam search sorted by (length-normalised score plus the coverage penalty)."""

    node: int
    tokens: list[int]
    score: float
    ranking: float


@dataclass
class SearchTree:
    """One sentence's search. ``best``: node ids of the returned hypothesis, root first;
    ``hypotheses``: every finished one, best first."""

    nodes: list[BeamNode] = field(default_factory=list)
    best: list[int] = field(default_factory=list)
    hypotheses: list[FinishedHypothesis] = field(default_factory=list)

    def add(
        self, *, parent: int, token: int, logprob: float, score: float, finished: bool = False
    ) -> int:
        """Append a child of node ``parent``; returns its id."""
        node = BeamNode(
            id=len(self.nodes),
            parent=parent,
            step=self.nodes[parent].step + 1,
            token=token,
            logprob=logprob,
            score=score,
            finished=finished,
        )
        self.nodes.append(node)
        return node.id

    def path(self, node: int) -> list[int]:
        """Node ids from the root to ``node``."""
        ids: list[int] = []
        current: int | None = node
        while current is not None:
            ids.append(current)
            current = self.nodes[current].parent
        return ids[::-1]

    @classmethod
    def rooted(cls, bos_id: int) -> SearchTree:
        return cls(
            nodes=[BeamNode(id=0, parent=None, step=0, token=bos_id, logprob=0.0, score=0.0)]
        )
