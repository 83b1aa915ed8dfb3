"""The decoders' output: padded batch tensors in the one attention format, plus per-sentence views."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from attnscope.decoding.tree import SearchTree
from attnscope.nn.config import ModelConfig


@dataclass
class Hypothesis:
    """One sentence's result, trimmed to its real lengths.

    tokens: output ids (ends with EOS when the model produced it).
    token_logprobs: log-probability of each output token.
    encoder_self: (L, H, S, S); decoder_self: (L, H, T, T); cross: (L, H, T, S), or None.
    Decoder self-attention keys are the decoder *inputs*: BOS then ``tokens[:-1]``.
    forced_tokens: how many leading tokens were forced (a decoding ``prefix``), not chosen.
    tree: the beam search tree, when it was asked for.
    """

    tokens: list[int]
    score: float
    token_logprobs: list[float]
    encoder_self: Tensor | None
    decoder_self: Tensor | None
    cross: Tensor | None
    forced_tokens: int = 0
    tree: SearchTree | None = None


@dataclass
class DecodeOutput:
    """Batched output. tokens: (B, T) padded with pad; lengths: (B,); scores: (B,);
    token_logprobs: (B, T); attention fields (B, L, H, query, key), zero-padded, or None.
    forced_tokens: per sentence, how many leading tokens a prefix forced (None: no prefix);
    trees: per sentence, the beam tree (only when asked for)."""

    tokens: Tensor
    lengths: Tensor
    source_lengths: Tensor
    scores: Tensor
    token_logprobs: Tensor
    encoder_self: Tensor | None = None
    decoder_self: Tensor | None = None
    cross: Tensor | None = None
    forced_tokens: list[int] | None = None
    trees: list[SearchTree] | None = None

    def hypotheses(self) -> list[Hypothesis]:
        out = []
        for b in range(self.tokens.size(0)):
            t, s = int(self.lengths[b]), int(self.source_lengths[b])
            out.append(
                Hypothesis(
                    tokens=self.tokens[b, :t].tolist(),
                    score=float(self.scores[b]),
                    token_logprobs=self.token_logprobs[b, :t].tolist(),
                    encoder_self=None
                    if self.encoder_self is None
                    else self.encoder_self[b, :, :, :s, :s],
                    decoder_self=None
                    if self.decoder_self is None
                    else self.decoder_self[b, :, :, :t, :t],
                    cross=None if self.cross is None else self.cross[b, :, :, :t, :s],
                    forced_tokens=0 if self.forced_tokens is None else self.forced_tokens[b],
                    tree=None if self.trees is None else self.trees[b],
                )
            )
        return out


DEFAULT_ALPHA = 0.6  # GNMT's length penalty, when none is given


def length_penalty(length: int, alpha: float) -> float:
    """GNMT's length normaliser ``((5 + |y|) / 6) ** alpha`` (beam search ranks ``score / this``)."""
    return ((5.0 + length) / 6.0) ** alpha


def never_emit(log_probs: Tensor, pad_id: int, bos_id: int, *, inplace: bool = False) -> Tensor:
    """log_probs: (N, V) -> a copy (or, with ``inplace``, the same tensor: the decoders own their
    step's output, and copying (N, V) every step costs) where padding and BOS can never be chosen.
    The other entries keep the model's own log-probabilities, so teacher-forced scoring
    reproduces them."""
    out = log_probs if inplace else log_probs.clone()
    out[:, pad_id] = float("-inf")  # two column fills: no index tensor built every step
    out[:, bos_id] = float("-inf")
    return out


def target_budgets(source_lengths: Sequence[int], ratio: float, offset: int, cap: int | None) -> list[int]:
    """Each sentence's decoding budget: ``ratio * its source length + offset`` tokens, at most
    ``cap``. Per sentence, so that a sentence decodes the same alone and in any batch."""
    budgets = [math.ceil(int(n) * ratio) + offset for n in source_lengths]
    return [max(1, min(b, cap) if cap is not None else b) for b in budgets]


def max_target_length(source_lengths: Tensor, ratio: float, offset: int, cap: int | None) -> int:
    """One budget for a whole batch, the longest of :func:`target_budgets` (the peers in
    ``bench/peers.py`` take a single one)."""
    return max(target_budgets(source_lengths.tolist(), ratio, offset, cap))


def check_prefixes(
    prefix: Sequence[Sequence[int]] | None, batch: int, config: ModelConfig
) -> list[list[int]]:
    """Validate the forced target prefixes (one list of ids per sentence, possibly empty).
    They may not contain padding, ``<s>`` or ``</s>``: a prefix is the start of a translation."""
    if prefix is None:
        return [[] for _ in range(batch)]
    if len(prefix) != batch:
        raise ValueError(f"got {len(prefix)} prefixes for {batch} sentences")
    banned = {config.pad_id, config.bos_id, config.eos_id}
    rows = [list(map(int, p)) for p in prefix]
    for row in rows:
        for token in row:
            if token in banned or not 0 <= token < config.vocab_size:
                raise ValueError(f"prefix token {token} is not an ordinary target token")
    return rows


def plan_decoding(
    config: ModelConfig,
    src: Tensor,
    prefix: Sequence[Sequence[int]] | None,
    *,
    ratio: float,
    offset: int,
    max_length: int | Sequence[int] | None,
) -> tuple[list[list[int]], list[int]]:
    """src: (B, S) padded source ids. Returns the checked prefixes (:func:`check_prefixes`) and
    how many steps each sentence may decode: ``max_length`` when given (one number for all, or
    one per sentence: a batch of requests with budgets of their own), else ``ratio * S + offset``
    with S each sentence's own source length (so its output does not depend on its batch mates);
    a prefix longer than that default gets ``offset`` more tokens after it to finish in."""
    batch = src.size(0)
    prefixes = check_prefixes(prefix, batch, config)
    if max_length:
        limits = [int(max_length)] * batch if isinstance(max_length, int) else [int(n) for n in max_length]
        if len(limits) != batch or min(limits) < 1:
            raise ValueError(f"max_length needs {batch} positive lengths, got {max_length!r}")
        for p, n in zip(prefixes, limits, strict=True):
            if len(p) >= n:
                raise ValueError(f"a prefix of {len(p)} tokens leaves no room within max_length={n}")
        return prefixes, limits
    defaults = target_budgets(src.ne(config.pad_id).sum(1).tolist(), ratio, offset, None)
    return prefixes, [max(n, len(p) + max(offset, 1)) for n, p in zip(defaults, prefixes, strict=True)]


class DecodeStopped(RuntimeError):
    """A decoder's ``should_stop`` answered True (its client left, its deadline passed)."""


def check_stop(should_stop: Callable[[], bool] | None, step: int) -> None:
    """Raise DecodeStopped when ``should_stop`` says so; called before each decoder step."""
    if should_stop is not None and should_stop():
        raise DecodeStopped(f"decoding stopped before step {step}")


def stack_padded(rows: list[Tensor], length: int, pad_value: float = 0.0) -> Tensor:
    """Stack tensors (..., k_i) right-padded on the last dim to ``length``."""
    padded = [torch.nn.functional.pad(r, (0, length - r.size(-1)), value=pad_value) for r in rows]
    return torch.stack(padded)
