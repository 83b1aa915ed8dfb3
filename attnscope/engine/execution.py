"""Where inference runs: worker threads of its own, never anyio's shared pool.

Pages, static files, health, readiness and the model list are served by the event loop (and
anyio's thread pool); decoding runs in ``slots`` threads handed out by the scheduler, and large
answers are turned into (compressed) JSON bytes in as many threads again, so however many
requests are decoding the rest of the server keeps answering."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")


class InferencePool:
    """``slots`` threads for decoding (``decoder``), and as many for serialising answers."""

    def __init__(self, slots: int) -> None:
        self.slots = slots
        self.decoder = ThreadPoolExecutor(slots, thread_name_prefix="attnscope-decode")
        self._encoder = ThreadPoolExecutor(slots, thread_name_prefix="attnscope-encode")

    async def encode(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` (serialising or compressing a large answer) off the event loop."""
        return await asyncio.wrap_future(self._encoder.submit(fn))

    def shutdown(self) -> None:
        """Stop taking work; running jobs finish in their threads (decodes are told to stop)."""
        for pool in (self.decoder, self._encoder):
            pool.shutdown(wait=False, cancel_futures=True)
