"""The registry of explanation methods (:data:`methods`): the one place that names each method,
its label, paper, help text, the model families it applies to (and why not elsewhere), what it
costs to admit, the fields it adds to an answer and how the pages draw it, and how it runs on
one sentence. :func:`attnscope.explain.explain`, the API's schemas, admission
(``attnscope.engine.limits``), ``GET /api/explain-methods`` and the pages read it.

Adding a method is one module that ends with one :func:`register` call (docs/extending.md); the
shipped ones are :mod:`.norm`, :mod:`.rollout`, :mod:`.value_zeroing` and :mod:`.alti`, loaded
in :data:`BUILTIN_MODULES` order, which is the order of the catalog and of an answer's fields.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, cast

import torch

from attnscope.explain.trace import Trace, trace
from attnscope.nn.base import Seq2Seq
from attnscope.nn.decoder_only import DecoderOnlyLM
from attnscope.nn.family import Geometry, families, family_of, geometry_of
from attnscope.nn.transformer import Transformer

# The modules that register the shipped methods (each ends with a ``register(...)`` call).
BUILTIN_MODULES: tuple[str, ...] = (
    "attnscope.explain.norm",
    "attnscope.explain.rollout",
    "attnscope.explain.value_zeroing",
    "attnscope.explain.alti",
)

# JSON schemas of the shapes a method's answer field may take (``AnswerField.schema``).
_FLOATS: dict[str, Any] = {"type": "array", "items": {"type": "number"}}


def nested(depth: int) -> dict[str, Any]:
    """The JSON schema of a ``depth``-deep list of lists of numbers."""
    schema = _FLOATS
    for _ in range(depth - 1):
        schema = {"type": "array", "items": schema}
    return schema


def per_kind(depth: int) -> dict[str, Any]:
    """The JSON schema of attention kind -> ``depth``-deep nested lists."""
    return {"type": "object", "additionalProperties": nested(depth)}


@dataclass
class Sentence:
    """One sentence being explained: the model, source ids (with EOS) and target ids (the output
    tokens, usually ending with EOS). :attr:`trace` is the Transformer's teacher-forced trace,
    run once on first use and shared by every method asked for. A decoder-only model's
    ``source_ids`` are its whole prompt and ``source_span`` the source's [start, end) in it."""

    model: Seq2Seq | DecoderOnlyLM
    source_ids: list[int]
    target_ids: list[int]
    source_span: tuple[int, int] | None = None

    @cached_property
    def trace(self) -> Trace:
        return trace(cast(Transformer, self.model), self.source_ids, self.target_ids)


