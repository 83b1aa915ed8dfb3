"""What the server knows how to run, from the registries: the alignment score functions
(:data:`attnscope.nn.scores.SCORE_FUNCTIONS`) and the model families (:mod:`attnscope.nn.family`). The pages
read their labels and formulas from here instead of keeping copies."""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel, Field

from attnscope.nn.family import families
from attnscope.nn.scores import SCORE_FUNCTIONS

router = APIRouter(prefix="/api", tags=["api"])


class ScoreFunctionInfo(BaseModel):
    name: str = Field(description="As in config.json and the `score` of /api/models.")
    label: str = Field(description="As people read it.")
    arguments: str = Field(description="What it scores: `s, h_i` (decoder state, encoder state i) or `s, i`.")
    formula: str = Field(description="score(arguments) in plain Unicode; s, h_i the states, n their size.")
    latex: str = Field(description="The same formula in LaTeX.")
    paper: str
    parameters: str = Field(description="What it learns.")
    reading: str = Field(description="What to expect in the numbers and the heatmaps.")
    module: str | None = Field(description="The Python class computing it; null for no attention.")


class FamilyInfo(BaseModel):
    architecture: str = Field(description="As in config.json and /api/models.")
    label: str
    formula: str = Field(description="Its attention score where the family fixes one (the Transformer's); else empty.")


class ScoreFunctionsResponse(BaseModel):
    score_functions: list[ScoreFunctionInfo] = Field(description="In the classic table's order, no attention last.")
    families: list[FamilyInfo]


@router.get(
    "/score-functions",
    response_model=ScoreFunctionsResponse,
    summary="The alignment score functions and model families this server knows",
)
async def score_functions() -> ScoreFunctionsResponse:
    return ScoreFunctionsResponse(
        score_functions=[ScoreFunctionInfo.model_validate(f.to_dict()) for f in SCORE_FUNCTIONS.values()],
        families=[FamilyInfo(architecture=tag, label=f.label, formula=f.score_formula) for tag, f in families().items()],
    )
