"""Request and response parts about single heads: which heads to switch off (ablation), which
head's attention becomes a hard word alignment, and that alignment in Pharaoh format."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from attnscope.alignment.rows import Rows

MAX_DISABLED_HEADS = 512


class HeadRef(BaseModel):
    """One attention head, named as in the attention matrices."""

    model_config = ConfigDict(extra="forbid", strict=True)

    kind: Literal["cross", "encoder_self", "decoder_self"] = Field(description="The attention kind.")
    layer: int = Field(ge=0, description="0-based layer (0 for RNN models).")
    head: int = Field(ge=0, description="0-based head in that layer (0 for RNN models).")


class CrossHead(BaseModel):
    """One cross-attention head whose rows give the hard alignment."""

    model_config = ConfigDict(extra="forbid", strict=True)

    kind: Literal["cross"] = Field(description="Only cross-attention aligns target to source words.")
    layer: int = Field(ge=0, description="0-based decoder layer.")
    head: int = Field(ge=0, description="0-based head.")
    rows: Rows | None = Field(
        default=None,
        description="Which step's row aligns a target word: 'produces' (the step that outputs it) or "
        "'reads' (the next step, whose input it is). Default: the convention the head was trained "
        "on (a supervised head's card says), otherwise 'produces'.",
    )


AlignmentChoice = CrossHead | Literal["average"]

ALIGNMENT_DESCRIPTION = (
    "Ask for a hard word alignment (word_alignment in the answer) from one cross-attention head, "
    '{"kind": "cross", "layer": L, "head": H}, or "average" (the mean of every cross head). Words are '
    "Moses tokens of the source and of the output text; each target word is linked to the source "
    "word of highest attention (the row of the step that produces it, or with \"rows\": \"reads\" the "
    "step that reads it; a source word's weight sums its pieces, a target word's row averages its "
    "pieces; </s> is dropped)."
)
DISABLE_DESCRIPTION = (
    "Heads to switch off while decoding (Michel et al. 2019): each listed head's output is zeroed "
    "before the output projection (for an RNN, its attention context), in every step; the answer "
    "is the new translation and attention. Empty: the model as trained."
)


class WordAlignment(BaseModel):
    """A hard alignment, as word aligners write it."""

    pharaoh: str = Field(
        description="Space-separated i-j pairs: source word i is aligned to target word j (0-based, "
        "sorted by j); exactly one pair per target word."
    )
    source_words: list[str] = Field(description="The source words i indexes (Moses tokenisation).")
    target_words: list[str] = Field(description="The target words j indexes (Moses tokenisation).")
    head: CrossHead | Literal["average"] = Field(
        description="Where the alignment was read from (for a head, with the row convention used)."
    )
