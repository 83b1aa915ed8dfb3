"""The web layer's Prometheus metrics (``prometheus-client``) and ``/metrics``, which serves them
with the engine's (``attnscope.engine.metrics``).

One set per process, in the library's default registry. With ``--workers N`` each worker counts
its own requests; set ``PROMETHEUS_MULTIPROC_DIR`` to an empty folder before starting and
``/metrics`` adds up every worker's (the library's multiprocess mode)."""

from __future__ import annotations

import os
import secrets

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)
from prometheus_client import multiprocess as _multiprocess

REQUESTS = Counter(
    "attnscope_requests", "HTTP requests answered, by route and status code.", ["route", "method", "status"]
)
LATENCY = Histogram(
    "attnscope_request_seconds",
    "Time from request to the start of the answer, by route.",
    ["route"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
)
SLOW_CLIENTS = Counter(
    "attnscope_slow_clients",
    "Connections closed for slowness: headers or body not in time (408), an answer not read (aborted).",
    ["phase"],
)

router = APIRouter(include_in_schema=False)


@router.get("/metrics")
def metrics(request: Request) -> Response:
    """The Prometheus text format (every worker's when in multiprocess mode). With
    ``ATTNSCOPE_METRICS_TOKEN`` set, only for ``Authorization: Bearer <token>`` (else 401)."""
    token: str | None = request.app.state.settings.metrics_token
    if token:
        sent = request.headers.get("authorization", "")
        if not secrets.compare_digest(sent.encode(), f"Bearer {token}".encode()):
            return JSONResponse(
                {"detail": "/metrics needs Authorization: Bearer <ATTNSCOPE_METRICS_TOKEN>"},
                status_code=401,
                headers={"WWW-Authenticate": "Bearer"},
            )
    registry = REGISTRY
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        _multiprocess.MultiProcessCollector(registry)
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
