"""Fixtures for the decoding tests: tiny random models of every kind, a padded source batch, and
a scripted model whose next-token distribution is a fixed table, for checking the search itself."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pytest
import torch
from torch import Tensor

from attnscope.decoding import DecodeOutput
from attnscope.nn import build_model
from attnscope.nn.base import Seq2Seq, StepPath
from attnscope.nn.config import EOS_ID, SCORES, RNNConfig
from attnscope.nn.outputs import EncoderOutput, StepOutput
from attnscope.testing import tiny_config

VOCAB = 40
MODEL_KINDS = [("rnn", s) for s in SCORES] + [
    ("self_attentive_rnn", "additive"),
    ("transformer", "additive"),
]
# See tests/nn/conftest.py: one intra-op thread keeps tiny models fast on a busy machine.
torch.set_num_threads(1)


def build_tiny(
    architecture: str, score: str = "additive", seed: int = 0, **overrides: Any
) -> Seq2Seq:
    """A tiny random model in eval mode, its EOS embedding halved: random weights often end at
    once, and a one-token output leaves nothing to compare. (The embedding is tied to the output
    layer, so this halves the EOS logit.)"""
    torch.manual_seed(seed)
    config = dataclasses.replace(tiny_config(architecture, score, VOCAB), **overrides)
    model = build_model(config).eval()
    embed = model.get_submodule("embed")
    assert isinstance(embed, torch.nn.Embedding)
    with torch.no_grad():
        embed.weight[config.eos_id] *= 0.5
    return model


def padded_source(lengths: Sequence[int], seed: int = 0) -> Tensor:
    """(B, S) random ids, row ``b`` holding ``lengths[b]`` real tokens (the last one EOS), then pad."""
    g = torch.Generator().manual_seed(seed)
    src = torch.zeros(len(lengths), max(lengths), dtype=torch.long)
    for b, n in enumerate(lengths):
        src[b, : n - 1] = torch.randint(4, VOCAB, (n - 1,), generator=g)
        src[b, n - 1] = EOS_ID
    return src


@pytest.fixture(params=MODEL_KINDS, ids=[f"{a}-{s}" for a, s in MODEL_KINDS])
def model(request: pytest.FixtureRequest) -> Seq2Seq:
    return build_tiny(*request.param)


@pytest.fixture
def tiny() -> Callable[..., Seq2Seq]:
    """:func:`build_tiny`, for tests that build their own models."""
    return build_tiny


@pytest.fixture
def src() -> Tensor:
    """Four sentences of 7, 4, 6 and 2 tokens: all but the first are padded."""
    return padded_source((7, 4, 6, 2))


# --- a scripted model ---------------------------------------------------------------------------

A, B, C = 4, 5, 6  # the scripted model's words; it never puts mass on pad, unk or bos


@dataclass
class PrefixState:
    """prefixes: (N, t) the tokens each hypothesis has been fed after BOS."""

    prefixes: Tensor

    def reorder(self, indices: Tensor) -> PrefixState:
        return PrefixState(self.prefixes.index_select(0, indices))


Table = dict[tuple[int, ...], dict[int, float]]


class ScriptedModel(Seq2Seq):
    """Next-token probabilities read from a table, ``table[prefix] = {word: probability}`` (prefix:
    the output so far), one table for all sentences or one per sentence of the batch. A prefix
    missing from the table ends with probability 0.9. The cross-attention row puts all weight on
    source position ``sum(prefix) mod source length``, so a row tells which path it was computed on.
    """

    def __init__(self, tables: Table | list[Table]) -> None:
        super().__init__()
        self.config = RNNConfig(vocab_size=8, score="dot")
        self.tables = tables
        self.anchor = torch.nn.Parameter(torch.zeros(1))  # so that .device works

    def encode(self, src: Tensor, need_weights: bool = False) -> EncoderOutput:
        # ``final`` carries each row's sentence number; it follows the beams through reordering
        sentence = torch.arange(len(src), dtype=torch.float32)[:, None]
        return EncoderOutput(
            memory=torch.zeros(*src.shape, 1), mask=self.source_mask(src), final=sentence
        )

    def init_state(self, enc: EncoderOutput, *, path: StepPath | None = None) -> PrefixState:
        return PrefixState(torch.zeros(enc.mask.size(0), 0, dtype=torch.long))

    def step(
        self, tokens: Tensor, state: PrefixState, enc: EncoderOutput, need_weights: bool = False
    ) -> tuple[StepOutput, PrefixState]:
        prefixes = torch.cat([state.prefixes, tokens[:, None]], 1)  # BOS, then the outputs
        assert enc.final is not None
        sentences = enc.final[:, 0].long().tolist()
        probs = torch.full((len(tokens), self.config.vocab_size), 1e-6)
        for n, row in enumerate(prefixes[:, 1:].tolist()):
            table = self.tables[sentences[n]] if isinstance(self.tables, list) else self.tables
            for word, p in table.get(tuple(row), {EOS_ID: 0.9, A: 0.1}).items():
                probs[n, word] = p
        cross = None
        if need_weights:
            where = prefixes[:, 1:].sum(1) % enc.mask.sum(1)
            cross = torch.nn.functional.one_hot(where, enc.mask.size(1)).float()[:, None, None]
        log_probs = torch.log(probs / probs.sum(-1, keepdim=True))
        return StepOutput(log_probs, cross=cross), PrefixState(prefixes)


@pytest.fixture
def scripted() -> Callable[[Table | list[Table]], ScriptedModel]:
    return ScriptedModel


# --- checks shared by the decoders ----------------------------------------------------------------


def assert_attention_well_formed(model: Seq2Seq, out: DecodeOutput) -> None:
    """Every sentence: one attention row per output token, each summing to one, with exactly zero
    weight on source padding (in the padded batch tensors) and none on future target positions."""
    c = model.config
    fields = {k for k in ("cross", "encoder_self", "decoder_self") if getattr(out, k) is not None}
    assert fields == set(c.attention_kinds)
    width = out.tokens.size(1)
    src_mask = torch.arange(int(out.source_lengths.max()))[None, :] < out.source_lengths[:, None]
    if out.cross is not None:
        assert out.cross.shape[:4] == (len(out.tokens), c.layers, c.num_heads, width)
        assert (out.cross.masked_select(~src_mask[:, None, None, None, :]) == 0).all()
    if out.encoder_self is not None:
        assert (out.encoder_self.masked_select(~src_mask[:, None, None, None, :]) == 0).all()
    for hyp, s in zip(out.hypotheses(), out.source_lengths.tolist(), strict=True):
        t = len(hyp.tokens)
        for name, shape in (("cross", (t, s)), ("decoder_self", (t, t)), ("encoder_self", (s, s))):
            weights = getattr(hyp, name)
            if weights is None:
                continue
            assert weights.shape[-2:] == shape, (
                f"{name} is {tuple(weights.shape)}, expected {shape}"
            )
            ones = torch.ones(weights.shape[:-1])
            torch.testing.assert_close(weights.sum(-1), ones, atol=1e-5, rtol=0)
        if hyp.decoder_self is not None:
            assert (hyp.decoder_self.triu(1) == 0).all()


@pytest.fixture
def check_attention() -> Callable[[Seq2Seq, DecodeOutput], None]:
    return assert_attention_well_formed
