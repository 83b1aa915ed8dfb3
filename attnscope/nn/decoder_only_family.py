"""The decoder-only family (LLM translators imported by :mod:`attnscope.hf.llm_import`): one
attention kind, ``decoder_self``, over prompt + output, L layers × H *query* heads."""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from attnscope.nn.decoder_only import DecoderOnlyLM
from attnscope.nn.decoder_only_config import DecoderOnlyConfig
from attnscope.nn.family import Family, Geometry, register
from attnscope.nn.recording import ScoreRecorder


class DecoderOnlyFamily(Family):
    architecture: ClassVar[str] = "decoder_only"
    label: ClassVar[str] = "decoder-only LM"
    config_class: ClassVar[type] = DecoderOnlyConfig
    score_formula: ClassVar[str] = "score(q, kᵢ) = cap·tanh((q · kᵢ)·s / cap), s = 1/√d_k unless the model sets it"
    explainer: ClassVar[str] = "decoder_only"  # rollout and norm per query head (attnscope.explain, docs/llm.md)

    def build(self, config: DecoderOnlyConfig) -> Any:
        return DecoderOnlyLM(config)

    def geometry(self, config: DecoderOnlyConfig) -> Geometry:
        """Counts *query* heads: every one has its own matrix (key/value heads are shared)."""
        return Geometry(
            kinds=config.attention_kinds,
            encoder_layers=0,
            decoder_layers=config.layers,
            heads=config.heads,
            key_dim=config.head_dim,
            source_positions=config.max_positions,
            target_positions=config.max_positions,
            score_scale=1.0 / config.scale,
        )

    def head_module(self, model: nn.Module, kind: str, layer: int) -> nn.Module:
        layers = getattr(model, "layers")  # noqa: B009
        if kind != "decoder_self":
            raise ValueError(f"a decoder-only model has no {kind!r} attention; it has decoder_self")
        if not 0 <= layer < len(layers):
            raise ValueError(f"no layer {layer} of decoder_self: the model has {len(layers)} layers")
        module: nn.Module = layers[layer].attn
        return module

    def read_scores(
        self, model: nn.Module, recorder: ScoreRecorder, source_length: int
    ) -> tuple[dict[str, Tensor], Tensor | None]:
        """One recorded call per layer of a full pass: scores (1, H, T, T)."""
        layers = getattr(model, "layers")  # noqa: B009
        scores = [recorder.of(layer.attn)[-1].scores[0] for layer in layers]
        return {"decoder_self": torch.stack(scores)}, None  # (L, H, T, T)

    def tiny_config(self, vocab_size: int, score: str | None) -> DecoderOnlyConfig:
        return DecoderOnlyConfig(vocab_size=vocab_size, d_model=24, layers=2, heads=3, kv_heads=1, head_dim=8, ff_dim=40)


register(DecoderOnlyFamily())
