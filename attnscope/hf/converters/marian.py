"""Marian (Helsinki-NLP's opus-mt): post-norm, sinusoidal positions loaded as a table, no
embedding norm, no final norms; a ``>>de<<`` prefix piece for multi-target models."""

from __future__ import annotations

from typing import ClassVar

from attnscope.hf.converters import register
from attnscope.hf.converters.bart_lineage import BartLineage


class MarianConverter(BartLineage):
    model_types: ClassVar[tuple[str, ...]] = ("marian",)
    label: ClassVar[str] = "Marian"

    def __init__(self) -> None:
        super().__init__(pre_norm=False, embedding_norm=False, final_norm=False)


register(MarianConverter())
