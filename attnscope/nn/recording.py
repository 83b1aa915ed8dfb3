"""Pre-softmax attention scores and context vectors, collected on request during one pass.

Every attention computation calls :func:`record` with its raw scores, its key mask and its
context vectors. Outside :func:`recording` that is one context-variable lookup and nothing else,
so decoding stays as fast as before. Inside, the calls land in a :class:`ScoreRecorder` held by a
``ContextVar``: local to the running thread or task, never stored on a module, so two requests
sharing a model never see each other's numbers (the house rule for attention weights).

The anatomy of one attention step (``attnscope/anatomy.py``) runs a teacher-forced pass under
:func:`recording` and reads the scores back per module.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

from torch import Tensor, nn

from attnscope.nn.scores import NEG_INF


@dataclass
class ScoreRecord:
    """One attention call. scores: (..., K) raw scores with ``-inf`` at masked keys, so that
    ``softmax(scores)`` is exactly that call's weights; context: (..., Dv) the weighted sums."""

    scores: Tensor
    context: Tensor


@dataclass
class ScoreRecorder:
    """The records of one pass, per module, in call order."""

    records: dict[int, list[ScoreRecord]] = field(default_factory=dict)

    def of(self, module: nn.Module) -> list[ScoreRecord]:
        """Every call of ``module`` during the pass (empty if it never attended)."""
        return self.records.get(id(module), [])


_ACTIVE: ContextVar[ScoreRecorder | None] = ContextVar("attnscope_score_recorder", default=None)


def record(module: nn.Module, scores: Tensor, mask: Tensor | None, context: Tensor) -> None:
    """Keep ``scores`` (..., K) with masked keys set to ``-inf`` (mask: broadcastable, True where
    a key may be attended) and ``context`` (..., Dv) when a :func:`recording` is active."""
    recorder = _ACTIVE.get()
    if recorder is None:
        return
    masked = scores if mask is None else scores.masked_fill(~mask, NEG_INF)
    recorder.records.setdefault(id(module), []).append(ScoreRecord(masked.detach(), context.detach()))


def active() -> bool:
    """Whether a :func:`recording` is collecting scores in the current context."""
    return _ACTIVE.get() is not None


@contextmanager
def recording() -> Iterator[ScoreRecorder]:
    """Collect every :func:`record` call made (in this thread or task) inside the block."""
    recorder = ScoreRecorder()
    token = _ACTIVE.set(recorder)
    try:
        yield recorder
    finally:
        _ACTIVE.reset(token)
