"""Model families behind one interface, found by the config's ``architecture`` tag.

The rest of the code (serving, anatomy, ablation, limits, the test helpers) never asks a
model's class. It asks the family registered for the model's ``config.architecture``:

* :meth:`Family.geometry`: the attention kinds, layers per kind, heads, key size and positional
  limits (what admission control, answer sizes and the per-head card sections count with);
* :meth:`Family.build`: a freshly initialised model of a config;
* :meth:`Family.head_module`: the module whose heads :mod:`attnscope.nn.ablation` switches off;
* :meth:`Family.read_scores`: the pre-softmax scores (and context vectors) of a teacher-forced
  pass recorded by :mod:`attnscope.nn.recording` (the anatomy of attention);
* :meth:`Family.fast_paths`: whether static greedy, written for the shipped Transformer
  layout, may decode its models;
* :meth:`Family.tiny_config`: a tiny config for tests and fixtures.

A family's config class is a frozen dataclass with the ``architecture`` tag and the properties
every config answers (``attention_kinds``, ``layers``, ``num_heads``, ``source_positions``,
``target_positions``, ``alignment_score``; the decoders and alignment read those), most simply a
subclass of :class:`~attnscope.nn.config.SharedConfig`.

Adding a family is one module implementing :class:`Family` and one :func:`register` call (the
shipped families are registered by the modules named in :data:`BUILTIN_MODULES`, imported on the
first look-up so that this module imports no model code).
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from attnscope.nn.config import CONFIG_CLASSES

if TYPE_CHECKING:
    from torch import Tensor, nn

    from attnscope.nn.base import Seq2Seq
    from attnscope.nn.recording import ScoreRecorder

# The modules that register the shipped families (each ends with a ``register(...)`` call).
BUILTIN_MODULES: tuple[str, ...] = (
    "attnscope.nn.recurrent_family", "attnscope.nn.transformer_family", "attnscope.nn.decoder_only_family",
)


@dataclass(frozen=True)
class Geometry:
    """The shape of a model's attention, in the one format ``[layer][head][query][key]``.

    ``kinds``: the attention kinds it returns, in API order; ``encoder_layers`` /
    ``decoder_layers``: layers of ``encoder_self`` and of ``cross``/``decoder_self``; ``heads``
    per layer (the encoder's, and the decoder's unless ``decoder_heads`` says otherwise: an import
    whose stacks differ; :meth:`heads_of` answers per kind); ``key_dim``: the size of one of the
    decoder's heads' keys (the cross-attention's) (the raw scores of ``q·k/√key_dim`` or
    the RNN's state size); ``score_scale``: the number a head's q·k is divided by to give its raw
    score (√key_dim; 1.0 for a model that does not scale, T5's; None for a model without q·k,
    the RNNs: the answer leaves it out); ``source_positions`` / ``target_positions``: the longest source and
    output (EOS included) it has positions for (None: unbounded). (Which explanation methods a
    model has is the method registry's to say, :mod:`attnscope.explain.registry`, from the
    family's ``explainer``.)"""

    kinds: tuple[str, ...]
    encoder_layers: int
    decoder_layers: int
    heads: int
    key_dim: int
    source_positions: int | None = None
    target_positions: int | None = None
    score_scale: float | None = None
    decoder_heads: int | None = None

    def layers_of(self, kind: str) -> int:
        """Layers of attention ``kind`` (``encoder_self`` counts the encoder's)."""
        return self.encoder_layers if kind == "encoder_self" else self.decoder_layers

    def heads_of(self, kind: str) -> int:
        """Heads per layer of attention ``kind`` (``encoder_self``: the encoder's)."""
        return self.heads if kind == "encoder_self" or self.decoder_heads is None else self.decoder_heads

    @property
    def context_width(self) -> int:
        """Floats of one layer's cross-attention context vectors at one query (all heads)."""
        return self.heads_of("cross") * self.key_dim

    def shapes(self) -> dict[str, tuple[int, int]]:
        """kind -> (layers, heads) of every kind the model returns."""
        return {kind: (self.layers_of(kind), self.heads_of(kind)) for kind in self.kinds}


class Family(ABC):
    """One model family: what the rest of the code needs to know about its models."""

    architecture: ClassVar[str]  # the config's ``architecture`` tag
    label: ClassVar[str]  # as people read it ("Transformer")
    config_class: ClassVar[type]
    # The formula of its attention scores where the family fixes one (the Transformer's
    # q·k/√d_k); "" where its config chooses an alignment score (attnscope.nn.scores).
    score_formula: ClassVar[str] = ""
    # Which runner of each explanation method explains its models (a key of ExplainMethod.runs in
    # attnscope.explain.registry: "transformer", "recurrent"; "": every method unavailable).
    explainer: ClassVar[str] = ""
    # Why the registered methods do not run on it, where the family says more than "none defined"
    # (the decoder-only LLMs are explained by their own routes).
    explain_elsewhere: ClassVar[str] = ""

    @abstractmethod
    def build(self, config: Any) -> Seq2Seq:
        """A freshly initialised model of ``config``."""

    @abstractmethod
    def geometry(self, config: Any) -> Geometry:
        """The shape of the attention of a model of ``config``."""

    @abstractmethod
    def head_module(self, model: nn.Module, kind: str, layer: int) -> nn.Module:
        """The module computing attention ``kind`` (one the model has) in ``layer``, whose heads
        :mod:`attnscope.nn.ablation` switches off; ValueError naming the layers there are."""

    @abstractmethod
    def read_scores(
        self, model: nn.Module, recorder: ScoreRecorder, source_length: int
    ) -> tuple[dict[str, Tensor], Tensor | None]:
        """From one teacher-forced pass of one sentence recorded in ``recorder``: kind ->
        (L, H, Q, K) raw scores (``-inf`` where a key is masked), and the cross-attention context
        vectors (L, H, T, Dv), or None for a model without cross-attention."""

    @abstractmethod
    def tiny_config(self, vocab_size: int, score: str | None) -> Any:
        """A tiny config of this family for tests (``score``: the alignment score, if it has one)."""

    def fast_paths(self, config: Any) -> bool:
        """Whether decoding paths outside the model written for the shipped Transformer's layout
        (static greedy, :mod:`attnscope.decoding.static_greedy`) may run it. (The Transformer gates its
        own step paths, :mod:`attnscope.nn.layers` on prepared weights and :mod:`attnscope.nn.native`, inside itself.)"""
        return False


_FAMILIES: dict[str, Family] = {}
_builtins_loaded = False
BUILTIN_ARCHITECTURES: frozenset[str] = frozenset(CONFIG_CLASSES)  # whose config classes config.py lists


def register(family: Family) -> Family:
    """Register ``family`` under its architecture tag (and its config class, so that
    ``config_from_dict`` reads its ``config.json``). Returns it."""
    tag = family.architecture
    if tag in _FAMILIES and type(_FAMILIES[tag]) is not type(family):
        raise ValueError(f"architecture {tag!r} is already registered by {type(_FAMILIES[tag]).__name__}")
    _FAMILIES[tag] = family
    CONFIG_CLASSES.setdefault(tag, family.config_class)
    return family


def unregister(architecture: str) -> None:
    """Remove a family registered by :func:`register` (for tests that register their own)."""
    family = _FAMILIES.pop(architecture, None)
    if family is not None and CONFIG_CLASSES.get(architecture) is family.config_class:
        if architecture not in BUILTIN_ARCHITECTURES:
            del CONFIG_CLASSES[architecture]



def _load_builtins() -> None:
    global _builtins_loaded
    if not _builtins_loaded:
        for module in BUILTIN_MODULES:
            importlib.import_module(module)
        _builtins_loaded = True


def families() -> dict[str, Family]:
    """Every registered family by architecture tag."""
    _load_builtins()
    return dict(_FAMILIES)


def family(architecture: str) -> Family:
    """The family tagged ``architecture``; ValueError naming the registered ones otherwise."""
    _load_builtins()
    if architecture not in _FAMILIES:
        raise ValueError(f"unknown architecture {architecture!r}; choose one of {', '.join(_FAMILIES)}")
    return _FAMILIES[architecture]


def family_of(config: Any) -> Family:
    """The family of a config (anything with an ``architecture`` tag)."""
    return family(str(config.architecture))


def geometry_of(config: Any) -> Geometry:
    """The attention geometry of a model of ``config``."""
    return family_of(config).geometry(config)
