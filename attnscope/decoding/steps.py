"""What a decoder reports after each step, for a caller that follows a decode as it is made
(the streaming API, a player): the decoders call ``on_step(DecodeStep)`` once per step when given
one, and do nothing more when not.

A step ``t`` runs the decoder on its ``N`` live rows (row ``r`` holds sentence ``sentences[r]``;
for beam search, one of its hypotheses) and yields their attention rows for query position ``t``,
in the one format: ``cross`` (N, L, H, S), ``decoder_self`` (N, L, H, t + 1). ``encoder_self``
(B, L, H, S, S) comes with step 0 only (the encoder runs once). Then each row is extended:

- greedy: ``chosen[r]`` is row ``r``'s token; the rows of the next step are the sentences not
  finished yet, in order.
- beam: ``chosen`` lists the rows of the next step (``None`` for a dead slot, which the search
  keeps as padding), each with its ``parent`` row at this step; ``finished`` the hypotheses that
  ended at this step (their ``parent`` row emitted the token); ``ended`` the candidates kept
  by sentences that finished at this step (beam tree nodes that go no further). A hypothesis's attention at step
  ``t`` is the row it occupied at step ``t``: follow the parents back.

The callback runs in the decoder's thread between steps: what it does costs decode time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from torch import Tensor


@dataclass(frozen=True)
class Candidate:
    """A token that extends row ``parent`` of this step. ``logprob``: the token's
    log-probability; ``score``: the hypothesis's cumulative one; ``node``: its beam tree node
    (-1 without a tree); ``ranking``: the length-normalised score a finished one is ranked by."""

    parent: int
    token: int
    logprob: float
    score: float
    node: int = -1
    ranking: float | None = None


@dataclass
class DecodeStep:
    """One decoder step (see the module docstring). ``log_probs``: (N, V) the rows' next-token
    log-probabilities (pad and ``<s>`` set to -inf)."""

    step: int
    sentences: list[int]
    log_probs: Tensor
    cross: Tensor | None
    decoder_self: Tensor | None
    chosen: list[Candidate | None]
    finished: list[Candidate] = field(default_factory=list)
    ended: list[Candidate] = field(default_factory=list)
    encoder_self: Tensor | None = None
    beam: bool = False


StepCallback = Callable[[DecodeStep], None]
