"""What a decode is asked for (:class:`DecodeOptions`) and which code runs it (:class:`DecodePlan`).

The options are one frozen value that travels unchanged from the caller (the web service, the
translator, evaluation) to the decoder. The plan is decided once per decode, here, from the
options, the model and the device: greedy or beam search, the fixed-shape CUDA-graph paths,
the native search operations, whether attention rows are recorded, and which code runs each
decoder step (the model's :meth:`~attnscope.nn.base.Seq2Seq.step_path`: a native step, the layers on
prepared weights, or the layers on the modules' own). The decoders read the plan and ask nothing
else; the caller runs the decoder its ``search`` names.

Adding an option: a field of :class:`DecodeOptions` and the same key of :class:`DecodeKw` (the
typed keywords of callers that pass options by keyword; tests/decoding/test_options_keywords.py
fails until the two agree), read by the decoder that needs it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from typing import Literal, TypedDict

from torch import Tensor

from attnscope.decoding import static_greedy
from attnscope.decoding.sampling import Sampling
from attnscope.nn import native
from attnscope.nn.base import Seq2Seq, StepPath

Search = Literal["greedy", "beam"]


def _tuples(value: object) -> object:
    """Lists (of lists) as tuples, so that options are hashable and never change under a decode."""
    if isinstance(value, (list, tuple)):
        return tuple(_tuples(v) for v in value)
    return value


@dataclass(frozen=True)
class DecodeOptions:
    """What one decode is asked for.

    beam_size: 1 is greedy decoding (unless ``return_tree``). alpha: the length penalty and
    coverage_penalty GNMT's beta; None: the model's tuned ones (the translator fills them in
    from the card; the bare decoders take 0.6 and 0). need_weights: record the attention.
    max_length: one budget for all sentences or one per sentence; None: ``max_len_ratio * S +
    max_len_offset``. prefix: per sentence, target ids forced before the search. return_tree:
    also return each sentence's beam tree."""

    beam_size: int = 5
    alpha: float | None = None
    coverage_penalty: float | None = None
    need_weights: bool = True
    max_length: int | Sequence[int] | None = None
    prefix: Sequence[Sequence[int]] | None = None
    return_tree: bool = False
    max_len_ratio: float = 1.5
    max_len_offset: int = 10
    sampling: Sampling | None = None

    def __post_init__(self) -> None:
        for name in ("max_length", "prefix"):
            object.__setattr__(self, name, _tuples(getattr(self, name)))
        if self.sampling is not None and (self.beam_size != 1 or self.return_tree):
            raise ValueError("sampling draws one output: it needs beam_size 1 and no beam tree")

    @property
    def search(self) -> Search:
        """Greedy for one beam, except when the tree is asked for (beam search of size 1: the same)."""
        return "greedy" if self.beam_size == 1 and not self.return_tree else "beam"


class DecodeKw(TypedDict, total=False):
    """:class:`DecodeOptions` by keyword (``beam_search(model, src, beam_size=3)``)."""

    beam_size: int
    alpha: float | None
    coverage_penalty: float | None
    need_weights: bool
    max_length: int | Sequence[int] | None
    prefix: Sequence[Sequence[int]] | None
    return_tree: bool
    max_len_ratio: float
    max_len_offset: int
    sampling: Sampling | None


OPTION_NAMES = frozenset(f.name for f in fields(DecodeOptions))


def options_of(options: DecodeOptions | None, keywords: DecodeKw) -> DecodeOptions:
    """``options`` (default: :class:`DecodeOptions`) with the ones given by keyword replaced."""
    return replace(options or DecodeOptions(), **keywords)


@dataclass(frozen=True)
class DecodePlan:
    """Which code runs one decode, decided once by :func:`make_plan`.

    search: greedy or beam. static: in fixed shapes, each step a CUDA graph
    (:mod:`attnscope.decoding.static_greedy`, :mod:`attnscope.decoding.static_beam`: no prefix,
    stream, sampling or beam tree). record_weights: the steps return attention rows (asked
    for, or needed by beam search's coverage penalty). native_search: beam's top candidates and
    greedy's best words through the native operations (:mod:`attnscope.nn.native`, where built).
    step: the decoder step's path (:data:`~attnscope.nn.base.StepPath`), handed to the model's state
    once (``init_state``/``init_beams``), for the widest step of the decode."""

    search: Search
    static: bool = False
    record_weights: bool = True
    native_search: bool = True
    step: StepPath = "general"


def make_plan(
    model: Seq2Seq, src: Tensor, options: DecodeOptions, *, search: Search | None = None, streamed: bool = False
) -> DecodePlan:
    """The plan for decoding ``src`` (B, S) with ``options`` on ``model``: by ``search`` when the
    caller has picked its decoder, else by the options; ``streamed``: a step callback listens
    (the fixed-shape path reports no steps)."""
    search = search or options.search
    coverage = (options.coverage_penalty or 0.0) > 0
    static = (
        not streamed
        and options.sampling is None
        and not options.return_tree
        and static_greedy.applies(model, src.device, options.prefix)
    )
    record = options.need_weights or (search == "beam" and coverage)
    rows = src.size(0) * (options.beam_size if search == "beam" else 1)  # the widest step
    return DecodePlan(
        search=search, static=static, record_weights=record, native_search=native.enabled(),
        step=model.step_path(rows),
    )  # fmt: skip

