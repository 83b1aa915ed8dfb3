"""mBART (mBART-50's many-to-many models): pre-norm with final norms and an embedding norm,
learned positions from row 2, language codes such as ``de_DE``."""

from __future__ import annotations

from typing import ClassVar

from attnscope.hf.converters import register
from attnscope.hf.converters.bart_lineage import BartLineage


class MBartConverter(BartLineage):
    model_types: ClassVar[tuple[str, ...]] = ("mbart",)
    label: ClassVar[str] = "mBART"
    languages: ClassVar[bool] = True

    def __init__(self) -> None:
        super().__init__(pre_norm=True, embedding_norm=True, final_norm=True)


register(MBartConverter())
