"""What the server knows how to run, from the registries: the alignment score functions
(:data:`attnscope.nn.scores.SCORE_FUNCTIONS`), the model families (:mod:`attnscope.nn.family`) and
the explanation methods (:mod:`attnscope.explain.registry`). The pages read their labels,
formulas and help texts from here instead of keeping copies."""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel, Field

from attnscope.analysis.roles import ALIGNMENT, POSITIONAL, RARE, ROLES, SINK
from attnscope.explain.registry import methods as explain_methods
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


class ExplainDraw(BaseModel):
    field: str = Field(description="The key of `explanations` holding it.")
    per: str = Field(description="`head`: [layer][head][query][key] per kind; `layer`: [layer][query][key] (every head the same).")
    parts: dict[str, str] | None = Field(description="Attention kind -> the key under `field` holding that kind (null: keyed by kind).")
    normalise: bool = Field(description="Whether the pages rescale each row to sum to 1 before drawing it.")


class ExplainMethodInfo(BaseModel):
    name: str = Field(description="The value to put in a request's `explain`.")
    label: str = Field(description="As people read it (short).")
    long_label: str = Field(description="As a table row names it.")
    paper: str = Field(description="The paper that defines it (authors, year, title).")
    url: str = Field(description="Where the paper is.")
    help: str = Field(description="What it shows, in a sentence or two.")
    families: dict[str, str | None] = Field(
        description="Each registered family (architecture) -> null where the method runs on its models, else why it does not."
    )
    fields: list[str] = Field(description="The keys it adds to an answer's `explanations`.")
    draw: ExplainDraw = Field(description="How the pages draw it in the attention heatmap.")


class ExplainMethodsResponse(BaseModel):
    methods: list[ExplainMethodInfo] = Field(description="Every registered explanation method, in the order the pages list them.")


@router.get(
    "/explain-methods",
    response_model=ExplainMethodsResponse,
    summary="The explanation methods this server computes (`explain`), with their papers and families",
)
async def explain_methods_route() -> ExplainMethodsResponse:
    return ExplainMethodsResponse(methods=[ExplainMethodInfo.model_validate(m.to_dict()) for m in explain_methods().values()])


# Each head role's short label (badges, grid cells) and meaning, with the thresholds of the rules
# in attnscope.analysis.roles (the pages read them here, docs/analysis.md explains them).
ROLE_TEXT: dict[str, tuple[str, str]] = {
    "sink": ("sink", f"parks its weight on the boundary token (</s>, or <s> in the decoder): at least {SINK:.0%} of it"),
    "positional-previous": ("prev", f"looks at the previous position (self-attention, at least {POSITIONAL:.0%} of its weight)"),
    "positional-same": ("same", f"looks at its own position (self-attention, at least {POSITIONAL:.0%} of its weight)"),
    "positional-next": ("next", f"looks at the next position (self-attention, at least {POSITIONAL:.0%} of its weight)"),
    "alignment": ("align", f"cross-attention that aligns words: corpus word-alignment F1 ≥ {ALIGNMENT}"),
    "rare-word": ("rare", f"attends to the sentence's rarest source token (at least {RARE:.0%} of its weight)"),
    "mixed": ("mixed", "none of the rules holds"),
}


class HeadRoleInfo(BaseModel):
    name: str = Field(description="As in a head's `role` in /api/models/{id}/analysis.")
    short: str = Field(description="A short label for badges and grid cells.")
    help: str = Field(description="What the role means, with its rule's threshold.")


class HeadRolesResponse(BaseModel):
    roles: list[HeadRoleInfo] = Field(description="In the order the rules are tried (the first that holds names the head).")


@router.get("/head-roles", response_model=HeadRolesResponse, summary="The head roles of `attnscope analyze` and what they mean")
async def head_roles() -> HeadRolesResponse:
    return HeadRolesResponse(
        roles=[HeadRoleInfo(name=r, short=ROLE_TEXT.get(r, (r, ""))[0], help=ROLE_TEXT.get(r, (r, r))[1]) for r in ROLES]
    )
