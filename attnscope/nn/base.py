"""The interface every sequence-to-sequence model implements, and its decoder state."""

from __future__ import annotations

from typing import Any, Literal, Protocol

import torch
from torch import Tensor, nn

from attnscope.nn.config import ModelConfig
from attnscope.nn.outputs import EncoderOutput, Seq2SeqOutput, StepOutput

StepPath = Literal["native", "prepared", "general"]
"""Which code runs a decoder step, chosen once per decode (:meth:`Seq2Seq.step_path`): one native
operation, the layers on weights prepared for decoding, or the layers on the modules' own."""


class DecoderState(Protocol):
    """Everything a decoder carries between steps (RNN hidden state or key/value caches)."""

    def reorder(self, indices: Tensor) -> DecoderState:
        """A new state whose row ``i`` is this state's row ``indices[i]`` (indices: (N,))."""
        ...


def reorder_encoder(enc: EncoderOutput, indices: Tensor) -> EncoderOutput:
    """Select rows of an encoder output (e.g. to expand each sentence into beams)."""
    return EncoderOutput(
        memory=enc.memory.index_select(0, indices),
        mask=enc.mask.index_select(0, indices),
        final=None if enc.final is None else enc.final.index_select(0, indices),
        encoder_self=None if enc.encoder_self is None else enc.encoder_self.index_select(0, indices),
    )


class Seq2Seq(nn.Module):
    """Base class. Subclasses implement :meth:`encode`, :meth:`init_state` and :meth:`step`;
    :meth:`forward` is the teacher-forced pass over a whole target."""

    config: ModelConfig

    def source_mask(self, src: Tensor) -> Tensor:
        """src: (B, S) token ids -> (B, S) True where the token is not padding."""
        return src.ne(self.config.pad_id)

    def encode(self, src: Tensor, need_weights: bool = False) -> EncoderOutput:
        """src: (B, S) token ids, padded with ``pad_id``."""
        raise NotImplementedError

    def init_state(self, enc: EncoderOutput, *, path: StepPath | None = None) -> DecoderState:
        """The decoder state for ``enc``, its steps on ``path`` (:meth:`step_path`'s by default)."""
        raise NotImplementedError

    def step_path(self, rows: int) -> StepPath:
        """Which step decodes ``rows`` rows (the decode plan asks once per decode): by default
        the model's only one, its layers."""
        return "general"

    def init_beams(
        self, enc: EncoderOutput, beam_size: int, *, path: StepPath | None = None
    ) -> tuple[EncoderOutput, DecoderState]:
        """The state of ``beam_size`` rows per sentence (rows ``b*k .. b*k+k-1`` are sentence
        ``b``'s) and the encoder output to give :meth:`step` with it. By default each row gets
        its own copy of its sentence's encoder rows; a model whose state shares them across a
        sentence's rows returns one row per sentence instead."""
        batch = enc.mask.size(0)
        beams = torch.arange(batch, device=enc.mask.device).repeat_interleave(beam_size)
        rows = reorder_encoder(self.step_inputs(enc), beams)
        return rows, self.init_state(rows, path=path)

    def expand_beams(
        self, enc: EncoderOutput, state: DecoderState, indices: Tensor, beam_size: int
    ) -> tuple[EncoderOutput, DecoderState]:
        """From one row per sentence (:meth:`init_beams` with ``beam_size`` 1, after the first
        step) to ``beam_size`` rows per sentence: ``indices`` (M * beam_size,) gives each new
        row's row of the old state, each group of ``beam_size`` consecutive ones from one
        sentence (M <= the old rows: sentences that have finished are left out). Returns what
        :meth:`init_beams` with ``beam_size`` would have, one step further. By default both the
        encoder rows and the state are re-indexed row by row."""
        return reorder_encoder(enc, indices), state.reorder(indices)

    def step_inputs(self, enc: EncoderOutput) -> EncoderOutput:
        """The part of ``enc`` that :meth:`step` reads: the decoders carry only this from step to
        step, and re-index it whenever rows leave (a finished sentence, beam search's choice of
        parents). No step reads the encoder self-attention; copying it (B, L, H, S, S) at each
        re-indexing was a tenth of a batch's greedy decoding time."""
        return EncoderOutput(memory=enc.memory, mask=enc.mask, final=enc.final)

    def step(
        self, tokens: Tensor, state: Any, enc: EncoderOutput, need_weights: bool = False
    ) -> tuple[StepOutput, DecoderState]:
        """tokens: (N,) the previous output token of each hypothesis; ``state`` is the
        :class:`DecoderState` of this model's own kind (from :meth:`init_state` or ``step``)."""
        raise NotImplementedError

    def forward(self, src: Tensor, tgt_in: Tensor, need_weights: bool = False) -> Seq2SeqOutput:
        """src: (B, S); tgt_in: (B, T) decoder inputs (BOS + target). Returns logits (B, T, V)."""
        raise NotImplementedError

    @property
    def num_parameters(self) -> int:
        """Distinct parameters (tied weights counted once)."""
        return sum(p.numel() for p in self.parameters())

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device
