"""Where inference runs: a bounded pool of worker threads of its own, never anyio's shared pool.

Pages, static files, health and the model list are served by the event loop and anyio's thread
pool; decoding and building answers run here, in ``slots`` threads, so however many requests
are decoding the rest of the server keeps answering."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import torch

logger = logging.getLogger(__name__)

T = TypeVar("T")


class InferencePool:
    """``slots`` threads for decoding, and as many again for turning answers into JSON bytes."""

    def __init__(self, slots: int) -> None:
        self.slots = slots
        self._decode = ThreadPoolExecutor(slots, thread_name_prefix="attnscope-decode")
        self._encode = ThreadPoolExecutor(slots, thread_name_prefix="attnscope-encode")

    async def decode(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` in a decode slot, under ``torch.inference_mode()``."""

        def job() -> T:
            with torch.inference_mode():
                return fn()

        return await asyncio.wrap_future(self._decode.submit(job))

    async def encode(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` (serialisation of a large answer) off the event loop."""
        return await asyncio.wrap_future(self._encode.submit(fn))

    def shutdown(self) -> None:
        """Stop taking work; running jobs finish in their threads (the caller bounds the wait)."""
        for pool in (self._decode, self._encode):
            pool.shutdown(wait=False, cancel_futures=True)
