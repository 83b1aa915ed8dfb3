"""ModelConfig: validation with clear messages, and a dict round trip."""

from __future__ import annotations

import pytest

from app.nn.config import ModelConfig


def test_unknown_architecture_is_rejected() -> None:
    with pytest.raises(ValueError, match="unknown architecture 'lstm'"):
        ModelConfig(architecture="lstm", vocab_size=100)  # type: ignore[arg-type]


@pytest.mark.parametrize("architecture", ["rnn", "self_attentive_rnn"])
def test_unknown_score_is_rejected(architecture: str) -> None:
    with pytest.raises(ValueError, match="unknown score 'bilinear'"):
        ModelConfig(architecture=architecture, vocab_size=100, score="bilinear")  # type: ignore[arg-type]


def test_transformer_needs_d_model_divisible_by_heads() -> None:
    with pytest.raises(ValueError, match="d_model=30 is not divisible by heads=4"):
        ModelConfig(architecture="transformer", vocab_size=100, d_model=30, heads=4)
    ModelConfig(architecture="transformer", vocab_size=100, d_model=32, heads=4)


def test_self_attentive_rnn_needs_a_cross_attention_score() -> None:
    with pytest.raises(ValueError, match="needs a cross-attention score"):
        ModelConfig(architecture="self_attentive_rnn", vocab_size=100, score="none")


def test_vocab_must_hold_the_special_tokens() -> None:
    with pytest.raises(ValueError, match="vocab_size"):
        ModelConfig(architecture="rnn", vocab_size=3)


def test_dict_round_trip_and_unknown_fields() -> None:
    config = ModelConfig(architecture="rnn", vocab_size=100, score="location", hidden_dim=32)
    assert ModelConfig.from_dict(config.to_dict()) == config
    with pytest.raises(ValueError, match="unknown config fields: colour"):
        ModelConfig.from_dict({**config.to_dict(), "colour": "red"})


@pytest.mark.parametrize(
    ("architecture", "score", "kinds", "layers", "heads"),
    [
        ("transformer", "additive", ("cross", "encoder_self", "decoder_self"), 3, 4),
        ("self_attentive_rnn", "dot", ("cross", "encoder_self"), 1, 1),
        ("rnn", "general", ("cross",), 1, 1),
        ("rnn", "none", (), 1, 1),
    ],
)
def test_attention_kinds_and_shape(
    architecture: str, score: str, kinds: tuple[str, ...], layers: int, heads: int
) -> None:
    config = ModelConfig(architecture=architecture, vocab_size=100, score=score)  # type: ignore[arg-type]
    assert config.attention_kinds == kinds
    assert (config.layers, config.num_heads) == (layers, heads)