@dataclass(frozen=True)
class Size:
    """One sentence's sizes as admission sees them: the model's ``geometry``, ``s`` source and
    ``t`` output tokens (each with EOS)."""

    geometry: Geometry
    s: int
    t: int

    def attention(self) -> dict[str, int]:
        """kind -> the floats of its [layer][head][query][key] attention."""
        g, s, t = self.geometry, self.s, self.t
        per_head = g.decoder_layers * g.heads_of("cross")  # the decoder's heads (per-stack sizes)
        sizes = {"cross": per_head * t * s, "decoder_self": per_head * t * t, "encoder_self": g.encoder_layers * g.heads_of("encoder_self") * s * s}
        return {kind: sizes[kind] for kind in g.kinds}

    def per_layer(self) -> int:
        """The floats of one [layer][query][key] matrix per kind (the heads folded)."""
        g = self.geometry
        return sum(n // g.heads_of(kind) for kind, n in self.attention().items())


@dataclass(frozen=True)
class AnswerField:
    """One key a method adds to an answer's ``explanations``: its ``name``, ``description`` and
    JSON ``schema`` (for the OpenAPI document)."""

    name: str
    description: str
    schema: Mapping[str, Any]


@dataclass(frozen=True)
class Draw:
    """How the pages draw a method in the attention heatmap: ``field`` of ``explanations``
    holds, per kind (or per ``parts``: kind -> the key under ``field`` that holds that kind),
    [layer][head][query][key] (``per`` "head") or [layer][query][key] (``per`` "layer": every
    head shows the same); ``normalise``: rows rescaled to sum to 1 before drawing."""

    field: str
    per: str = "layer"
    parts: Mapping[str, str] | None = None
    normalise: bool = False


# How a method runs: the sentence -> its result (anything); how its result becomes JSON:
# (result, decimals) -> {answer field: JSON-ready value}.
Runner = Callable[[Sentence], Any]
Encoder = Callable[[Any, int], dict[str, Any]]


@dataclass(frozen=True)
class ExplainMethod:
    """One explanation method.

    ``runs``: a family's ``explainer`` tag (:attr:`attnscope.nn.family.Family.explainer`) -> how
    the method runs on models of that family; ``reasons``: explainer tag -> why it has no
    definition there (a family in neither says that no explanations are defined for it);
    ``unavailable(config)``: a reason tied to one model's config (None: runs); ``cost(size)``:
    admission's price beyond the shared trace, in token-layer passes; ``floats(size)``: the
    numbers it adds to an answer; ``fields``: the keys it adds to ``explanations``;
    ``encode(result, decimals)``: its result as those keys' JSON; ``draw``: how pages draw it."""

    name: str
    label: str
    long_label: str
    paper: str
    url: str
    help: str
    runs: Mapping[str, Runner]
    fields: tuple[AnswerField, ...]
    encode: Encoder
    draw: Draw
    reasons: Mapping[str, str] = field(default_factory=dict)
    unavailable: Callable[[Any], str | None] = lambda config: None
    cost: Callable[[Size], int] = lambda size: 0
    floats: Callable[[Size], int] = lambda size: 0

    def why_not(self, config: Any) -> str | None:
        """Why a model of ``config`` has no such explanation (None: the method runs on it)."""
        family = family_of(config)
        if family.explainer in self.runs:
            return self.unavailable(config)
        if family.explainer in self.reasons:
            return self.reasons[family.explainer]
        return family.explain_elsewhere or f"no explanations are defined for the {config.architecture} family"

    def to_dict(self) -> dict[str, Any]:
        """The API's form (``GET /api/explain-methods``): ``families``: architecture -> null
        where it applies, else why not."""
        reasons: dict[str, str | None] = {}
        for tag, fam in families().items():
            reasons[tag] = self.runs_on(fam.explainer, tag)
        return {
            "name": self.name, "label": self.label, "long_label": self.long_label, "paper": self.paper,
            "url": self.url, "help": self.help, "families": reasons,
            "fields": [f.name for f in self.fields],
            "draw": {"field": self.draw.field, "per": self.draw.per, "parts": dict(self.draw.parts or {}) or None,
                     "normalise": self.draw.normalise},
        }  # fmt: skip

    def runs_on(self, explainer: str, architecture: str) -> str | None:
        """None where the method runs on a family (some of its configs may still lack it, e.g. an
        RNN without attention), else why not."""
        if explainer in self.runs:
            return None
        if explainer in self.reasons:
            return self.reasons[explainer]
        known = families().get(architecture)
        return (known.explain_elsewhere if known else "") or f"no explanations are defined for the {architecture} family"


_METHODS: dict[str, ExplainMethod] = {}
_RANK: dict[str, int] = {}  # a shipped method's place in BUILTIN_MODULES (others after, as registered)
_builtins_loaded = False


def register(method: ExplainMethod) -> ExplainMethod:
    """Register ``method`` under its name (names are API values: lowercase words and ``_``);
    ValueError if another method has the name or claims one of its answer fields. Returns it."""
    if not method.name.replace("_", "").isalnum() or not method.name.islower():
        raise ValueError(f"an explanation method's name is lowercase letters, digits and '_', not {method.name!r}")
    taken = {f.name: m.name for m in _METHODS.values() if m.name != method.name for f in m.fields}
    clash = [f.name for f in method.fields if f.name in taken or f.name == "unavailable"]
    if clash:
        raise ValueError(f"the answer field {clash[0]!r} of {method.name!r} is taken ({taken.get(clash[0], 'unavailable')})")
    module = sys._getframe(1).f_globals.get("__name__", "")
    _RANK[method.name] = BUILTIN_MODULES.index(module) if module in BUILTIN_MODULES else len(BUILTIN_MODULES)
    _METHODS[method.name] = method
    return method


def unregister(name: str) -> None:
    """Remove a method registered by :func:`register` (for tests that register their own)."""
    _METHODS.pop(name, None)
    _RANK.pop(name, None)


def _load_builtins() -> None:
    global _builtins_loaded
    if not _builtins_loaded:
        _builtins_loaded = True
        for module in BUILTIN_MODULES:
            importlib.import_module(module)


def methods() -> dict[str, ExplainMethod]:
    """Every registered method by name, shipped ones first, in :data:`BUILTIN_MODULES` order."""
    _load_builtins()
    return {m.name: m for m in sorted(_METHODS.values(), key=lambda m: _RANK[m.name])}


def names() -> tuple[str, ...]:
    """The registered methods' names, in catalog order."""
    return tuple(methods())


def method(name: str) -> ExplainMethod:
    """The method called ``name``; ValueError naming the registered ones otherwise."""
    known = methods()
    if name not in known:
        raise ValueError(f"unknown explanation method {name!r}; choose from {', '.join(known)}")
    return known[name]


def computed(config: Any, asked: tuple[str, ...] | list[str]) -> tuple[ExplainMethod, ...]:
    """The methods of ``asked`` that run on a model of ``config`` (the rest come back unavailable)."""
    return tuple(method(m) for m in asked if method(m).why_not(config) is None)


def applicable_to(config: Any) -> tuple[str, ...]:
    """The names of every method that runs on a model of ``config``, in catalog order."""
    return tuple(m.name for m in methods().values() if m.why_not(config) is None)


def cost(config: Any, source_length: int, target_length: int, *, asked: tuple[str, ...]) -> int:
    """The work of ``explain`` on one sentence (lengths with EOS), in token-layer passes (one
    position through one layer): the teacher-forced trace, L_e·S + L_d·T, once for any methods
    asked, plus each computed method's own price (:attr:`ExplainMethod.cost`)."""
    if not asked:
        return 0
    g = geometry_of(config)
    size = Size(g, source_length, target_length)
    return g.encoder_layers * source_length + g.decoder_layers * target_length + sum(m.cost(size) for m in computed(config, asked))


def answer_floats(config: Any, source_length: int, target_length: int, *, asked: tuple[str, ...]) -> int:
    """The numbers ``explain`` adds to one answer (lengths with EOS)."""
    size = Size(geometry_of(config), source_length, target_length)
    return sum(m.floats(size) for m in computed(config, asked))


def rounded(t: torch.Tensor, decimals: int) -> list:
    """Any tensor -> nested lists of floats rounded to ``decimals`` (as the attention is)."""
    values: list = t.detach().to("cpu", torch.float64).round(decimals=decimals).tolist()
    return values


def kinds_json(found: Mapping[str, torch.Tensor], decimals: int) -> dict[str, list]:
    """kind -> tensor, as kind -> rounded nested lists."""
    return {kind: rounded(m, decimals) for kind, m in found.items()}


__all__ = [
    "AnswerField", "Draw", "ExplainMethod", "Sentence", "Size", "answer_floats", "applicable_to",
    "computed", "cost", "kinds_json", "method", "methods", "names", "nested", "per_kind", "register", "rounded",
    "unregister",
]  # fmt: skip
