"""Sampling as a decoding option of the encoder-decoder families: each output token drawn from
the model's distribution after temperature, then top-k, then top-p (the order of Hugging Face's
``generate`` and of the decoder-only search, :mod:`attnscope.llm.search`), instead of its argmax.

Reproducible: every *sentence* has its own ``torch.Generator`` seeded with ``seed``, so a
sentence's sample depends on the model, the text, the options and the device (the random streams
of CPU and CUDA differ), never on the sentences batched beside it. Temperature 0 and ``top_k`` 1
are greedy decoding exactly (the argmax, no draw). The log-probability recorded for a drawn
token is the model's own (before temperature and the cut), so scores stay comparable with
greedy and beam outputs.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class Sampling:
    """temperature >= 0 (0: argmax); top_k >= 0 (0: every token); 0 < top_p <= 1; seed >= 0."""

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.temperature < 0 or self.top_k < 0 or not 0 < self.top_p <= 1 or self.seed < 0:
            raise ValueError("sampling needs temperature >= 0, top_k >= 0, 0 < top_p <= 1 and seed >= 0")

    @property
    def greedy(self) -> bool:
        """Whether every draw is the argmax (temperature 0 or top_k 1)."""
        return self.temperature == 0 or self.top_k == 1


def generators(sampling: Sampling, sentences: int, device: torch.device) -> list[torch.Generator]:
    """One generator per sentence, each seeded with ``sampling.seed``."""
    return [torch.Generator(device=device).manual_seed(sampling.seed) for _ in range(sentences)]


def probabilities(log_probs: Tensor, sampling: Sampling) -> Tensor:
    """(N, V) log-probabilities (impossible tokens at -inf) -> (N, V) sampling probabilities
    after temperature, top-k (ties at the k-th value kept), then top-p (the smallest set of most
    likely tokens whose mass reaches p; the first token is always kept)."""
    logits = log_probs.float() / sampling.temperature
    if sampling.top_k and sampling.top_k < logits.size(-1):
        kth = torch.topk(logits, sampling.top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if sampling.top_p < 1.0:
        ordered, order = torch.sort(logits, dim=-1, descending=True)
        probs = torch.softmax(ordered, -1)
        drop = probs.cumsum(-1) - probs >= sampling.top_p  # mass before the token already reaches p
        logits = logits.scatter(-1, order, ordered.masked_fill(drop, float("-inf")))
    return torch.softmax(logits, -1)


def draw(log_probs: Tensor, sampling: Sampling, rows: list[torch.Generator]) -> Tensor:
    """(N, V) -> (N,) one token per row, row ``i`` drawn with ``rows[i]`` (its sentence's
    generator); the argmax where :attr:`Sampling.greedy`."""
    if sampling.greedy:
        return log_probs.argmax(-1)
    probs = probabilities(log_probs, sampling)
    return torch.cat([torch.multinomial(probs[i], 1, generator=g) for i, g in enumerate(rows)])
