"""The Transformer family (shipped models and every imported Hugging Face encoder–decoder,
which :mod:`attnscope.hf` converts into it): L layers × H heads of each attention kind."""

from __future__ import annotations

import math
from typing import ClassVar

import torch
from torch import Tensor, nn

from attnscope.nn.base import Seq2Seq
from attnscope.nn.config import TransformerConfig
from attnscope.nn.family import EXPLAIN_METHODS, Family, Geometry, register
from attnscope.nn.recording import ScoreRecord, ScoreRecorder
from attnscope.nn.transformer import Transformer

# The attribute of a decoder or encoder layer that computes each kind.
_STACK = {"encoder_self": ("encoder_layers", "self_attn"), "decoder_self": ("decoder_layers", "self_attn"),
          "cross": ("decoder_layers", "cross_attn")}  # fmt: skip


def _one(records: list[ScoreRecord]) -> ScoreRecord:
    """The single call of a Transformer attention module in a teacher-forced pass."""
    if len(records) != 1:
        raise RuntimeError(f"expected one attention call, saw {len(records)}")
    return records[0]


class TransformerFamily(Family):
    architecture: ClassVar[str] = "transformer"
    label: ClassVar[str] = "Transformer"
    config_class: ClassVar[type] = TransformerConfig
    score_formula: ClassVar[str] = "score(q, kᵢ) = q · kᵢ / √d_k"
    explainer: ClassVar[str] = "transformer"

    def build(self, config: TransformerConfig) -> Seq2Seq:
        return Transformer(config)

    def geometry(self, config: TransformerConfig) -> Geometry:
        return Geometry(
            kinds=config.attention_kinds,
            encoder_layers=config.encoder_layers,
            decoder_layers=config.decoder_layers,
            heads=config.heads,
            decoder_heads=config.decoder_heads,  # None: the encoder's
            key_dim=config.key_size_of("decoder"),  # d_model / heads, or T5's own head size
            source_positions=config.source_positions,
            target_positions=config.target_positions,
            explain_methods=EXPLAIN_METHODS,
            score_scale=math.sqrt(config.key_size_of("decoder")) if config.scale_attention else 1.0,
        )

    def head_module(self, model: nn.Module, kind: str, layer: int) -> nn.Module:
        """The layer's ``self_attn`` (encoder or decoder) or ``cross_attn`` module."""
        stack_name, attn = _STACK[kind]
        stack = getattr(model, stack_name)
        if not 0 <= layer < len(stack):
            raise ValueError(f"no layer {layer} of {kind}: the model has {len(stack)} layers")
        module: nn.Module = getattr(stack[layer], attn)
        return module

    def read_scores(
        self, model: nn.Module, recorder: ScoreRecorder, source_length: int
    ) -> tuple[dict[str, Tensor], Tensor | None]:
        """One recorded call per attention module: scores (1, H, Q, K), contexts (1, H, T, Dh)."""
        def stack(kind: str) -> list[ScoreRecord]:
            stack_name, attn = _STACK[kind]
            return [_one(recorder.of(getattr(layer, attn))) for layer in getattr(model, stack_name)]

        cross = stack("cross")
        scores = {
            "cross": torch.stack([r.scores[0] for r in cross]),  # (L, H, T, S)
            "encoder_self": torch.stack([r.scores[0] for r in stack("encoder_self")]),  # (L, H, S, S)
            "decoder_self": torch.stack([r.scores[0] for r in stack("decoder_self")]),  # (L, H, T, T)
        }
        return scores, torch.stack([r.context[0] for r in cross])  # (L, H, T, Dh)

    def tiny_config(self, vocab_size: int, score: str | None) -> TransformerConfig:
        return TransformerConfig(
            vocab_size=vocab_size, dropout=0.0, d_model=16, heads=2, ff_dim=32, encoder_layers=2, decoder_layers=2
        )

    def fast_paths(self, config: TransformerConfig) -> bool:
        return config.standard_layout


register(TransformerFamily())
