"""``create_app()``: the FastAPI application (API, pages, static files) with its lifespan.

Run it with ``attnscope serve`` or ``uvicorn --factory app.serving.main:create_app``."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import torch
from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from app import __version__
from app.config import Settings, get_settings
from app.serving import api, pages
from app.serving import attribution as attribution_api
from app.serving.errors import install_error_handlers
from app.serving.service import ModelService
from app.vision import api as vision_api

logger = logging.getLogger(__name__)

STATIC_DIR = pages.STATIC_DIR


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()
    service = ModelService(settings)  # cheap: the models load in the lifespan

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if settings.torch_threads is not None:
            torch.set_num_threads(settings.torch_threads)  # process-wide, like the server itself
        # Load once per process, never at import time, and in the background: /api/health
        # answers at once, /api/ready once every folder is loaded (or marked unavailable).
        loading = asyncio.get_running_loop().run_in_executor(None, service.load_all)
        try:
            yield
        finally:
            service.stopping = True
            service.pool.shutdown()
            await asyncio.wait([loading], timeout=5)

    app = FastAPI(
        title="attnscope",
        version=__version__,
        summary="Translate with RNN and Transformer NMT models and inspect every attention matrix.",
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.service = service
    install_error_handlers(app)
    app.include_router(api.router)
    app.include_router(attribution_api.router)
    app.include_router(pages.router)
    app.include_router(vision_api.router)  # its own lifespan loads the vision models
    app.include_router(vision_api.pages)
    if STATIC_DIR.is_dir():
        app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    return app
