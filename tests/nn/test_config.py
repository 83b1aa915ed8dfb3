"""The per-architecture configs: validation with clear messages, each architecture's dict round
trip, the tagged union's dispatch on ``architecture``, and version-1 (flat) records still read."""

from __future__ import annotations

import dataclasses

import pytest

from attnscope.nn.config import (
    CONFIG_VERSION,
    RNNConfig,
    SelfAttentiveRNNConfig,
    TransformerConfig,
    config_fields,
    config_from_dict,
    config_to_dict,
    score_of,
)

EXAMPLES = [
    RNNConfig(vocab_size=100, score="location", hidden_dim=32, max_source_positions=64),
    SelfAttentiveRNNConfig(vocab_size=100, score="cosine", emb_dim=8, dropout=0.2),
    TransformerConfig(vocab_size=100, d_model=32, heads=4, attention_dropout=0.05, activation_dropout=None),
]


@pytest.mark.parametrize("config", EXAMPLES, ids=lambda c: c.architecture)
def test_each_architecture_round_trips_through_its_dict(config: object) -> None:
    assert dataclasses.is_dataclass(config)
    data = config_to_dict(config)  # type: ignore[arg-type]
    assert next(iter(data)) == "architecture"  # the tag leads
    again = config_from_dict(data)
    assert again == config and type(again) is type(config)


def test_each_architecture_has_only_its_own_fields() -> None:
    assert "score" not in config_fields("transformer") and "heads" not in config_fields("rnn")
    assert {"attention_dropout", "activation_dropout"} <= set(config_fields("transformer"))
    assert config_fields("rnn") == config_fields("self_attentive_rnn")
    with pytest.raises(ValueError, match="unknown config fields for transformer: score"):
        config_from_dict({"architecture": "transformer", "vocab_size": 100, "score": "additive"})
    with pytest.raises(ValueError, match="unknown config fields for rnn: colour"):
        config_from_dict({**config_to_dict(EXAMPLES[0]), "colour": "red"})


def test_version_1_flat_records_drop_the_other_architectures_fields() -> None:
    flat = {  # what every config.json held before version 2: all fields of all architectures
        "architecture": "transformer", "vocab_size": 100, "score": "additive", "emb_dim": 256,
        "hidden_dim": 256, "max_source_positions": 256, "d_model": 32, "heads": 4, "ff_dim": 64,
        "encoder_layers": 1, "decoder_layers": 2, "pre_norm": False, "max_positions": 512,
        "dropout": 0.25, "pad_id": 0, "bos_id": 2, "eos_id": 3,
    }  # fmt: skip
    config = config_from_dict(flat, version=1)
    assert config == TransformerConfig(
        vocab_size=100, d_model=32, heads=4, ff_dim=64, encoder_layers=1, decoder_layers=2, pre_norm=False, dropout=0.25
    )
    rnn = config_from_dict({**flat, "architecture": "rnn", "score": "dot"}, version=1)
    assert rnn == RNNConfig(vocab_size=100, score="dot", dropout=0.25)
    with pytest.raises(ValueError, match="unknown config fields for rnn: colour"):
        config_from_dict({**flat, "architecture": "rnn", "colour": "red"}, version=1)
    with pytest.raises(ValueError, match="unsupported config version 7"):
        config_from_dict(flat, version=7)
    assert CONFIG_VERSION == 2


def test_unknown_or_missing_architecture_is_rejected() -> None:
    with pytest.raises(ValueError, match="unknown architecture 'lstm'"):
        config_from_dict({"architecture": "lstm", "vocab_size": 100})
    with pytest.raises(ValueError, match="no 'architecture' field"):
        config_from_dict({"vocab_size": 100})


@pytest.mark.parametrize("cls", [RNNConfig, SelfAttentiveRNNConfig])
def test_unknown_score_is_rejected(cls: type[RNNConfig]) -> None:
    with pytest.raises(ValueError, match="unknown score 'bilinear'"):
        cls(vocab_size=100, score="bilinear")


def test_transformer_needs_d_model_divisible_by_heads() -> None:
    with pytest.raises(ValueError, match="d_model=30 is not divisible by heads=4"):
        TransformerConfig(vocab_size=100, d_model=30, heads=4)
    TransformerConfig(vocab_size=100, d_model=32, heads=4)


def test_self_attentive_rnn_needs_a_cross_attention_score() -> None:
    with pytest.raises(ValueError, match="needs a cross-attention score"):
        SelfAttentiveRNNConfig(vocab_size=100, score="none")


@pytest.mark.parametrize("cls", [RNNConfig, SelfAttentiveRNNConfig, TransformerConfig])
def test_vocab_must_hold_the_special_tokens(cls: type[RNNConfig]) -> None:
    with pytest.raises(ValueError, match="vocab_size"):
        cls(vocab_size=3)


def test_transformer_dropouts_default_to_the_shared_one() -> None:
    c = TransformerConfig(vocab_size=100, dropout=0.3, activation_dropout=0.0)
    assert (c.attention_dropout_p, c.activation_dropout_p) == (0.3, 0.0)


@pytest.mark.parametrize(
    ("config", "kinds", "layers", "heads", "score"),
    [
        (TransformerConfig(vocab_size=100), ("cross", "encoder_self", "decoder_self"), 3, 4, None),
        (SelfAttentiveRNNConfig(vocab_size=100, score="dot"), ("cross", "encoder_self"), 1, 1, "dot"),
        (RNNConfig(vocab_size=100, score="general"), ("cross",), 1, 1, "general"),
        (RNNConfig(vocab_size=100, score="none"), (), 1, 1, "none"),
    ],
)
def test_attention_kinds_shape_and_score(
    config: RNNConfig, kinds: tuple[str, ...], layers: int, heads: int, score: str | None
) -> None:
    assert config.attention_kinds == kinds
    assert (config.layers, config.num_heads) == (layers, heads)
    assert score_of(config) == score
