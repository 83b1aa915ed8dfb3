"""One frozen configuration dataclass per architecture, and the tagged union of them.

``architecture`` is the tag: ``RNNConfig`` ("rnn"), ``SelfAttentiveRNNConfig``
("self_attentive_rnn") and ``TransformerConfig`` ("transformer") each carry only their own
fields, so a Transformer has no alignment score and an RNN no head count. ``config_to_dict`` /
``config_from_dict`` are the ``config.json`` form; ``CONFIG_VERSION`` 1 was one flat record with
every field of every architecture, which ``config_from_dict(..., version=1)`` still reads.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

from attnscope.nn.scores import SCORE_FUNCTIONS

Architecture = Literal["rnn", "self_attentive_rnn", "transformer"]
ARCHITECTURES: tuple[str, ...] = ("rnn", "self_attentive_rnn", "transformer")

# The alignment score functions of the classic table, plus "none" (no attention at all), in
# table order: the names of attnscope.nn.scores's registry (where a score function is added).
SCORES: tuple[str, ...] = tuple(SCORE_FUNCTIONS)

PAD_ID = 0
UNK_ID = 1
BOS_ID = 2
EOS_ID = 3

ACTIVATIONS: tuple[str, ...] = ("relu", "gelu", "gelu_new", "silu")
LAYOUT_FIELDS: tuple[str, ...] = (
    "activation", "scale_embedding", "positions", "embedding_norm", "final_norm", "output_bias", "tied_output",
    *("head_dim", "norm", "norm_eps", "linear_bias", "scale_attention", "gated_ff", "scale_output"),
    *("relative_buckets", "relative_max_distance"),
    *("decoder_heads", "decoder_ff_dim"),
)
Stack = Literal["encoder", "decoder"]
NORMS: tuple[str, ...] = ("layer", "rms")

# 2: one record per architecture (only its own fields); 1: one flat record for all three.
CONFIG_VERSION = 2


@dataclass(frozen=True, kw_only=True)
class SharedConfig:
    """Fields every architecture has."""

    vocab_size: int
    dropout: float = 0.1
    pad_id: int = PAD_ID
    bos_id: int = BOS_ID
    eos_id: int = EOS_ID

    def __post_init__(self) -> None:
        if self.vocab_size < 4:
            raise ValueError("vocab_size must leave room for pad, unk, bos and eos")

    @property
    def source_positions(self) -> int | None:
        """The longest source (EOS included) the model has positions for; None: unbounded."""
        return None

    @property
    def target_positions(self) -> int | None:
        """The longest output (EOS included) the decoder has positions for; None: unbounded."""
        return None

    @property
    def alignment_score(self) -> str | None:
        """The alignment score function (:mod:`attnscope.nn.scores`), for a family that has one."""
        return None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True, kw_only=True)
class RecurrentConfig(SharedConfig):
    """The GRU encoder-decoder family: one layer, one attention head, an alignment score."""

    score: str = "additive"
    emb_dim: int = 256
    hidden_dim: int = 256
    max_source_positions: int = 256  # the "location" score predicts over this many positions

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.score not in SCORE_FUNCTIONS:
            raise ValueError(f"unknown score {self.score!r}; choose one of {', '.join(SCORE_FUNCTIONS)}")

    @property
    def alignment_score(self) -> str | None:
        return self.score

    @property
    def source_positions(self) -> int | None:
        """The location score predicts a position among ``max_source_positions``."""
        return self.max_source_positions if self.score == "location" else None

    @property
    def layers(self) -> int:
        return 1

    @property
    def num_heads(self) -> int:
        return 1


@dataclass(frozen=True, kw_only=True)
class RNNConfig(RecurrentConfig):
    """Bidirectional GRU encoder, GRU decoder attending with ``score`` ("none": no attention)."""

    architecture: Literal["rnn"] = "rnn"

    @property
    def attention_kinds(self) -> tuple[str, ...]:
        """The attention fields this model returns, in API order."""
        return () if self.score == "none" else ("cross",)


@dataclass(frozen=True, kw_only=True)
class SelfAttentiveRNNConfig(RecurrentConfig):
    """Cheng et al.'s self-attentive RNN encoder, a GRU decoder attending with ``score``."""

    architecture: Literal["self_attentive_rnn"] = "self_attentive_rnn"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.score == "none":
            raise ValueError("the self-attentive RNN needs a cross-attention score, not 'none'")

    @property
    def attention_kinds(self) -> tuple[str, ...]:
        return ("cross", "encoder_self")


