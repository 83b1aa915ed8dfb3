"""Gradient attribution of a translation (or a given target), beside the model's cross-attention:
the request and answer of ``POST /api/attribution`` and the job that answers it, on the service
alone (no web), so the route and the in-process API (``attnscope.load(...).attribute``) give the
same answer. The numbers come from :mod:`attnscope.attribution`."""

from __future__ import annotations

import threading
from collections.abc import Callable
from functools import partial
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from attnscope.attribution import attribute, normalise_rows, summary
from attnscope.engine import limits, route_prices
from attnscope.engine.answers import matrix
from attnscope.engine.errors import InvalidInput
from attnscope.engine.registry import ServedModel
from attnscope.engine.schemas import BeamSize, ModelId, Target, Text
from attnscope.engine.service import ModelService
from attnscope.explain.contrastive import contrastive
from attnscope.repository import LoadedModel
from attnscope.translator import Translation

__all__ = ["AttributionRequest", "AttributionResponse", "ContrastRequest", "attribution_answer"]

Grid = list[list[float | None]]  # [layer][head]


class ContrastRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    position: Annotated[int, Field(ge=0, description="Index into target_tokens.")]
    token: str = Field(min_length=1, max_length=100, description="The foil: one vocabulary piece, e.g. an `alternatives` token (for a decoder-only model any text, scored as a whole continuation).")


class AttributionRequest(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        json_schema_extra={
            "examples": [
                {"model": "en-de-transformer", "text": "A man is riding a bicycle."},
                {"model": "en-de-transformer", "text": "A man is riding a bicycle.", "target": "Ein Mann fährt Fahrrad.", "steps": 16},
            ]
        },
    )

    model: ModelId
    text: Text = Field(description="Source text.")
    target: Target | None = Field(
        default=None, description="Attribute this target (teacher-forced); default: the model's own translation."
    )
    beam_size: BeamSize = 5
    steps: Annotated[int, Field(ge=1, le=128, description="Integrated-gradients steps (trapezoid intervals).")] = 16
    contrast: ContrastRequest | None = Field(
        default=None,
        description="Also explain why the model wrote its token at `position` rather than `token` (Yin & Neubig 2022).",
    )


class Correlations(BaseModel):
    input_x_gradient: Grid = Field(description="[layer][head] Spearman ρ with input × gradient.")
    integrated_gradients: Grid = Field(description="[layer][head] Spearman ρ with integrated gradients.")


class ContrastiveAttribution(BaseModel):
    position: int
    token: str = Field(description="The token the model wrote there.")
    foil: str = Field(description="The token it is contrasted with.")
    difference: float = Field(description="log p(token) − log p(foil) at that position (the logit difference; a foil of several tokens: its whole teacher-forced log-probability).")
    input_x_gradient: list[float] = Field(description="[source token] |x·∂f/∂x| of f = the difference, normalised to sum 1.")
    integrated_gradients: list[float] = Field(description="The same for integrated gradients from the all-<pad> source.")
    completeness_gap: float = Field(description="|Σ_s IG[s] − (f(x) − f(baseline))|.")


class AttributionResponse(BaseModel):
    model: str
    translation: str = Field(description="The attributed target text (the translation, or the given target).")
    source_tokens: list[str] = Field(description="Source pieces; the last is </s>.")
    target_tokens: list[str] = Field(description="Target pieces; the last is </s>.")
    input_x_gradient: list[list[float]] = Field(
        description="target_tokens × source_tokens: |x·∂f_t/∂x| summed over the embedding, each row normalised to sum 1; "
        "f_t = log p(target token t)."
    )
    integrated_gradients: list[list[float]] = Field(
        description="The same for integrated gradients from the all-<pad> (zero) source embedding."
    )
    cross_attention: list[list[list[list[float]]]] | None = Field(
        description="[layer][head][target][source] the model's cross-attention on the same pair (null: none)."
    )
    correlation: Correlations | None = Field(
        description="Per head, the mean over target rows of Spearman's rank correlation between attention and "
        "attribution (null without cross-attention; a row where either side is constant is skipped)."
    )
    completeness_gap: float = Field(
        description="max over target tokens of |Σ_s IG[t,s] − (f_t(x) − f_t(baseline))| (0 is exact; shrinks with steps)."
    )
    contrastive: ContrastiveAttribution | None = Field(default=None, description="With `contrast`: the contrastive attribution.")


