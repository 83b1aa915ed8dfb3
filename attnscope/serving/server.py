"""``attnscope serve``: settings from the environment, flags on top, then uvicorn."""

from __future__ import annotations

import logging
import os
import shutil
import socket
import tempfile
from pathlib import Path
from typing import Any

import uvicorn

from attnscope.config import Settings
from attnscope.device import resolve_device
from attnscope.repository import discover_all
from attnscope.serving import protocol
from attnscope.serving.main import create_app

logger = logging.getLogger(__name__)


def run(
    host: str | None = None,
    port: int | None = None,
    models_dir: str | Path | None = None,
    device: str | None = None,
    quantize: str | None = None,
    workers: int | None = None,
    max_loaded_models: int | None = None,
    added_models_dir: str | Path | None = None,
) -> None:
    """Serve until interrupted. Arguments left as None come from ``ATTNSCOPE_*`` or the defaults.

    With ``workers`` > 1, uvicorn starts that many processes on one socket, each building the
    app (and loading every model) from the environment: the flags are passed on as
    ``ATTNSCOPE_*`` variables. The server keeps no state between requests, so any worker (or
    replica behind a load balancer) can answer any request."""
    flags: dict[str, Any] = {
        "host": host, "port": port, "models_dir": models_dir, "device": device, "quantize": quantize, "workers": workers,
        "max_loaded_models": max_loaded_models, "added_models_dir": added_models_dir,
    }  # fmt: skip
    flags = {k: v for k, v in flags.items() if v is not None}
    settings = Settings(**flags)
    resolve_device(settings.device)  # ValueError here (one line from the CLI), not inside the lifespan
    check_port(settings.host, settings.port)  # before any model loads, not uvicorn's error after them
    if settings.added_models_dir is not None:
        discover_all((settings.models_dir, settings.added_models_dir))  # ModelIdClash (a ValueError): an id in both
    if not _local(settings.host) and settings.allowed_hosts == Settings.model_fields["allowed_hosts"].default:
        logger.warning(
            "listening on %s but answering only Host names %s: set ATTNSCOPE_ALLOWED_HOSTS to the names "
            "clients use", settings.host, ", ".join(settings.allowed_hosts),
        )  # fmt: skip
    logger.info(
        "attnscope on http://%s:%d (models from %s, %d worker(s))",
        settings.host, settings.port,
        settings.models_dir if settings.added_models_dir is None else f"{settings.models_dir} and {settings.added_models_dir}",
        settings.workers,
    )  # fmt: skip
    common: dict[str, Any] = {
        "host": settings.host,
        "port": settings.port,
        "log_level": "info",
        "access_log": False,  # RequestLog writes one line per request
        "timeout_graceful_shutdown": settings.shutdown_timeout_s,
        "http": "attnscope.serving.protocol:TimedH11Protocol",  # header, body and send timeouts
    }
    if settings.workers == 1:
        protocol.configure(settings)
        uvicorn.run(create_app(settings), **common)
        return
    for name, value in flags.items():  # the workers read their settings from the environment
        os.environ[f"ATTNSCOPE_{name.upper()}"] = str(value)
    # Prometheus multiprocess mode: /metrics adds up every worker's counts (each worker would
    # otherwise answer with its own), in a fresh folder unless one is set
    metrics_dir = None
    if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        metrics_dir = tempfile.mkdtemp(prefix="attnscope-metrics-")
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = metrics_dir
    try:
        uvicorn.run(
            "attnscope.serving.main:create_app", factory=True, workers=settings.workers, log_config=worker_logging(), **common
        )
    finally:
        if metrics_dir is not None:
            shutil.rmtree(metrics_dir, ignore_errors=True)


# Each line says which process wrote it: with --workers N the requests and model loads of N
# processes share one log
WORKER_LOG_FORMAT = "%(asctime)s %(levelname)s [%(process)d] %(name)s: %(message)s"


def worker_logging() -> dict[str, Any]:
    """uvicorn's logging configuration for ``--workers N``: uvicorn applies it in every worker
    process it spawns, which run none of the command line's set-up, so without it the app's
    loggers (a line per request, the model loads) had no handler there and wrote nothing."""
    handler = {"class": "logging.StreamHandler", "formatter": "attnscope", "stream": "ext://sys.stderr"}
    quiet = {"handlers": ["attnscope"], "level": "INFO", "propagate": False}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"attnscope": {"format": WORKER_LOG_FORMAT}},
        "handlers": {"attnscope": handler},
        "loggers": {"attnscope": quiet, "uvicorn": quiet, "uvicorn.error": {"level": "INFO"}},
    }


def check_port(host: str, port: int) -> None:
    """OSError naming the address when ``host:port`` cannot be listened on (another server
    there, a port below 1024 without root), bound as uvicorn binds it (SO_REUSEADDR); the
    socket is closed again at once."""
    if port == 0:
        return
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as err:
            raise OSError(f"cannot listen on {host}:{port} ({err.strerror or err}): another server there? "
                          "pass --port (or ATTNSCOPE_PORT)") from None  # fmt: skip


def _local(host: str) -> bool:
    return host in ("127.0.0.1", "localhost", "::1")
