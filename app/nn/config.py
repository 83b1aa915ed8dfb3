"""One frozen configuration dataclass for every architecture."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

Architecture = Literal["rnn", "self_attentive_rnn", "transformer"]
ARCHITECTURES: tuple[str, ...] = ("rnn", "self_attentive_rnn", "transformer")

# The alignment score functions of the classic table, plus "none" (no attention at all).
SCORES: tuple[str, ...] = (
    "additive",
    "dot",
    "scaled_dot",
    "general",
    "query_key",
    "concat",
    "cosine",
    "location",
    "none",
)

PAD_ID = 0
UNK_ID = 1
BOS_ID = 2
EOS_ID = 3


@dataclass(frozen=True)
class ModelConfig:
    """Everything needed to rebuild a model; saved as ``config.json`` beside its weights.

    RNN fields (``emb_dim``, ``hidden_dim``, ``score``) apply to ``rnn`` and
    ``self_attentive_rnn``; Transformer fields (``d_model``, ``heads``, ``ff_dim``,
    ``encoder_layers``, ``decoder_layers``, ``pre_norm``) to ``transformer``.
    """

    architecture: Architecture
    vocab_size: int
    # RNN family
    score: str = "additive"
    emb_dim: int = 256
    hidden_dim: int = 256
    max_source_positions: int = 256  # the "location" score predicts over this many positions
    # Transformer
    d_model: int = 256
    heads: int = 4
    ff_dim: int = 1024
    encoder_layers: int = 3
    decoder_layers: int = 3
    pre_norm: bool = True
    max_positions: int = 512
    attention_dropout: float | None = None  # on attention weights; None: same as ``dropout``
    activation_dropout: float | None = None  # inside the feed-forward block; None: ``dropout``
    # shared
    dropout: float = 0.1
    pad_id: int = PAD_ID
    bos_id: int = BOS_ID
    eos_id: int = EOS_ID

    def __post_init__(self) -> None:
        if self.architecture not in ARCHITECTURES:
            raise ValueError(
                f"unknown architecture {self.architecture!r}; choose one of {', '.join(ARCHITECTURES)}"
            )
        if self.architecture != "transformer" and self.score not in SCORES:
            raise ValueError(f"unknown score {self.score!r}; choose one of {', '.join(SCORES)}")
        if self.architecture == "self_attentive_rnn" and self.score == "none":
            raise ValueError("the self-attentive RNN needs a cross-attention score, not 'none'")
        if self.architecture == "transformer" and self.d_model % self.heads:
            raise ValueError(f"d_model={self.d_model} is not divisible by heads={self.heads}")
        if self.vocab_size < 4:
            raise ValueError("vocab_size must leave room for pad, unk, bos and eos")

    @property
    def attention_kinds(self) -> tuple[str, ...]:
        """The attention fields this model returns, in API order."""
        if self.architecture == "transformer":
            return ("cross", "encoder_self", "decoder_self")
        if self.architecture == "self_attentive_rnn":
            return ("cross", "encoder_self")
        return () if self.score == "none" else ("cross",)

    @property
    def alignment_score(self) -> str | None:
        """The RNN family's score function ("none" for the baseline); None for the Transformer."""
        return None if self.architecture == "transformer" else self.score

    @property
    def attention_dropout_p(self) -> float:
        return self.dropout if self.attention_dropout is None else self.attention_dropout

    @property
    def activation_dropout_p(self) -> float:
        return self.dropout if self.activation_dropout is None else self.activation_dropout

    @property
    def layers(self) -> int:
        return self.decoder_layers if self.architecture == "transformer" else 1

    @property
    def num_heads(self) -> int:
        return self.heads if self.architecture == "transformer" else 1

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown config fields: {', '.join(unknown)}")
        return cls(**data)