async def attribution_answer(
    service: ModelService, body: AttributionRequest, *, gone: threading.Event | None = None
) -> AttributionResponse:
    """The answer to ``body``: the model held loaded while it runs, the limits checked, the
    backward passes run in a decode slot of their own; ``gone`` (the client left) and the
    deadline stop them within one target token."""
    async with service.holding(body.model) as served:  # loaded if needed, kept until answered
        return await _attribution(served, body, service, gone)


async def _attribution(
    served: ServedModel, body: AttributionRequest, service: ModelService, gone: threading.Event | None
) -> AttributionResponse:
    settings, config = service.settings, served.loaded.config
    source_length = limits.check_text(settings, served, body.text, ("body", "text"))
    knobs = {"steps": body.steps, "contrast": 0 if body.contrast is None else 1}
    translated: Translation | None = None
    if body.target is None:  # translated first, in a slot of its own: the attribution is priced on it
        translated = await route_prices.translate_first(service, served, body.text, beams=body.beam_size, gone=gone)
        if not translated.target_ids:
            raise InvalidInput(("body", "target"), "the translation is empty: nothing to attribute")
        shape = route_prices.shape_of(config, len(translated.source_ids), len(translated.target_ids), **knobs)
    else:
        target_length = limits.check_text(settings, served, body.target, ("body", "target"), empty_ok=True)
        shape = route_prices.shape_of(config, source_length, target_length, **knobs)
    cost = route_prices.price_route(settings, "attribution", shape)  # 422 before any work past a limit
    # The deadline and a disconnect stop the backward passes within one target token
    return await service.run_stoppable(partial(_job, served, body, translated), gone=gone, cost=cost)


def _job(
    served: ServedModel, body: AttributionRequest, translated: Translation | None, should_stop: Callable[[], bool]
) -> AttributionResponse:
    """The attribution of ``translated`` (the model's translation), or of ``body.target`` aligned."""
    model = served.loaded.model
    if translated is None:
        (result,) = served.translator.align([body.text], [body.target or ""])
        if not result.target_ids:
            raise InvalidInput(("body", "target"), "the translation is empty: nothing to attribute")
    else:
        result = translated
    attr = attribute(model, result.source_ids, result.target_ids, steps=body.steps, should_stop=should_stop)
    contrasted = None if body.contrast is None else _contrast(served.loaded, result, body.contrast, body.steps)
    cross = result.hypothesis.cross
    s = summary(attr, cross)
    tok = served.loaded.tokenizer
    return AttributionResponse(
        model=served.loaded.id,
        translation=result.text if body.target is None else body.target,
        source_tokens=tok.pieces(result.source_ids),
        target_tokens=tok.pieces(result.target_ids),
        input_x_gradient=[[round(v, 6) for v in row] for row in s["input_x_gradient"].tolist()],
        integrated_gradients=[[round(v, 6) for v in row] for row in s["integrated_gradients"].tolist()],
        cross_attention=None if cross is None else matrix(cross).tolist(),
        correlation=None if s["correlation"] is None else Correlations(**s["correlation"]),
        completeness_gap=round(float(attr.completeness_gap.abs().max()), 6),
        contrastive=contrasted,
    )


def _contrast(loaded: LoadedModel, result: Translation, asked: ContrastRequest, steps: int) -> ContrastiveAttribution:
    """The contrastive attribution of ``asked`` on ``result``; 422 on ``contrast`` for a position
    past the target, a foil that is not one vocabulary piece, or the token written there."""
    tok, target = loaded.tokenizer, result.target_ids
    if asked.position >= len(target):
        raise InvalidInput(("body", "contrast", "position"), f"is {asked.position}; the target has {len(target)} tokens")
    foil = tok.id_of(asked.token)  # the model's own id (an import renumbers its vocabulary)
    if foil is None:
        raise InvalidInput(("body", "contrast", "token"), f"{asked.token!r} is not a piece of the vocabulary")
    if foil == target[asked.position]:
        raise InvalidInput(("body", "contrast", "token"), "is the token the model wrote there: nothing to contrast")
    found = contrastive(loaded.model, result.source_ids, target, position=asked.position, foil=foil, steps=steps)
    ixg, ig = normalise_rows(found.input_x_gradient[None])[0], normalise_rows(found.integrated_gradients[None])[0]
    return ContrastiveAttribution(
        position=asked.position,
        token=tok.pieces([target[asked.position]])[0],
        foil=asked.token,
        difference=round(found.f, 6),
        input_x_gradient=[round(v, 6) for v in ixg.tolist()],
        integrated_gradients=[round(v, 6) for v in ig.tolist()],
        completeness_gap=round(abs(found.completeness_gap), 6),
    )
