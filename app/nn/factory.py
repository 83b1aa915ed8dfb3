"""Build a model from its configuration."""

from __future__ import annotations

from app.nn.base import Seq2Seq
from app.nn.config import ModelConfig, SelfAttentiveRNNConfig, TransformerConfig
from app.nn.rnn import RNNSeq2Seq
from app.nn.self_attentive import SelfAttentiveEncoder
from app.nn.transformer import Transformer


def build_model(config: ModelConfig) -> Seq2Seq:
    """A freshly initialised model of ``config.architecture``."""
    if isinstance(config, TransformerConfig):
        return Transformer(config)
    if isinstance(config, SelfAttentiveRNNConfig):
        return RNNSeq2Seq(config, encoder=SelfAttentiveEncoder(config))
    return RNNSeq2Seq(config)
