"""The recurrent families: the attention RNN encoder–decoder (``rnn``) and the self-attentive
RNN (``self_attentive_rnn``), each one layer × one head per attention kind it returns."""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import Tensor, nn

from attnscope.nn.base import Seq2Seq
from attnscope.nn.config import RecurrentConfig, RNNConfig, SelfAttentiveRNNConfig
from attnscope.nn.family import Family, Geometry, register
from attnscope.nn.recording import ScoreRecorder
from attnscope.nn.rnn import RNNSeq2Seq
from attnscope.nn.scores import NEG_INF
from attnscope.nn.self_attentive import SelfAttentiveEncoder


class RecurrentFamily(Family):
    """What the two recurrent families share: geometry, head modules, score reading."""

    explainer: ClassVar[str] = "recurrent"

    def geometry(self, config: RNNConfig | SelfAttentiveRNNConfig) -> Geometry:
        return Geometry(
            kinds=config.attention_kinds,
            encoder_layers=1,
            decoder_layers=1,
            heads=1,
            key_dim=config.hidden_dim,
            source_positions=config.source_positions,
            target_positions=config.target_positions,
        )

    def head_module(self, model: nn.Module, kind: str, layer: int) -> nn.Module:
        """``cross``: the decoder's score module; ``encoder_self``: the self-attentive encoder's."""
        if layer != 0:
            raise ValueError(f"no layer {layer} of {kind}: an RNN has one attention layer")
        owner = model if kind == "cross" else model.encoder
        module: nn.Module = getattr(owner, "score" if kind == "cross" else "align")
        return module

    def read_scores(
        self, model: nn.Module, recorder: ScoreRecorder, source_length: int
    ) -> tuple[dict[str, Tensor], Tensor | None]:
        """One recorded call per target position (cross) and per source position (the
        self-attentive encoder, whose row t has t + 1 keys: padded with ``-inf``)."""
        scores: dict[str, Tensor] = {}
        contexts = None
        score = getattr(model, "score", None)
        if score is not None:
            steps = recorder.of(score)  # one call per target position, scores (1, S)
            scores["cross"] = torch.stack([r.scores[0] for r in steps])[None, None]  # (1, 1, T, S)
            contexts = torch.stack([r.context[0] for r in steps])[None, None]  # (1, 1, T, H)
        align = getattr(getattr(model, "encoder", None), "align", None)
        if align is not None:
            rows = [r.scores[0] for r in recorder.of(align)]  # row t: (t+1,)
            padded = [nn.functional.pad(row, (0, source_length - row.numel()), value=NEG_INF) for row in rows]
            scores["encoder_self"] = torch.stack(padded)[None, None]  # (1, 1, S, S)
        return scores, contexts

    def tiny_config(self, vocab_size: int, score: str | None) -> RecurrentConfig:
        config: RecurrentConfig = self.config_class(
            vocab_size=vocab_size, dropout=0.0, score=score or "additive", emb_dim=16, hidden_dim=16
        )
        return config


class RNNFamily(RecurrentFamily):
    """Bidirectional GRU encoder, GRU decoder attending with one score function (or none)."""

    architecture: ClassVar[str] = "rnn"
    label: ClassVar[str] = "RNN"
    config_class: ClassVar[type] = RNNConfig

    def build(self, config: RNNConfig) -> Seq2Seq:
        return RNNSeq2Seq(config)


class SelfAttentiveRNNFamily(RecurrentFamily):
    """Cheng et al.'s self-attentive RNN encoder, a GRU decoder attending with a score function."""

    architecture: ClassVar[str] = "self_attentive_rnn"
    label: ClassVar[str] = "Self-attentive RNN"
    config_class: ClassVar[type] = SelfAttentiveRNNConfig

    def build(self, config: SelfAttentiveRNNConfig) -> Seq2Seq:
        return RNNSeq2Seq(config, encoder=SelfAttentiveEncoder(config))


register(RNNFamily())
register(SelfAttentiveRNNFamily())
