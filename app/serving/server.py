"""``attnscope serve``: settings from the environment, flags on top, then uvicorn."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import uvicorn

from app.config import Settings
from app.device import resolve_device
from app.serving.main import create_app

logger = logging.getLogger(__name__)


def run(
    host: str | None = None,
    port: int | None = None,
    models_dir: str | Path | None = None,
    device: str | None = None,
    quantize: str | None = None,
) -> None:
    """Serve until interrupted. Arguments left as None come from ``ATTNSCOPE_*`` or the defaults."""
    flags: dict[str, Any] = {
        "host": host, "port": port, "models_dir": models_dir, "device": device, "quantize": quantize
    }
    settings = Settings(**{k: v for k, v in flags.items() if v is not None})
    try:
        resolve_device(settings.device)  # fail here, with one clear line, not inside the lifespan
    except ValueError as err:
        raise SystemExit(f"attnscope serve: {err}") from None
    logger.info("attnscope on http://%s:%d (models from %s)", settings.host, settings.port, settings.models_dir)
    uvicorn.run(create_app(settings), host=settings.host, port=settings.port, log_level="info")
