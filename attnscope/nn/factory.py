"""Build a model from its configuration."""

from __future__ import annotations

from attnscope.nn.base import Seq2Seq
from attnscope.nn.config import ModelConfig
from attnscope.nn.family import family_of


def build_model(config: ModelConfig) -> Seq2Seq:
    """A freshly initialised model of ``config.architecture`` (built by its registered family)."""
    return family_of(config).build(config)
