"""``GET /api/attention/{attention_id}/...``: the matrices of an on-demand answer, one at a time.

``…/{kind}/{layer}/{head}`` is one head ``[query][key]``; ``…/{kind}/{layer}`` every head of a layer
``[head][query][key]``; ``…/{kind}`` the head average of each layer ``[layer][query][key]`` (what
thumbnails and head grids draw). As JSON (the numbers an inline answer gives at the same
``precision``) or as NumPy ``.npy`` (``Accept: application/x-npy``; ``dtype`` float16 or float32,
unrounded). With ``method`` (norm, rollout, alti, value_zeroing) the same routes return that
explanation of the same answer, computed on first use from the recorded ids and kept in the store.
The matrices come from :mod:`attnscope.engine.attention_store`; this module is only the web."""

from __future__ import annotations

import io
import time
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import numpy as np
import orjson
import torch
from fastapi import APIRouter, Depends, HTTPException, Path, Query, Request
from fastapi.responses import Response
from pydantic import BaseModel, Field

from attnscope.engine import limits
from attnscope.engine.answers import matrix
from attnscope.engine.attention_store import NotStored, Recorded
from attnscope.engine.schemas import ErrorResponse
from attnscope.engine.service import ModelService
from attnscope.explain import explain
from attnscope.explain import registry as explain_registry
from attnscope.nn.ablation import disabled_heads
from attnscope.serving import llm_common
from attnscope.serving.deps import ServiceDep

router = APIRouter(prefix="/api/attention", tags=["attention"])

NPY = "application/x-npy"
AttentionId = Annotated[str, Path(description="The `attention_id` of an on-demand answer.", max_length=64)]
Kind = Annotated[str, Path(description="cross, encoder_self or decoder_self (those in the answer's attention_shapes).")]
Layer = Annotated[int, Path(ge=0, description="Layer index, from 0.")]
Head = Annotated[int, Path(ge=0, description="Head index, from 0.")]
Precision = Annotated[int, Query(ge=0, le=8, description="Decimals of the JSON numbers (as the answer's `precision`).")]
DType = Annotated[Literal["float16", "float32"], Query(description="The .npy's element type (Accept: application/x-npy).")]
Method = Annotated[
    str | None,
    Query(
        description="An explanation of the same answer instead of the weights (computed on first use, then kept): "
        "a registered method (`GET /api/explain-methods`).",
        max_length=64,
    ),
]
_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "content": {"application/json": {}, NPY: {}},
        "description": "The numbers as nested JSON lists, or a NumPy .npy file (Accept: application/x-npy).",
    },
    404: {"model": ErrorResponse, "description": "Unknown or evicted id (translate again), or no such kind/layer/head."},
    422: {"model": ErrorResponse, "description": "A bad parameter, or a method this model or route does not have."},
}
# Which matrix of ALTI+ each kind's route returns (ALTI+ is per layer, not per head).
_ALTI = {"cross": "source", "decoder_self": "target", "encoder_self": "encoder"}


def _entry(service: ModelService, attention_id: str) -> Recorded:
    try:
        return service.attention_store.get(attention_id)
    except NotStored as err:
        raise HTTPException(404, str(err)) from None


async def _values(
    service: ModelService, request: Request, attention_id: str, entry: Recorded, kind: str, method: str | None
) -> torch.Tensor:
    """The tensor the routes slice: the recorded (L, H, Q, K) weights of ``kind``, or the
    explanation ``method`` of it ((L, H, Q, K) for norm, (L, Q, K) for the others)."""
    if kind not in entry.attention:
        have = ", ".join(entry.attention) or "none"
        raise HTTPException(404, f"attention {attention_id!r} has no kind {kind!r}; it has: {have}")
    if method is None:
        return entry.attention[kind]
    if method not in entry.explained:
        if entry.source_span is not None:  # a decoder-only model's answer (docs/llm.md)
            found = await llm_common.explain_stored(service, request, entry, method)
        else:
            found = await _explain(service, entry, method)
        service.attention_store.attach(attention_id, method, found)
    else:
        found = entry.explained[method]
    name = _ALTI[kind] if method == "alti" else kind
    if name not in found:
        raise HTTPException(422, f"{method} has no {kind!r} matrix for this model")
    return found[name]


async def _explain(service: ModelService, entry: Recorded, method: str) -> dict[str, torch.Tensor]:
    """``method`` on the recorded sentence, in a decode slot (queue bound, deadline), with the
    heads the answer had switched off still off; 422 when the family has no such method."""
    known = explain_registry.names()
    if method not in known:
        raise HTTPException(422, f"unknown explanation method {method!r}; registered: {', '.join(known)}")
    served = await service.registry.acquire(entry.model, service.settings.request_timeout_s)
    source, target = list(entry.source_ids), list(entry.target_ids)
    if not target:
        raise HTTPException(422, "the target has no tokens to explain")
    limits.admit_explain(service.settings, served, [len(source)], [len(target)], methods=(method,))

    def run() -> Any:
        with disabled_heads(served.loaded.model, list(entry.disabled)):
            return explain(served.loaded.model, source, target, methods=(method,))

    found = await service.run_alone(run)
    if method in found.unavailable:
        raise HTTPException(422, f"{method} is not available for {entry.model}: {found.unavailable[method]}")
    return _matrices(method, found.get(method))


