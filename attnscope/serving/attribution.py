"""``POST /api/attribution``: gradient attribution (input × gradient, integrated gradients) of a
translation or a given target, beside the model's cross-attention, with the rank correlation of
each head's attention with the attribution. Thin: the request, answer and job live in
:mod:`attnscope.engine.attribution_answer` (the in-process API runs the same job)."""

from __future__ import annotations

from fastapi import APIRouter, Request

from attnscope.engine.attribution_answer import (
    AttributionRequest,
    AttributionResponse,
    attribution_answer,
)
from attnscope.engine.schemas import ErrorResponse
from attnscope.serving import llm_attribution, llm_common
from attnscope.serving.deps import ServiceDep
from attnscope.serving.disconnect import watch_disconnect

router = APIRouter(prefix="/api", tags=["api"])


@router.post(
    "/attribution",
    response_model=AttributionResponse,
    responses={404: {"model": ErrorResponse}, 422: {"model": ErrorResponse}},
    summary="Gradient attribution of each target token to the source tokens, beside attention",
)
async def attribution(body: AttributionRequest, service: ServiceDep, request: Request) -> AttributionResponse:
    """Which source tokens the output depends on by gradients, and how well each attention head's
    ranking of the source agrees (Jain & Wallace 2019). A decoder-only model (docs/llm.md) is
    attributed to the source tokens of its prompt."""
    async with watch_disconnect(request) as gone:
        if llm := llm_common.served_llm(request, body.model):
            return await llm_attribution.attribution(service, llm, body, gone=gone)
        return await attribution_answer(service, body, gone=gone)
