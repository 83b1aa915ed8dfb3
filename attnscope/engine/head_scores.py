"""What a model's card says about each attention head, for ``GET /api/models``: word-alignment
F1/AER of every cross-attention head (card key ``alignment``, written by ``attnscope evaluate
--alignment --update-card``) and test BLEU with each head switched off (card key ``ablation``,
``attnscope evaluate --ablate --update-card``).

A card is a file anyone can edit or copy from another model: a section that does not parse, or
whose grids are not the model's ``[layer][head]`` shape, is left out with a warning instead of
failing the model list."""

from __future__ import annotations

from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

Grid = list[list[float | None]]  # [layer][head]
Kind = Literal["cross", "encoder_self", "decoder_self"]
Section = TypeVar("Section", bound=BaseModel)


class AlignmentScores(BaseModel):
    """Precision, recall, F1 and AER of one alignment against the reference links."""

    precision: float
    recall: float
    f1: float
    aer: float


class ScoredHead(BaseModel):
    layer: int = Field(description="0-based decoder layer.")
    head: int = Field(description="0-based head.")
    f1: float


class CardAlignment(BaseModel):
    """Every cross-attention head as a word aligner (each target word linked to the source word it
    attends to most, on the step that produces it) against eflomal + grow-diag-final-and."""

    model_config = ConfigDict(extra="ignore")

    split: str = Field(description="The test split scored, e.g. test2016.")
    sentences: int | None = Field(default=None, description="Sentence pairs scored.")
    convention: str | None = Field(default=None, description="How attention was turned into links.")
    f1: Grid = Field(description="[layer][head] word-alignment F1 of each cross-attention head (0-based).")
    aer: Grid = Field(description="[layer][head] alignment error rate (1 − F1 with sure-only references).")
    precision: Grid = Field(description="[layer][head] precision.")
    recall: Grid = Field(description="[layer][head] recall.")
    per_layer: list[AlignmentScores] = Field(description="Per layer: the mean of its heads' attention as one aligner.")
    average_of_heads: AlignmentScores = Field(description="The mean of every cross-attention head as one aligner.")
    diagonal: AlignmentScores = Field(description="The baseline that links target word j to source word ~j·S/T.")
    best_head: ScoredHead
    worst_head: ScoredHead


class CardAblation(BaseModel):
    """Test BLEU with one head switched off at a time (Michel et al. 2019)."""

    model_config = ConfigDict(extra="ignore")

    split: str = Field(description="The test split translated.")
    beam_size: int
    bleu_convention: str | None = Field(default=None, description="e.g. sacreBLEU lowercased 13a.")
    baseline: float = Field(description="BLEU with every head on.")
    bleu_without_head: dict[Kind, Grid] = Field(
        description="Per attention kind, [layer][head] BLEU with that head alone switched off (0-based)."
    )


def _shape(grid: Grid) -> tuple[int, int]:
    return len(grid), len(grid[0]) if grid else 0


def _fits(grid: Grid, want: tuple[int, int] | None) -> bool:
    return want is not None and _shape(grid) == want and all(len(row) == want[1] for row in grid)


def _parse(model: type[Section], card: dict[str, Any], key: str, warnings: list[str]) -> Section | None:
    if key not in card:
        return None
    try:
        return model.model_validate(card[key])
    except ValidationError as err:
        warnings.append(f"card.json: '{key}' left out, it does not parse ({err.error_count()} errors)")
        return None


def card_head_scores(
    card: dict[str, Any], shapes: dict[str, tuple[int, int]]
) -> tuple[CardAlignment | None, CardAblation | None, list[str]]:
    """The card's ``alignment`` and ``ablation`` sections, checked against ``shapes`` (kind ->
    (layers, heads) of the model's attention), and a warning for each section left out."""
    warnings: list[str] = []
    alignment = _parse(CardAlignment, card, "alignment", warnings)
    if alignment is not None:
        want = shapes.get("cross")
        if not all(_fits(g, want) for g in (alignment.f1, alignment.aer, alignment.precision, alignment.recall)):
            warnings.append(f"card.json: 'alignment' left out, its grid is {_shape(alignment.f1)} "
                            f"but the model's cross-attention is {want or 'absent'}")
            alignment = None
    ablation = _parse(CardAblation, card, "ablation", warnings)
    for kind, grid in (ablation.bleu_without_head.items() if ablation else []):
        if not _fits(grid, shapes.get(kind)):
            warnings.append(f"card.json: 'ablation' left out, its {kind} grid is {_shape(grid)} "
                            f"but the model's is {shapes.get(kind) or 'absent'}")
            ablation = None
            break
    return alignment, ablation, warnings
