"""The vision API under ``/api/vision`` and the Vision page (``/vision``).

Thin: each route validates its body, asks the :class:`VisionService` (in a worker thread) and
returns its answer. The service is built by ``create_app`` and its models loaded by the app's one
lifespan (:func:`load`), beside the translation models; the networks, data and model folders
live in :mod:`attnscope.vision`, which knows nothing of the web."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Annotated, Any, Literal, TypeVar

import anyio.to_thread
from fastapi import APIRouter, Depends, FastAPI, HTTPException, Query, Request
from fastapi.responses import HTMLResponse

from attnscope.config import Settings
from attnscope.device import resolve_device
from attnscope.engine import limits, route_prices
from attnscope.engine.errors import InvalidInput, UnknownModel
from attnscope.engine.schemas import ErrorResponse
from attnscope.serving.pages import templates
from attnscope.serving.vision_schemas import (
    CaptionRequest,
    CaptionResponse,
    GlimpsesRequest,
    GlimpsesResponse,
    SamplesResponse,
    VisionModelsResponse,
)
from attnscope.vision.service import (
    BadImage,
    SamplesUnavailable,
    UnknownVisionModel,
    VisionService,
    WrongRequest,
)

T = TypeVar("T")
MAX_SAMPLES = 64


def make_service(settings: Settings) -> VisionService:
    """The vision service of ``settings`` (cheap: its models load in :func:`load`)."""
    return VisionService(settings.models_dir, resolve_device(settings.device), settings.fashion_mnist_dir)


async def load(app: FastAPI, service: VisionService) -> None:
    """Load the vision models (in a worker thread), then serve them: until this returns the
    vision routes answer 503."""
    await anyio.to_thread.run_sync(service.load_all)
    app.state.vision = service


router = APIRouter(prefix="/api/vision", tags=["vision"])
pages = APIRouter(include_in_schema=False, tags=["pages"])


async def get_service(request: Request) -> VisionService:
    """``async``: FastAPI would run a plain function in its thread pool (see attnscope.engine.service)."""
    service = getattr(request.app.state, "vision", None)
    if service is None:
        raise HTTPException(status_code=503, detail="the vision models are still loading")
    return service


ServiceDep = Annotated[VisionService, Depends(get_service)]
_ERRORS: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorResponse, "description": "Unknown model; `available` lists the ids."},
    413: {"model": ErrorResponse, "description": "The image is too large (bytes or pixels)."},
    422: {"model": ErrorResponse, "description": "Invalid input: not a PNG, not grayscale, wrong model kind..."},
}


async def _run(request: Request, fn: Callable[[], T]) -> T:
    """Run ``fn`` in a decode slot of the translation service (its own, never batched), so vision
    inference shares the queue bound, the deadline and shutdown with translation and never
    takes the threads that health checks, pages and static files use."""
    try:
        service = request.app.state.service  # priced at its limit's bound, so the deadline holds
        return await service.run_alone(fn, cost=route_prices.vision_price(service.settings))
    except BadImage as err:
        if err.status == 413:
            raise HTTPException(status_code=413, detail=err.message) from None
        raise InvalidInput(("body", "image"), err.message, "image_invalid") from None
    except UnknownVisionModel as err:
        raise UnknownModel(err.model_id, err.available) from None
    except WrongRequest as err:
        raise InvalidInput(err.field, err.message) from None


def _admission(request: Request) -> Callable[..., None]:
    """The vision cost check (ATTNSCOPE_MAX_VISION_COST), run on the image's header before its pixels."""
    return partial(limits.admit_vision, request.app.state.service.settings)


@router.get("/models", response_model=VisionModelsResponse, summary="The loaded vision models")
async def models(service: ServiceDep) -> dict[str, Any]:
    return {"models": service.describe(), "unavailable": service.failed}


@router.post("/glimpses", response_model=GlimpsesResponse, responses=_ERRORS,
             summary="Where the Recurrent Attention Model looks, and what it thinks after each glimpse")
async def glimpses(body: GlimpsesRequest, service: ServiceDep, request: Request) -> dict[str, Any]:
    """The glimpse path (centres and retina patch sides in the input's pixels) and the class
    probabilities after each glimpse. The RAM follows its policy's mean, so the answer is
    deterministic. A full-image CNN answers too: no glimpses, one row of probabilities."""
    admit = _admission(request)
    return await _run(request, lambda: service.glimpses(body.model, body.image, admit))


@router.post("/caption", response_model=CaptionResponse, responses=_ERRORS,
             summary="Caption a scene and return each word's attention over the image grid")
async def caption(body: CaptionRequest, service: ServiceDep, request: Request) -> dict[str, Any]:
    admit = _admission(request)
    return await _run(request, lambda: service.caption(body.model, body.image, body.beam_size, admit))


@router.get("/samples", response_model=SamplesResponse,
            responses={422: {"model": ErrorResponse, "description": "An invalid query parameter, named in `errors`."},
                       503: {"model": ErrorResponse, "description": "Fashion-MNIST is not installed."}},
            summary="Test-split images to try, with their labels")
async def samples(
    service: ServiceDep,
    dataset: Annotated[Literal["translated", "cluttered", "scenes"], Query(description="Which images.")],
    n: Annotated[int, Query(ge=1, le=MAX_SAMPLES, description="How many.")] = 8,
    seed: Annotated[int, Query(ge=0, le=2**31 - 1, description="Same seed, same images.")] = 0,
) -> dict[str, Any]:
    """60×60 translated or cluttered canvases (label: the class word; ``item``: where it lies)
    or 84×84 scenes (label: the reference caption; ``items``: the layout), as PNG data URLs,
    drawn from Fashion-MNIST's test split. 503 naming the fix when the data set is missing."""
    try:
        return await anyio.to_thread.run_sync(lambda: service.samples(dataset, n, seed))
    except SamplesUnavailable as err:
        raise HTTPException(status_code=503, detail=str(err)) from None
    except WrongRequest as err:  # the schema lets only the three data sets through
        raise InvalidInput(err.field, err.message) from None


@pages.get("/vision", response_class=HTMLResponse)
def vision_page(request: Request) -> HTMLResponse:
    return templates.TemplateResponse(request, "vision.html", {"page": "vision", "examples": {}, "cards": []})
