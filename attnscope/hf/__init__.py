"""Import Hugging Face encoder-decoders into attnscope's own Transformer.

An imported model becomes an ordinary model folder: its weights renamed (and its vocabulary
renumbered) into :class:`~attnscope.nn.transformer.Transformer` in one of the layouts of
:class:`~attnscope.nn.config.TransformerConfig`, so every feature of the shipped Transformer (beam
tree, prefix, alternatives, scores, heads switched off, alignment, attribution) applies to it
unchanged. ``transformers`` is needed to import, never to serve: it is the optional extra
``attnscope[hf]``, imported lazily through :func:`require_transformers`.
"""

from __future__ import annotations

from types import ModuleType

from attnscope.extras import require


class ImportFailure(ValueError):
    """A source that cannot be imported; the message says what is missing."""


def require_transformers() -> ModuleType:
    """The ``transformers`` module, or :class:`~attnscope.extras.MissingExtra` naming the extra."""
    return require("transformers", "hf", purpose="importing a Hugging Face model")
