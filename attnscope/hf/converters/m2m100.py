"""M2M100 and NLLB (both ``model_type`` "m2m_100"): pre-norm with final norms, fairseq's
sinusoidal positions (from ``padding_idx + 1``), a source and a forced target language code."""

from __future__ import annotations

from typing import ClassVar

from attnscope.hf.converters import register
from attnscope.hf.converters.bart_lineage import BartLineage, first_padded


class M2M100Converter(BartLineage):
    model_types: ClassVar[tuple[str, ...]] = ("m2m_100",)
    label: ClassVar[str] = "M2M100/NLLB"
    languages: ClassVar[bool] = True

    def __init__(self) -> None:
        super().__init__(pre_norm=True, embedding_norm=False, final_norm=True, first_position=first_padded)


register(M2M100Converter())