@dataclass(frozen=True, kw_only=True)
class TransformerConfig(SharedConfig):
    """Encoder-decoder Transformer (pre- or post-norm), sinusoidal positions, tied embeddings."""

    architecture: Literal["transformer"] = "transformer"
    d_model: int = 256
    heads: int = 4
    ff_dim: int = 1024
    encoder_layers: int = 3
    decoder_layers: int = 3
    pre_norm: bool = True
    max_positions: int = 512
    attention_dropout: float | None = None  # on attention weights; None: same as ``dropout``
    activation_dropout: float | None = None  # inside the feed-forward block; None: ``dropout``
    # The layout variants of imported models (attnscope.hf); the defaults are the shipped models' own.
    activation: str = "relu"  # of the feed-forward block: relu, gelu, gelu_new, silu
    scale_embedding: bool = True  # token embeddings times sqrt(d_model)
    positions: str = "sinusoidal"  # or "learned": an encoder and a decoder table in the weights
    embedding_norm: bool = False  # a layer norm after embeddings + positions (BART's)
    final_norm: bool | None = None  # a layer norm after each stack; None: when pre_norm
    output_bias: bool = False  # a bias on the output logits (BART/Marian's final_logits_bias)
    tied_output: bool = True  # the output layer is the embedding matrix; False: a layer of its own
    # T5's pieces (attnscope.nn.t5_parts); the defaults are again the shipped models' own.
    head_dim: int | None = None  # size of each head's queries/keys/values; None: d_model // heads
    norm: str = "layer"  # "layer" (LayerNorm) or "rms" (T5's: no mean, no bias)
    norm_eps: float = 1e-5
    linear_bias: bool = True  # biases on the attention and feed-forward projections
    scale_attention: bool = True  # scores divided by sqrt(head size); T5: not
    gated_ff: bool = False  # act(x W0) * (x W1) before the output projection (T5 v1.1, mT5)
    scale_output: bool = False  # decoder output times d_model**-0.5 before the output layer (T5)
    relative_buckets: int = 32  # positions="relative": buckets of the self-attention bias
    relative_max_distance: int = 128  # positions="relative": the distance of the last bucket
    # Per-stack sizes (imports whose decoder differs from the encoder): ``heads`` and ``ff_dim``
    # are the encoder's, and the decoder's too where these are None (every shipped model).
    decoder_heads: int | None = None  # the decoder's self- and cross-attention heads
    decoder_ff_dim: int | None = None  # the decoder's feed-forward width

    def __post_init__(self) -> None:
        super().__post_init__()
        # one spelling per model: a decoder size equal to the encoder's is the default, None
        if self.decoder_heads == self.heads:
            object.__setattr__(self, "decoder_heads", None)
        if self.decoder_ff_dim == self.ff_dim:
            object.__setattr__(self, "decoder_ff_dim", None)
        for stack in ("encoder", "decoder"):
            heads = self.heads_of(stack)
            if heads < 1 or self.ff_dim_of(stack) < 1:
                raise ValueError(f"the {stack} needs at least one head and a feed-forward width")
            if self.head_dim is None and self.d_model % heads:
                name = "heads" if stack == "encoder" else "decoder_heads"
                raise ValueError(f"d_model={self.d_model} is not divisible by {name}={heads}")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"unknown activation {self.activation!r}; choose one of {', '.join(ACTIVATIONS)}")
        if self.positions not in ("sinusoidal", "learned", "relative"):
            raise ValueError(f"unknown positions {self.positions!r}; choose sinusoidal, learned or relative")
        if self.norm not in NORMS:
            raise ValueError(f"unknown norm {self.norm!r}; choose one of {', '.join(NORMS)}")

    def to_dict(self) -> dict[str, Any]:
        """The fields, the layout ones only where an import set them (so a shipped model's
        ``config.json`` reads as it always did)."""
        fields = super().to_dict()
        defaults = TransformerConfig(vocab_size=self.vocab_size)
        for name in LAYOUT_FIELDS:
            if fields[name] == getattr(defaults, name):
                del fields[name]
        return fields

    @property
    def has_final_norm(self) -> bool:
        return self.pre_norm if self.final_norm is None else self.final_norm

    @property
    def standard_layout(self) -> bool:
        """Whether this is the shipped models' layout (relu, scaled embeddings, sinusoidal
        positions, final norms iff pre-norm, tied output without bias): only that layout takes
        the decoding fast paths (attnscope.nn.layers prepared, attnscope.nn.native, static greedy); the others
        run the general layer code, which every layout shares."""
        return (
            self.activation == "relu"
            and self.scale_embedding
            and self.positions == "sinusoidal"
            and not self.embedding_norm
            and self.has_final_norm == self.pre_norm
            and not self.output_bias
            and self.tied_output
            and self.t5_defaults
            and self.decoder_heads is None
            and self.decoder_ff_dim is None
        )

    @property
    def t5_defaults(self) -> bool:
        """Whether every T5 piece is off (head size d_model / heads, layer norms, biases, scaled
        attention, a plain feed-forward, no output rescale): the layout the fast paths know."""
        return (
            self.head_dim in (None, self.d_model // self.heads)
            and self.norm == "layer"
            and self.norm_eps == 1e-5
            and self.linear_bias
            and self.scale_attention
            and not self.gated_ff
            and not self.scale_output
        )

    @property
    def key_size(self) -> int:
        """The size of each of the encoder's heads' queries and keys (see ``key_size_of``)."""
        return self.key_size_of("encoder")

    def heads_of(self, stack: Stack) -> int:
        """Heads of each attention of ``stack`` (the decoder's: its self- and cross-attention)."""
        return self.decoder_heads or self.heads if stack == "decoder" else self.heads

    def ff_dim_of(self, stack: Stack) -> int:
        """The feed-forward width of ``stack``'s layers."""
        return self.decoder_ff_dim or self.ff_dim if stack == "decoder" else self.ff_dim

    def key_size_of(self, stack: Stack) -> int:
        """The size of each head's queries and keys in ``stack``."""
        return self.d_model // self.heads_of(stack) if self.head_dim is None else self.head_dim

    @property
    def attention_kinds(self) -> tuple[str, ...]:
        return ("cross", "encoder_self", "decoder_self")

    @property
    def attention_dropout_p(self) -> float:
        return self.dropout if self.attention_dropout is None else self.attention_dropout

    @property
    def activation_dropout_p(self) -> float:
        return self.dropout if self.activation_dropout is None else self.activation_dropout

    @property
    def source_positions(self) -> int | None:
        return self.max_positions

    @property
    def target_positions(self) -> int | None:
        return self.max_positions

    @property
    def layers(self) -> int:
        return self.decoder_layers

    @property
    def num_heads(self) -> int:
        """Heads of the cross-attention (the decoder's)."""
        return self.heads_of("decoder")


ModelConfig: TypeAlias = RNNConfig | SelfAttentiveRNNConfig | TransformerConfig
CONFIG_CLASSES: dict[str, type[ModelConfig]] = {
    "rnn": RNNConfig,
    "self_attentive_rnn": SelfAttentiveRNNConfig,
    "transformer": TransformerConfig,
}

# Version 1's flat record: every architecture's fields, the irrelevant ones at their defaults.
_V1_FIELDS = frozenset(
    f.name for cls in CONFIG_CLASSES.values() for f in dataclasses.fields(cls)
)


def config_class(architecture: str) -> type[ModelConfig]:
    """The config class tagged ``architecture``; ValueError naming the choices otherwise."""
    if architecture not in CONFIG_CLASSES:
        raise ValueError(f"unknown architecture {architecture!r}; choose one of {', '.join(CONFIG_CLASSES)}")
    return CONFIG_CLASSES[architecture]


def config_fields(architecture: str) -> tuple[str, ...]:
    """The field names of ``architecture``'s config (what ``--set`` may change)."""
    return tuple(f.name for f in dataclasses.fields(config_class(architecture)))


def config_from_dict(data: dict[str, Any], *, version: int = CONFIG_VERSION) -> ModelConfig:
    """A config from its ``config.json`` form. ``version`` 1 (flat) drops the fields that belong
    to other architectures; a field unknown to every version is an error naming it."""
    if version not in (1, CONFIG_VERSION):
        raise ValueError(f"unsupported config version {version!r}; this attnscope reads 1 and {CONFIG_VERSION}")
    if "architecture" not in data:
        raise ValueError("config has no 'architecture' field")
    cls = config_class(data["architecture"])
    known = set(config_fields(data["architecture"]))
    if version == 1:
        data = {k: v for k, v in data.items() if k in known or k not in _V1_FIELDS}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValueError(f"unknown config fields for {data['architecture']}: {', '.join(unknown)}")
    return cls(**data)


def config_to_dict(config: ModelConfig) -> dict[str, Any]:
    """The ``config.json`` form (version :data:`CONFIG_VERSION`), the architecture tag first."""
    fields = config.to_dict()
    return {"architecture": fields.pop("architecture"), **fields}


def score_of(config: ModelConfig) -> str | None:
    """The alignment score function, as cards and the API report it: the RNN family's ``score``
    ("none" for the baseline), None for the Transformer, whose config has no such field."""
    return config.alignment_score
