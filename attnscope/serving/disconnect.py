"""Noticing that an HTTP client went away while its request is decoded."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from starlette.requests import Request


@asynccontextmanager
async def watch_disconnect(request: Request) -> AsyncIterator[threading.Event]:
    """An event set when the client disconnects while the block runs. The body has been read
    by then, so the next ASGI message can only be ``http.disconnect``."""
    gone = threading.Event()

    async def watch() -> None:
        while True:
            message = await request.receive()
            if message["type"] == "http.disconnect":
                gone.set()
                return

    task = asyncio.create_task(watch())
    try:
        yield gone
    finally:
        task.cancel()
