"""``GET /api/models/{model_id}/analysis``: a model's head analysis over a corpus (the roles and
statistics ``attnscope analyze`` summarised), read from the model folder's ``analysis/heads.json``
or ``<analysis_dir>/<model id>/heads.json`` (:mod:`attnscope.analysis.summary`). The Models page draws
it per layer × head; the explorer labels each head with its role.

``POST /api/analyze``: the same statistics and roles over the sentences of the request, computed
now (:mod:`attnscope.engine.corpus_analysis`; the Python API's ``analyze``)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, Literal

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from attnscope.analysis.summary import NoAnalysis, check_shape, read_summary, summary_path
from attnscope.engine.corpus_analysis import AnalyzeRequest, AnalyzeResponse, analyze_answer
from attnscope.engine.schemas import ErrorResponse
from attnscope.nn.family import geometry_of
from attnscope.repository import read_config
from attnscope.serving import llm_common
from attnscope.serving.deps import ServiceDep
from attnscope.serving.disconnect import watch_disconnect

router = APIRouter(prefix="/api", tags=["api"])


class HeadSummary(BaseModel):
    """One head's role and corpus statistics (``<stat>_mean`` and ``_q10``/``_q50``/``_q90`` for
    entropy, max_weight, eos_share, punct_share, prev/same/next_share, rare_share; null where a
    statistic does not apply to the kind)."""

    model_config = ConfigDict(extra="allow")

    kind: Literal["cross", "encoder_self", "decoder_self"]
    layer: int = Field(ge=0, description="0-based layer.")
    head: int = Field(ge=0, description="0-based head.")
    role: str = Field(description="sink, positional-previous/-same/-next, alignment, rare-word or mixed (docs/analysis.md).")
    role_score: float | None = Field(default=None, description="The statistic that decided the role.")


class HeadAnalysis(BaseModel):
    """What was analysed and every head's summary."""

    model_config = ConfigDict(extra="allow")

    model: str = Field(description="The model id.")
    corpus: str | None = Field(default=None, description="The corpus file's name.")
    mode: str | None = Field(default=None, description="teacher-forced (on references) or greedy.")
    sentences: int | None = Field(default=None, description="How many sentences were analysed.")
    rules: dict[str, float] | None = Field(default=None, description="The role rule's thresholds.")
    heads: list[HeadSummary]


@router.get(
    "/models/{model_id}/analysis",
    response_model=HeadAnalysis,
    responses={404: {"model": ErrorResponse, "description": "Unknown model, or a model without a head analysis."}},
    summary="A model's head roles and statistics over a corpus (attnscope analyze)",
)
async def model_analysis(model_id: str, service: ServiceDep, request: Request) -> Any:
    """The summary ``attnscope analyze`` wrote for this model, shipped in its folder as
    ``analysis/heads.json`` (or under the ``analysis_dir`` setting). 404 names what is missing."""
    if llm := llm_common.served_llm(request, model_id):
        folder, shapes = llm_common.analysis_folder(llm, model_id)
    else:
        if model_id not in service.ids:
            service.get(model_id)  # raises the usual 404 (with the available ids) or 503 while loading
        folder = service.registry.folders.get(model_id, service.settings.models_dir / model_id)
        shapes = _shapes(folder)
    path = summary_path(folder, service.settings.analysis_dir)
    try:
        document = await asyncio.to_thread(read_summary, path)
        check_shape(document, shapes, f"{path.parent.name}/{path.name}")
    except NoAnalysis as err:
        return JSONResponse(status_code=404, content={"detail": f"model {model_id!r} has no head analysis: {err}"})
    return {**document, "model": model_id}


@router.post(
    "/analyze",
    response_model=AnalyzeResponse,
    responses={
        404: {"model": ErrorResponse, "description": "Unknown model; `available` lists the ids."},
        422: {"model": ErrorResponse, "description": "Invalid input; `errors` names each field."},
        503: {"model": ErrorResponse, "description": "Busy (queue full) or still loading; see `Retry-After`."},
        504: {"model": ErrorResponse, "description": "The request ran past its deadline and was stopped."},
    },
    summary="Every head's statistics and role over the given sentences (attnscope analyze, in one request)",
)
async def analyze(body: AnalyzeRequest, service: ServiceDep, request: Request) -> Any:
    """Greedy translations (or, with ``references``, teacher-forced on them) of up to 256
    sentences, and per head the statistics and role ``attnscope analyze`` gives the same
    sentences: ``heads`` as its heads.parquet, ``rows`` as its rows.parquet."""
    llm = llm_common.served_llm(request, body.model)
    async with watch_disconnect(request) as gone:
        if llm is not None:
            return await llm_common.analyze(service, llm, body, gone=gone)
        return await analyze_answer(service, body, gone=gone)


def _shapes(folder: Path) -> dict[str, tuple[int, int]]:
    """kind -> (layers, heads) of the model in ``folder`` (its config.json, a cheap read)."""
    config, _ = read_config(folder)
    return geometry_of(config).shapes()
