"""``create_app()``: the FastAPI application (API, pages, docs, metrics, static files) with its
lifespan and its outer layers.

Run it with ``attnscope serve`` or ``uvicorn --factory attnscope.serving.main:create_app``."""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import torch
from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles
from starlette.middleware.gzip import GZipMiddleware

from attnscope import __version__
from attnscope.allocator import keep_freed_memory
from attnscope.config import Settings, get_settings
from attnscope.engine.service import ModelService
from attnscope.serving import (
    analysis_api,
    api,
    assets,
    catalog,
    metrics,
    pages,
    stream,
    testsets_api,
)
from attnscope.serving import attribution as attribution_api
from attnscope.serving import inside as inside_api
from attnscope.serving import llm as llm_api
from attnscope.serving import vision as vision_api
from attnscope.serving.attention_api import router as attention_router
from attnscope.serving.errors import install_error_handlers
from attnscope.serving.middleware import (
    BodyLimit,
    HostCheck,
    RequestLog,
    SecurityHeaders,
    answer_cancelled,
)

logger = logging.getLogger(__name__)

STATIC_DIR = pages.STATIC_DIR


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()
    service = ModelService(settings)  # cheap: the models load in the lifespan
    vision = vision_api.make_service(settings)
    llm = llm_api.make_service(settings)  # decoder-only LLMs (docs/llm.md)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if settings.torch_threads is not None:
            torch.set_num_threads(settings.torch_threads)  # process-wide, like the server itself
        sys.setswitchinterval(settings.switch_interval_ms / 1000.0)  # health answers promptly (issue 35)
        keep_freed_memory(settings.keep_freed_mb)
        # Load once per process, never at import time, and in the background: /api/health
        # answers at once, /api/ready once every folder is loaded (or marked unavailable). A
        # daemon thread, not the loop's executor, whose threads the process would wait for.
        loading = threading.Thread(target=service.load_all, name="attnscope-load", daemon=True)
        loading.start()
        try:
            await vision_api.load(app, vision)  # the small vision models, before the first request
            await llm_api.load(app, llm)
            yield
        finally:
            # uvicorn has given running requests ATTNSCOPE_SHUTDOWN_TIMEOUT_S to finish; decodes
            # still running now stop at their next step, loading before its next model, so the
            # process exits promptly.
            service.stop()
            await answer_cancelled()  # the requests uvicorn cancelled answer 503, not silence
            for _ in range(220):  # at most 11 s for the models being loaded (registry.load_all joins them)
                if not loading.is_alive():
                    break
                await asyncio.sleep(0.05)

    app = FastAPI(
        title="attnscope",
        version=__version__,
        summary="Translate with RNN and Transformer NMT models and inspect every attention matrix.",
        lifespan=lifespan,
        docs_url=None,  # served by attnscope.serving.assets from installed files, not from a CDN
        redoc_url=None,
    )
    app.state.settings = settings
    app.state.service = service
    install_error_handlers(app)
    app.include_router(api.router)
    app.include_router(stream.router)  # POST /api/translate/stream
    app.include_router(attention_router)  # GET /api/attention/{attention_id}/...
    app.include_router(attribution_api.router)
    app.include_router(inside_api.router)  # POST /api/lens, /api/patch
    app.include_router(catalog.router)  # GET /api/score-functions
    app.include_router(analysis_api.router)  # GET /api/models/{id}/analysis
    app.include_router(testsets_api.router)  # /api/testsets/jobs
    app.include_router(pages.router)
    app.include_router(vision_api.router)
    app.include_router(vision_api.pages)
    app.include_router(llm_api.router)  # /api/llm/...
    app.include_router(llm_api.pages)
    app.include_router(assets.router)
    app.include_router(metrics.router)
    if STATIC_DIR.is_dir():
        app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    # Outermost last: SecurityHeaders -> RequestLog -> HostCheck -> BodyLimit -> GZip -> routes,
    # so the Host check's 400, the 413 and a 500 have the headers and an X-Request-ID too.
    # GZip leaves alone what is already compressed (API answers, vendor files).
    app.add_middleware(GZipMiddleware, minimum_size=1024, compresslevel=6)
    app.add_middleware(BodyLimit, limit=settings.max_body_bytes)
    app.add_middleware(HostCheck, allowed=settings.allowed_hosts)
    app.add_middleware(RequestLog)
    app.add_middleware(SecurityHeaders)
    return app
