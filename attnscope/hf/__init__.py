"""Import Hugging Face encoder-decoders into attnscope's own Transformer.

An imported model becomes an ordinary model folder: its weights renamed (and its vocabulary
renumbered) into :class:`~attnscope.nn.transformer.Transformer` in one of the layouts of
:class:`~attnscope.nn.config.TransformerConfig`, so every feature of the shipped Transformer (beam
tree, prefix, alternatives, scores, heads switched off, alignment, attribution) applies to it
unchanged. ``transformers`` is needed to import, never to serve: it is the optional extra
``attnscope[hf]``, imported lazily through :func:`require_transformers`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from types import ModuleType
from typing import TYPE_CHECKING

from attnscope.extras import require

if TYPE_CHECKING:
    from torch import Tensor


class ImportFailure(ValueError):
    """A source that cannot be imported; the message says what is missing."""


def require_transformers() -> ModuleType:
    """The ``transformers`` module, or :class:`~attnscope.extras.MissingExtra` naming the extra."""
    return require("transformers", "hf", purpose="importing a Hugging Face model")


def renamed(name: str, rules: Sequence[tuple[str, str]]) -> str | None:
    """``name`` rewritten by the first ``(pattern, replacement)`` rule whose pattern it matches
    (``re.sub``), or None when none does: how every importer's layer-name table is read."""
    for pattern, replacement in rules:
        if re.search(pattern, name):
            return re.sub(pattern, replacement, name)
    return None


def renamed_state(
    state: Mapping[str, Tensor], rules: Sequence[tuple[str, str]]
) -> tuple[dict[str, Tensor], list[str]]:
    """``state``'s tensors (float32 copies) under the names ``rules`` give them (:func:`renamed`),
    and the names no rule maps, in order (the importer refuses those, naming them)."""
    out: dict[str, Tensor] = {}
    unmapped = []
    for name, tensor in state.items():
        ours = renamed(name, rules)
        if ours is None:
            unmapped.append(name)
        else:
            out[ours] = tensor.detach().float()
    return out, unmapped
