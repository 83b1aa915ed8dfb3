"""The naive decoder the benchmark compares against: no cache, no incremental state. Every step
re-runs the model's full teacher-forced ``forward`` (encoder included) on the source and the
whole growing prefix, and keeps only its last position.

It is written as a model adapter so that the *same* greedy and beam-search code drives both the
incremental and the naive decoder: the bookkeeping is identical and the measured difference is
only the cost of recomputing instead of caching.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from attnscope.decoding import DecodeOutput, beam_search, greedy_decode
from attnscope.nn.base import Seq2Seq, StepPath
from attnscope.nn.outputs import EncoderOutput, StepOutput


@dataclass
class PrefixState:
    """prefix: (N, t) the decoder inputs so far (BOS first); nothing else is carried."""

    prefix: Tensor

    def reorder(self, indices: Tensor) -> PrefixState:
        return PrefixState(self.prefix.index_select(0, indices))


class RecomputeEverything(Seq2Seq):
    """Wraps a model; ``step`` is ``model.forward(src, whole prefix)`` and its last row."""

    def __init__(self, model: Seq2Seq) -> None:
        super().__init__()
        self.inner = model
        self.config = model.config

    def encode(self, src: Tensor, need_weights: bool = False) -> EncoderOutput:
        """Keeps the source ids (as ``memory``, (B, S, 1)) for the forward passes to come; the
        real encoder runs inside each of them. Only when weights are asked for does it run once
        here as well, for the ``encoder_self`` the decoders return with their output."""
        enc_self = self.inner.encode(src, need_weights=True).encoder_self if need_weights else None
        return EncoderOutput(
            memory=src[:, :, None], mask=self.source_mask(src), encoder_self=enc_self
        )

    def init_state(self, enc: EncoderOutput, *, path: StepPath | None = None) -> PrefixState:
        return PrefixState(enc.memory.new_empty(enc.memory.size(0), 0))

    def step(
        self, tokens: Tensor, state: PrefixState, enc: EncoderOutput, need_weights: bool = False
    ) -> tuple[StepOutput, PrefixState]:
        prefix = torch.cat([state.prefix, tokens[:, None]], dim=1)  # (N, t + 1)
        out = self.inner(enc.memory[:, :, 0], prefix, need_weights=need_weights)
        step = StepOutput(
            log_probs=torch.log_softmax(out.logits[:, -1].float(), dim=-1),
            cross=None if out.cross is None else out.cross[:, :, :, -1],  # (N, L, H, S)
            decoder_self=None if out.decoder_self is None else out.decoder_self[:, :, :, -1],
        )
        return step, PrefixState(prefix)


def naive_greedy(model: Seq2Seq, src: Tensor, **kwargs: object) -> DecodeOutput:
    """Greedy decoding that re-runs the full forward pass at every step."""
    return greedy_decode(RecomputeEverything(model), src, **kwargs)  # type: ignore[arg-type]


def naive_beam(model: Seq2Seq, src: Tensor, **kwargs: object) -> DecodeOutput:
    """Beam search that re-runs the full forward pass over every hypothesis at every step."""
    return beam_search(RecomputeEverything(model), src, **kwargs)  # type: ignore[arg-type]
