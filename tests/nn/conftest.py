"""Fixtures for the network tests: tiny random models of every kind and a padded source batch."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import pytest
import torch
from torch import Tensor

from attnscope.nn import build_model
from attnscope.nn.base import Seq2Seq
from attnscope.nn.config import EOS_ID, SCORES
from attnscope.testing import tiny_config

VOCAB = 40
SCORE_FUNCTIONS = tuple(s for s in SCORES if s != "none")
# Every model the app can build: the RNN with each score, the RNN without attention, the
# self-attentive RNN and the Transformer.
MODEL_KINDS = [("rnn", s) for s in SCORE_FUNCTIONS] + [
    ("rnn", "none"),
    ("self_attentive_rnn", "additive"),
    ("transformer", "additive"),
]
ModelFactory = Callable[..., Seq2Seq]
SourceFactory = Callable[..., Tensor]

# Tiny models gain nothing from intra-op threads, and on a busy two-core machine OpenMP's spinning
# workers make each forward pass some 50x slower.
torch.set_num_threads(1)


def build_tiny(
    architecture: str, score: str = "additive", seed: int = 0, **overrides: Any
) -> Seq2Seq:
    """A tiny random model in eval mode; ``overrides`` replace fields of the tiny config."""
    torch.manual_seed(seed)
    config = dataclasses.replace(tiny_config(architecture, score, VOCAB), **overrides)
    return build_model(config).eval()


def padded_source(lengths: Sequence[int], seed: int = 0, width: int | None = None) -> Tensor:
    """(B, S) random ids, row ``b`` holding ``lengths[b]`` real tokens (the last one EOS), then pad."""
    g = torch.Generator().manual_seed(seed)
    src = torch.zeros(len(lengths), width or max(lengths), dtype=torch.long)
    for b, n in enumerate(lengths):
        src[b, : n - 1] = torch.randint(4, VOCAB, (n - 1,), generator=g)
        src[b, n - 1] = EOS_ID
    return src


def random_targets(batch: int, length: int, seed: int = 1) -> Tensor:
    """(B, T) decoder inputs: BOS then random non-special ids."""
    g = torch.Generator().manual_seed(seed)
    tgt = torch.randint(4, VOCAB, (batch, length), generator=g)
    tgt[:, 0] = 2
    return tgt


@pytest.fixture(params=MODEL_KINDS, ids=[f"{a}-{s}" for a, s in MODEL_KINDS])
def model(request: pytest.FixtureRequest) -> Seq2Seq:
    return build_tiny(*request.param)


@pytest.fixture(params=SCORE_FUNCTIONS)
def score_name(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def make_model() -> ModelFactory:
    return build_tiny


@pytest.fixture
def make_source() -> SourceFactory:
    return padded_source


@pytest.fixture
def src() -> Tensor:
    """Three sentences of 7, 4 and 6 tokens: rows 1 and 2 are padded."""
    return padded_source((7, 4, 6))


@pytest.fixture
def tgt_in() -> Tensor:
    return random_targets(3, 5)
