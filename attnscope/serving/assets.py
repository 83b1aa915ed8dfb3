"""Large third-party files from installed packages (Plotly.js, Swagger UI, ReDoc), served
precompressed, and the API docs
pages built on them: ``/docs`` (Swagger UI) and ``/redoc`` (ReDoc), whose scripts come from the
``fastapi-offline`` package, so the docs work offline and load nothing from another site.

A vendor file's URL carries its package's version, so it is cached for a year; its gzip form is
made once per process (in a worker thread) and kept in memory."""

from __future__ import annotations

import gzip
from functools import lru_cache
from importlib.metadata import version
from pathlib import Path

import fastapi_offline
from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import HTMLResponse, Response
from starlette.concurrency import run_in_threadpool

from attnscope.serving.pages import PLOTLY_JS, templates

DOCS_STATIC = Path(fastapi_offline.__file__).parent / "static"
DOCS_VERSION = version("fastapi-offline")
VENDOR: dict[str, tuple[Path, str]] = {
    "swagger-ui-bundle.js": (DOCS_STATIC / "swagger-ui-bundle.js", "text/javascript"),
    "swagger-ui.css": (DOCS_STATIC / "swagger-ui.css", "text/css"),
    "redoc.standalone.js": (DOCS_STATIC / "redoc.standalone.js", "text/javascript"),
}
# ReDoc shows a Redocly logo from its CDN (hidden again if it fails to load): served without it.
OFFLINE_REWRITES: dict[str, list[tuple[bytes, bytes]]] = {
    "redoc.standalone.js": [(b'src:"https://cdn.redoc.ly/redoc/logo-mini.svg"', b'src:"data:,"')],
}
CACHE_FOREVER = {"Cache-Control": "public, max-age=31536000, immutable", "Vary": "Accept-Encoding"}

router = APIRouter(include_in_schema=False)


@lru_cache(maxsize=8)
def _plain(path: Path) -> bytes:
    body = path.read_bytes()
    for old, new in OFFLINE_REWRITES.get(path.name, []):
        body = body.replace(old, new)
    return body


@lru_cache(maxsize=8)
def _gzipped(path: Path) -> bytes:
    return gzip.compress(_plain(path), 9, mtime=0)


async def vendor_response(request: Request, path: Path, media_type: str) -> Response:
    """``path`` as a long-cached answer, gzipped when the client accepts it."""
    if not path.is_file():  # pragma: no cover - a broken install
        raise HTTPException(status_code=404, detail=f"{path.name} is missing from its package")
    if "gzip" in request.headers.get("accept-encoding", "").lower():
        body = await run_in_threadpool(_gzipped, path)
        return Response(body, media_type=media_type, headers={**CACHE_FOREVER, "Content-Encoding": "gzip"})
    return Response(await run_in_threadpool(_plain, path), media_type=media_type, headers=CACHE_FOREVER)


@router.get("/vendor/plotly.min.js")
async def plotly_js(request: Request) -> Response:
    """Plotly.js from the installed ``plotly`` package (4.7 MB; about 1.4 MB gzipped)."""
    return await vendor_response(request, PLOTLY_JS, "text/javascript")


@router.get("/vendor/docs/{name}")
async def docs_asset(name: str, request: Request) -> Response:
    if name not in VENDOR:
        raise HTTPException(status_code=404, detail=f"no vendor file {name!r}")
    path, media_type = VENDOR[name]
    return await vendor_response(request, path, media_type)


def _docs_page(request: Request, name: str, title: str) -> HTMLResponse:
    context = {"title": title, "openapi_url": request.app.openapi_url, "docs_version": DOCS_VERSION}
    return templates.TemplateResponse(request, name, context)


@router.get("/docs", response_class=HTMLResponse)
async def swagger_ui(request: Request) -> HTMLResponse:
    return _docs_page(request, "swagger.html", f"{request.app.title} · API docs")


@router.get("/redoc", response_class=HTMLResponse)
async def redoc(request: Request) -> HTMLResponse:
    return _docs_page(request, "redoc.html", f"{request.app.title} · API reference")
