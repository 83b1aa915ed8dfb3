"""A decoder-only search's beam tree, in the encoder–decoder's shape
(:class:`attnscope.decoding.tree.SearchTree`), built from the steps the search reports.

:class:`TreeRecorder` is a :data:`~attnscope.llm.search.StepHook`: every step's ``chosen`` (the
hypotheses that go on, each with the row it extends) becomes a node under that row's node, and
every ``finished`` hypothesis a finished node. The root (step 0) is the last prompt token, which
plays ``<s>``; a what-if prefix's forced tokens are a chain under it (their log-probabilities
summed into the score), and the search's nodes hang under the chain's end. Every node's
``score`` is the summed log-probability of its whole path (prefix included); a finished
hypothesis's ``ranking`` is the search's, which counts the continuation only, as Hugging Face
``generate`` on prompt + prefix does.
:meth:`TreeRecorder.close` marks the returned output's path (``best``) and ranks the finished
hypotheses (``ranking``: the search's length-normalised score; greedy and sampling: the sum).
"""

from __future__ import annotations

from collections.abc import Sequence

from attnscope.decoding.tree import FinishedHypothesis, SearchTree
from attnscope.llm.search import SearchStep, StepHook


class TreeRecorder:
    """Builds the tree while the search runs (``recorder(step)``), passing each step on to
    ``then`` (a stream's hook) when given."""

    def __init__(self, root: int, forced: Sequence[int] = (), then: StepHook | None = None) -> None:
        self.tree = SearchTree.rooted(root)
        self.then = then
        node = 0
        for token in forced:  # log-probabilities filled in by close()
            node = self.tree.add(parent=node, token=token, logprob=0.0, score=0.0)
        self.start = node
        self.rows = [node]  # the node each live row of the next step extends
        self.done: list[tuple[int, float, float]] = []  # (node, score, ranking)

    def __call__(self, step: SearchStep) -> None:
        rows = self.rows
        for h in step.finished:
            node = self.tree.add(
                parent=rows[h.parent],
                token=h.token,
                logprob=h.logprob,
                score=h.score,
                finished=True,
            )
            self.done.append((node, h.score, h.score if h.ranking is None else h.ranking))
        self.rows = [self.tree.add(parent=rows[c.parent], token=c.token, logprob=c.logprob, score=c.score)
                     for c in step.chosen]  # fmt: skip
        if self.then is not None:
            self.then(step)

    def close(self, tokens: Sequence[int], logprobs: Sequence[float]) -> SearchTree:
        """The tree with ``best`` = the path of ``tokens`` (the returned output ids, prefix
        included; ``logprobs`` their log-probabilities, giving the prefix chain's) and its
        finished hypotheses, best first. Greedy and sampled outputs, which report no finished
        hypotheses, end at their last node, marked finished."""
        tree, score = self.tree, 0.0
        chain = tree.path(self.start)
        for index, logprob in zip(chain[1:], logprobs, strict=False):
            score += logprob
            tree.nodes[index].logprob, tree.nodes[index].score = logprob, score
        # the search's nodes (added after the chain): the continuation's sum, + the prefix's
        for later in tree.nodes[len(chain) :]:
            later.score += score
        self.done = [(n, s + score, r) for n, s, r in self.done]
        path = [self._ends(n) for n, _, _ in self.done]
        matching = [d for d, p in zip(self.done, path, strict=True) if p == list(tokens)]
        if matching:
            end = max(matching, key=lambda d: d[2])[0]
        else:  # greedy/sampling: the last node of the chain that spells the output
            end = self.rows[0] if self.rows else len(tree.nodes) - 1
            last = tree.nodes[end]
            last.finished = True
            self.done.append((end, last.score, last.score))
        tree.best = tree.path(end)
        ranked = sorted(self.done, key=lambda d: d[2], reverse=True)
        tree.hypotheses = [
            FinishedHypothesis(node=n, tokens=self._ends(n), score=s, ranking=r)
            for n, s, r in ranked
        ]
        return tree

    def _ends(self, node: int) -> list[int]:
        """The output ids on the path to ``node`` (the root excluded)."""
        return [self.tree.nodes[i].token for i in self.tree.path(node)[1:]]
