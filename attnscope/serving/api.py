"""The JSON API under ``/api``: health, readiness, models, translate, align and batch translate.

Thin: each route validates its body (schemas), asks the service, and returns the answer. Large
answers (attention matrices) are serialised to JSON in the inference pool, off the event loop.
Health, readiness and the model list are ``async`` and touch no thread pool, so they answer
however busy inference is."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from attnscope.engine.answers import answer_json, gzip_bytes
from attnscope.engine.request import ServiceRequest
from attnscope.engine.schemas import (
    AlignRequest,
    BatchTranslateRequest,
    ErrorResponse,
    HealthResponse,
    ModelsResponse,
    ReadyResponse,
    TranslateRequest,
    TranslationResponse,
    UnavailableModel,
)
from attnscope.engine.service import ModelService
from attnscope.serving import llm_common
from attnscope.serving.deps import ServiceDep
from attnscope.serving.disconnect import watch_disconnect

router = APIRouter(prefix="/api", tags=["api"])

_ERRORS: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorResponse, "description": "Unknown model; `available` lists the ids."},
    413: {"model": ErrorResponse, "description": "The request body is over the size limit."},
    422: {
        "model": ErrorResponse,
        "description": "Invalid input, or a decode over the cost budget; `errors` names each field.",
    },
    500: {"model": ErrorResponse, "description": "Unexpected failure (logged on the server)."},
    503: {"model": ErrorResponse, "description": "Busy (queue full) or still loading; see `Retry-After`."},
    504: {"model": ErrorResponse, "description": "The request ran past its deadline and was stopped."},
}
GZIP_MIN_BYTES = 1024


class JSONBytes(Response):
    media_type = "application/json"


async def _json(
    service: ModelService, request: Request, value: TranslationResponse | list[TranslationResponse]
) -> JSONBytes:
    """Serialise (and gzip, when the client accepts it) in a worker thread: a Transformer's answer
    holds many thousands of floats, too much work for the event loop."""
    gzip_ok = "gzip" in request.headers.get("accept-encoding", "").lower()

    def encode() -> bytes:
        body = answer_json(value)
        if gzip_ok and len(body) >= GZIP_MIN_BYTES:
            return gzip_bytes(body, service.settings.gzip_level)
        return body

    body = await service.pool.encode(encode)
    headers = {"Vary": "Accept-Encoding"}
    if body[:2] == b"\x1f\x8b":
        headers["Content-Encoding"] = "gzip"
    return JSONBytes(body, headers=headers)


def _log(request: Request) -> dict[str, Any] | None:
    """The request's log-line fields (set up by the middleware), for the service to fill in."""
    fields: dict[str, Any] | None = request.scope.get("attnscope.log")
    return fields


@router.get("/health", response_model=HealthResponse, summary="Liveness: the process answers")
async def health(service: ServiceDep, request: Request) -> HealthResponse:
    llms = len(getattr(getattr(request.app.state, "llm", None), "models", ()))  # decoder-only models
    return HealthResponse(status="ok", device=str(service.device), models=len(service.ids) + llms)


@router.get(
    "/ready",
    response_model=ReadyResponse,
    responses={503: {"model": ReadyResponse, "description": "Still loading the models, shutting down, or no model to serve."}},
    summary="Readiness: every model folder is loaded (or marked unavailable)",
)
async def ready(service: ServiceDep, request: Request) -> JSONResponse:
    """200 once the models are loaded; 503 while they load, while the server shuts down, and when
    it has no model to serve at all (a missing or empty models directory, every folder broken):
    a load balancer sends traffic only to replicas that can translate."""
    status: str = service.status
    loaded, total = service.registry.progress()
    vision = getattr(request.app.state, "vision", None)
    detail = None
    llm = getattr(request.app.state, "llm", None)  # decoder-only models (docs/llm.md)
    if status == "ready" and not service.ids and not getattr(vision, "models", None) and not getattr(llm, "models", None):
        status = "no_models"
        detail = (f"no model is loaded from {service.settings.models_dir} "
                  f"({len(service.registry.unavailable())} folder(s) unavailable: see /api/models)")  # fmt: skip
    body = ReadyResponse(
        status=status,  # type: ignore[arg-type]
        models=len(service.ids),
        unavailable=len(service.registry.unavailable()),
        loaded=loaded,
        total=total,
        **({"detail": detail} if detail else {}),
    )
    return JSONResponse(body.model_dump(exclude_none=True), status_code=200 if status == "ready" else 503)


@router.get("/models", response_model=ModelsResponse, summary="The loaded models, and the folders that failed")
async def models(service: ServiceDep, request: Request) -> ModelsResponse:
    llms, failed = llm_common.model_infos(getattr(request.app.state, "llm", None), str(service.device))
    unavailable = service.registry.unavailable() + [UnavailableModel(id=i, file=None, reason=r) for i, r in failed.items()]
    return ModelsResponse(models=service.describe() + llms, unavailable=unavailable)


@router.post(
    "/translate",
    response_model=TranslationResponse,
    responses=_ERRORS,
    summary="Translate one text and return every attention matrix",
)
async def translate(body: TranslateRequest, service: ServiceDep, request: Request) -> Response:
    """Beam search (``beam_size`` 1 is greedy decoding). ``attention`` holds each kind the model
    has as ``[layer][head][query][key]``; the token lists include ``</s>``, so each matrix's
    dimensions equal the lengths of the token lists it pairs. On request: the beam tree
    (``return_beam``), a forced beginning (``prefix``), the scores before the softmax
    (``return_scores``), the model's top alternatives at each position (``alternatives``) and
    explanations beyond the weights (``explain``: norm, rollout, alti, value_zeroing). A decoder-only
    model (docs/llm.md) answers in the same shape, its kinds cut from its one causal matrix."""
    if llm := llm_common.served_llm(request, body.model):
        (answer,) = await llm_common.translate(service, llm, body)
        return await _json(service, request, answer)
    async with watch_disconnect(request) as gone:
        (answer,) = await service.translate(ServiceRequest.of(body), gone=gone, log=_log(request))
    return await _json(service, request, answer)


@router.post(
    "/align",
    response_model=TranslationResponse,
    responses=_ERRORS,
    summary="Teacher-force the model on your own translation",
)
async def align(body: AlignRequest, service: ServiceDep, request: Request) -> Response:
    """The model scores ``target`` (plus ``</s>``) token by token: the same fields as translate,
    with ``target_logprobs`` telling how likely the model finds each of your tokens."""
    if llm := llm_common.served_llm(request, body.model):
        return await _json(service, request, await llm_common.align(service, llm, body))
    async with watch_disconnect(request) as gone:
        answer = await service.align(ServiceRequest.of(body), gone=gone, log=_log(request))
    return await _json(service, request, answer)


@router.post(
    "/translate/batch",
    response_model=list[TranslationResponse],
    responses=_ERRORS,
    summary="Translate several texts as one batch",
)
async def translate_batch(body: BatchTranslateRequest, service: ServiceDep, request: Request) -> Response:
    """One answer per text, in order, decoded together; each ``timing_ms`` is the whole batch's.
    Without ``max_length`` each text keeps its own default output budget, as it would alone."""
    if llm := llm_common.served_llm(request, body.model):
        return await _json(service, request, await llm_common.translate(service, llm, body))
    async with watch_disconnect(request) as gone:
        answers = await service.translate(ServiceRequest.of(body), gone=gone, log=_log(request))
    return await _json(service, request, answers)
