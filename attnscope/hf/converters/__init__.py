"""The registry of Hugging Face converters: one :class:`Converter` per ``model_type``.

A converter says how one Hugging Face model type (its ``config.json``'s ``model_type``) maps onto
attnscope's :class:`~attnscope.nn.transformer.Transformer`: the
:class:`~attnscope.nn.config.TransformerConfig` fields of its config and the attnscope state
dict of its weights. These are *converters*, not model families: every import becomes the one
``transformer`` family of :mod:`attnscope.nn.family`.

The shipped converters are the modules of :data:`BUILTIN_MODULES`, imported on the first
look-up; each calls :func:`register` once. Adding one is one module (``docs/import.md``,
"Adding a converter"): subclass :class:`Converter` (or
:class:`~attnscope.hf.converters.bart_lineage.BartLineage` for a BART-like layer) and
``register(MyConverter())``.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from typing import Any, ClassVar

from torch import Tensor

from attnscope.hf import ImportFailure

BUILTIN_MODULES: tuple[str, ...] = tuple(
    f"attnscope.hf.converters.{name}" for name in ("marian", "m2m100", "bart", "mbart", "t5")
)

REFUSED: dict[str, str] = {
    "fsmt": "FSMT has separate source and target vocabularies; attnscope's Transformer shares one",
    "pegasus": "Pegasus is not a translation family attnscope imports",
}


class Converter(ABC):
    """One Hugging Face model type (or several sharing a layout) in attnscope's terms."""

    model_types: ClassVar[tuple[str, ...]]  # the config's model_type values it converts
    label: ClassVar[str]  # as people read it ("Marian"), shown on the model's card
    languages: ClassVar[bool] = False  # a multilingual model: language codes chosen per request

    @abstractmethod
    def config_fields(self, hf_config: Any, max_positions: int) -> dict[str, Any]:
        """The TransformerConfig fields of ``hf_config`` (vocab_size and tied_output aside);
        ImportFailure naming what attnscope cannot represent."""

    @abstractmethod
    def convert_weights(self, hf_model: Any) -> tuple[dict[str, Tensor], dict[str, Any]]:
        """The attnscope state dict of ``hf_model`` in the original vocabulary's order, and the
        facts the config needs (``max_positions``, ``tied_output``, optional ``scale_output``).
        ImportFailure for a parameter no rule maps (naming it)."""

    def check_config(self, hf_config: Any) -> None:
        """Refuse a config before its weights are loaded (the importer calls it first): by
        default, whatever ``config_fields`` refuses."""
        self.config_fields(hf_config, max_positions=1)


_CONVERTERS: dict[str, Converter] = {}
_builtins_loaded = False


def register(converter: Converter) -> Converter:
    """Register ``converter`` under each of its model types (a type registered by another
    converter class is a ValueError). Returns it."""
    for model_type in converter.model_types:
        held = _CONVERTERS.get(model_type)
        if held is not None and type(held) is not type(converter):
            raise ValueError(f"model type {model_type!r} is already converted by {type(held).__name__}")
    for model_type in converter.model_types:
        _CONVERTERS[model_type] = converter
    return converter


def unregister(model_type: str) -> None:
    """Forget the converter of ``model_type`` (for tests that register their own)."""
    _CONVERTERS.pop(model_type, None)


def _load_builtins() -> None:
    global _builtins_loaded
    if not _builtins_loaded:
        _builtins_loaded = True
        for module in BUILTIN_MODULES:
            importlib.import_module(module)


def converters() -> dict[str, Converter]:
    """model_type -> its converter, every registered one."""
    _load_builtins()
    return dict(_CONVERTERS)


def converter_for(hf_config: Any) -> Converter:
    """The converter of a Hugging Face config (or a model_type string); ImportFailure naming
    why it is refused or which model types attnscope imports."""
    _load_builtins()
    model_type = hf_config if isinstance(hf_config, str) else str(getattr(hf_config, "model_type", ""))
    if model_type in _CONVERTERS:
        return _CONVERTERS[model_type]
    if model_type in REFUSED:
        raise ImportFailure(f"cannot import model type {model_type!r}: {REFUSED[model_type]}")
    # the decoder-only types are imported apart (hf/llm_import.py), but a user asks for both
    from attnscope.hf.llm_families import LLM_TYPES

    known = ", ".join(sorted(_CONVERTERS))
    raise ImportFailure(
        f"cannot import model type {model_type!r}: attnscope imports {known} (encoder-decoders) "
        f"and {', '.join(sorted(LLM_TYPES))} (decoder-only LLMs)"
    )
