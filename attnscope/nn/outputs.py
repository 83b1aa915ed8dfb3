"""Output dataclasses. Attention tensors are ``[batch, layers, heads, query, key]``."""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor


@dataclass
class EncoderOutput:
    """What the encoder hands to the decoder.

    memory: (B, S, D) encoder states the decoder attends over.
    mask: (B, S) True for real source tokens, False for padding.
    final: (B, D) a summary state used to initialise an RNN decoder (None for Transformers).
    encoder_self: (B, L, H, S, S) encoder self-attention, or None.
    """

    memory: Tensor
    mask: Tensor
    final: Tensor | None = None
    encoder_self: Tensor | None = None


@dataclass
class StepOutput:
    """One incremental decoder step for N hypotheses.

    log_probs: (N, V) next-token log-probabilities.
    cross: (N, L, H, S) cross-attention row of this step, or None.
    decoder_self: (N, L, H, t) decoder self-attention row over the t inputs so far, or None.
    """

    log_probs: Tensor
    cross: Tensor | None = None
    decoder_self: Tensor | None = None


@dataclass
class Seq2SeqOutput:
    """A teacher-forced forward pass.

    logits: (B, T, V).
    encoder_self: (B, L, H, S, S) or None; decoder_self: (B, L, H, T, T) or None;
    cross: (B, L, H, T, S) or None. Present only when weights were asked for and the model has them.
    """

    logits: Tensor
    encoder_self: Tensor | None = None
    decoder_self: Tensor | None = None
    cross: Tensor | None = None