def _matrices(method: str, result: Any) -> dict[str, torch.Tensor]:
    """A method's result as name -> matrix: ALTI+'s per-layer source/target/encoder, the
    norm's weighted (L, H, Q, K), or a kind -> matrix mapping as it is."""
    if method == "alti":
        return {"source": result.source, "target": result.target, "encoder": result.encoder}
    if hasattr(result, "weighted"):
        return dict(result.weighted)
    if isinstance(result, dict):
        return result
    raise HTTPException(422, f"{method} has no attention-shaped matrices to fetch by id")


def _pick(values: torch.Tensor, attention_id: str, kind: str, layer: int | None, head: int | None) -> torch.Tensor:
    """One head (Q, K), one layer's heads (H, Q, K) or each layer's head average (L, Q, K)."""
    per_head = values.dim() == 4
    if layer is None:
        return values.to(torch.float64).mean(dim=1) if per_head else values
    if layer >= values.shape[0]:
        raise HTTPException(404, f"{kind} of {attention_id!r} has layers 0-{values.shape[0] - 1}; there is no layer {layer}")
    if head is None:
        return values[layer]
    if not per_head:
        raise HTTPException(422, "this explanation has one matrix per layer, no heads: ask for …/{kind}/{layer}")
    if head >= values.shape[1]:
        raise HTTPException(404, f"{kind} of {attention_id!r} has heads 0-{values.shape[1] - 1}; there is no head {head}")
    return values[layer, head]


@dataclass(frozen=True)
class Fetch:
    """The query of every fetch route: JSON decimals, the .npy's dtype, an explanation method."""

    precision: Precision = 6
    dtype: DType = "float32"
    method: Method = None


FetchDep = Annotated[Fetch, Depends()]


async def _answer(
    service: ModelService, request: Request, where: tuple[str, str, int | None, int | None], asked: Fetch
) -> Response:
    """``where``: (attention_id, kind, layer or None, head or None)."""
    started = time.perf_counter()
    attention_id, kind, layer, head = where
    entry = _entry(service, attention_id)
    part = _pick(await _values(service, request, attention_id, entry, kind, asked.method), attention_id, kind, layer, head)
    if NPY in request.headers.get("accept", ""):
        buffer = io.BytesIO()
        np.save(buffer, part.to(torch.float32).numpy().astype(asked.dtype), allow_pickle=False)
        body, media = buffer.getvalue(), NPY
    else:
        body, media = orjson.dumps(matrix(part, asked.precision), option=orjson.OPT_SERIALIZE_NUMPY), "application/json"
    spent = (time.perf_counter() - started) * 1000
    headers = {"Server-Timing": f"fetch;dur={spent:.3f}", "Cache-Control": "private, max-age=600", "Vary": "Accept"}
    return Response(body, media_type=media, headers=headers)


class StoreStatus(BaseModel):
    worker: str = Field(description="This process's name: the first part of every attention_id it makes.")
    entries: int
    used_bytes: int
    peak_bytes: int = Field(description="The most the store has held since the process started (never above max_bytes).")
    max_bytes: int = Field(description="ATTNSCOPE_ATTENTION_STORE_BYTES.")
    max_seconds: float = Field(description="ATTNSCOPE_ATTENTION_STORE_SECONDS: an entry not read for this long is dropped.")
    evicted: int = Field(description="Entries dropped so far (to make room, or expired).")


@router.get("", response_model=StoreStatus, summary="This process's attention store: its bound and what it holds")
async def store_status(service: ServiceDep) -> StoreStatus:
    store = service.attention_store
    return StoreStatus(
        worker=store.worker, entries=len(store), used_bytes=store.used_bytes, peak_bytes=store.peak_bytes,
        max_bytes=store.max_bytes, max_seconds=store.max_seconds, evicted=store.evicted,
    )  # fmt: skip


@router.get("/{attention_id}/{kind}", responses=_RESPONSES, summary="Each layer's head average of one kind (or a method's)")
async def kind_average(
    attention_id: AttentionId, kind: Kind, asked: FetchDep, service: ServiceDep, request: Request
) -> Response:
    """``[layer][query][key]``: the mean over heads of each layer (per-layer methods as they are)."""
    return await _answer(service, request, (attention_id, kind, None, None), asked)


@router.get("/{attention_id}/{kind}/{layer}", responses=_RESPONSES, summary="Every head of one layer")
async def layer_heads(
    attention_id: AttentionId, kind: Kind, layer: Layer, asked: FetchDep, service: ServiceDep, request: Request
) -> Response:
    """``[head][query][key]`` (a per-layer method: ``[query][key]``)."""
    return await _answer(service, request, (attention_id, kind, layer, None), asked)


@router.get("/{attention_id}/{kind}/{layer}/{head}", responses=_RESPONSES, summary="One head's matrix")
async def one_head(
    attention_id: AttentionId, kind: Kind, layer: Layer, head: Head, asked: FetchDep, service: ServiceDep,
    request: Request,
) -> Response:  # fmt: skip
    """``[query][key]``: exactly ``attention[kind][layer][head]`` of an inline answer at the same precision."""
    return await _answer(service, request, (attention_id, kind, layer, head), asked)
