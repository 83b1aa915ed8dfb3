"""BART (and its translation fine-tunes): post-norm, a norm after the embeddings, learned
positions from row 2; its tokenizer is byte-level BPE (a ``tokenizer.json``)."""

from __future__ import annotations

from typing import ClassVar

from attnscope.hf.converters import register
from attnscope.hf.converters.bart_lineage import BartLineage


class BartConverter(BartLineage):
    model_types: ClassVar[tuple[str, ...]] = ("bart",)
    label: ClassVar[str] = "BART"

    def __init__(self) -> None:
        super().__init__(pre_norm=False, embedding_norm=True, final_norm=False)


register(BartConverter())
