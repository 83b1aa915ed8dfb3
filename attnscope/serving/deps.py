"""The engine's service as a FastAPI dependency: routes take ``service: ServiceDep``."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from attnscope.engine.service import ModelService


async def get_service(request: Request) -> ModelService:
    """The app's service (made by ``create_app``, loaded by the lifespan); a FastAPI dependency.
    ``async``, because FastAPI runs a plain function dependency in its thread pool: a thread hop
    per request, and a wait for a free thread when the pool is busy."""
    service: ModelService = request.app.state.service
    return service


ServiceDep = Annotated[ModelService, Depends(get_service)]
