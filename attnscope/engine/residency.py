"""The resident models (``ATTNSCOPE_MAX_LOADED_MODELS``; unset, the bound is the number of
folders): at most ``bound`` models are resident; the others are listed (their config and card are
known) and loaded on first use, the least recently used model unloaded to make room, never one
that a request holds (one waiting for it, queued with it, or decoding with it).

One load per model at a time (single flight): requests for a model that is loading wait for
that load. A load starts only when there is room (fewer than ``bound`` models resident or
loading once the idle ones are unloaded): while every resident model is held, the loads wait in
arrival order and start as soon as a hold ends, so the bound holds for memory too and a model is
never unloaded under the requests that wait for it (issue 45.3: 282 loads for 400 requests over
16 models, each waiting request answered 503 "loading" as its model was unloaded again). The event loop never blocks on a load: :meth:`Residency.acquire` polls, and the
decode threads load what they need in their own thread (:meth:`Residency.pinned`)."""

from __future__ import annotations

import asyncio
import gc
import itertools
import logging
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Generic, Literal, TypeVar

from attnscope.allocator import release_freed_memory
from attnscope.engine.errors import Unavailable
from attnscope.weights_header import read_header, tensor_bytes

logger = logging.getLogger(__name__)
M = TypeVar("M")  # a loaded model (attnscope.engine.registry.ServedModel)
State = Literal["loaded", "loading", "not_loaded"]
POLL_S = 0.02
RETRY_AFTER_S = 2


class LoadFailed(Exception):
    """A listed model's folder failed to load; ``outcome`` is what the loader returned for it."""

    def __init__(self, model_id: str, outcome: object) -> None:
        self.model_id, self.outcome = model_id, outcome
        super().__init__(f"model {model_id!r} failed to load")


class Residency(Generic[M]):
    """The resident models under a bound. ``load(folder)`` returns the loaded model, or anything
    else for a folder that failed (it is then dropped from the folders and :class:`LoadFailed`
    carries it to whoever waited)."""

    def __init__(
        self,
        bound: int,
        load: Callable[[Path], object],
        loaded_type: type[M],
        *,
        max_bytes: int | None = None,
        cost: Callable[[Path], int] | None = None,
    ) -> None:
        self.bound = bound
        self.max_bytes = max_bytes  # None: only the count bounds them
        self._cost = cost or weights_bytes
        self._costs: dict[str, int] = {}  # model -> what its load costs (its weights' bytes)
        self._load = load
        self._type = loaded_type
        self.folders: dict[str, Path] = {}  # every listed model, resident or not
        self.resident: dict[str, M] = {}
        self._loading: dict[str, threading.Event] = {}
        self._pending: dict[str, threading.Event] = {}  # loads waiting for room, in arrival order
        self._failed: dict[str, object] = {}
        self._holds: Counter[str] = Counter()  # requests waiting for or decoding with a model
        self._used: dict[str, int] = {}
        self._tick = itertools.count()
        self._lock = threading.Lock()
        self.loads = 0  # loads done (a reload after an unload counts again)
        self.unloads = 0  # models unloaded
        self._trimmed = 0  # unloads whose memory was handed back to the OS (release_freed)

    def state(self, model_id: str) -> State:
        if model_id in self.resident:
            return "loaded"
        return "loading" if model_id in self._loading or model_id in self._pending else "not_loaded"

    def get_now(self, model_id: str) -> M | None:
        """The model if it is resident (marked as used), else None and its load started."""
        with self._lock:
            if model_id in self.resident:
                self._used[model_id] = next(self._tick)
                return self.resident[model_id]
        self._event(model_id)
        return None

    async def acquire(self, model_id: str, timeout_s: float) -> M:
        """The model, loading it first if needed, waiting at most ``timeout_s`` (polling: the
        event loop never blocks); then 503 "model X is loading" with Retry-After. While it
        waits, the model once loaded is held (never unloaded before this request has it)."""
        async with self.holding(model_id, timeout_s) as served:
            return served

    @asynccontextmanager
    async def holding(self, model_id: str, timeout_s: float) -> AsyncIterator[M]:
        """:meth:`acquire`, and the model stays held (never unloaded) until the block ends: a
        request holds its model from its arrival until its answer, queued or decoding."""
        deadline = time.monotonic() + timeout_s
        with self._held(model_id):
            while (served := self.get_now(model_id)) is None:
                self._raise_if_failed(model_id)
                if time.monotonic() >= deadline:
                    raise Unavailable(f"model {model_id} is loading; try again shortly", retry_after_s=RETRY_AFTER_S)
                await asyncio.sleep(POLL_S)
            yield served

    @contextmanager
    def pinned(self, model_id: str) -> Iterator[M]:
        """The model, resident and never unloaded until the block ends (a decode runs in it);
        loads it in this thread's time if another model's load had unloaded it meanwhile."""
        with self._held(model_id):
            while (served := self.get_now(model_id)) is None:
                self._event(model_id).wait()
                self._raise_if_failed(model_id)
            yield served

    def add(self, model_id: str, folder: Path, model: M) -> None:
        """List ``model_id`` (from ``folder``) as already loaded: start-up's loads with room for
        every folder, which load ``LOAD_THREADS`` at a time and publish in folder order."""
        with self._lock:
            self.folders[model_id] = folder
            self.resident[model_id] = model
            self._used[model_id] = next(self._tick)
            self.loads += 1

    def failures(self) -> dict[str, object]:
        """The listed models whose load failed (dropped from :attr:`folders`), with the outcome."""
        return dict(self._failed)

    def load_now(self, model_id: str) -> None:
        """Load ``model_id`` and wait for it (start-up's first models)."""
        self._event(model_id).wait()

    @contextmanager
    def _held(self, model_id: str) -> Iterator[None]:
        """While the block runs, ``model_id`` (once resident) is never unloaded."""
        with self._lock:
            self._holds[model_id] += 1
        try:
            yield
        finally:
            with self._lock:
                self._holds[model_id] -= 1
                self._start_due()  # the loads waiting for room first
                self._evict(self.bound)

    def _event(self, model_id: str) -> threading.Event:
        """The event set when ``model_id``'s load ends, starting that load unless one runs."""
        with self._lock:
            if model_id in self.resident or model_id in self._failed:
                done = threading.Event()
                done.set()
                return done
            if model_id in self._loading:
                return self._loading[model_id]
            if model_id in self._pending:
                return self._pending[model_id]
            event = self._pending[model_id] = threading.Event()
            self._start_due()
            return event

    def _start_due(self) -> None:
        """Start the waiting loads, in arrival order, while there is room. Under the lock."""
        for model_id in list(self._pending):
            if not self._make_room(model_id):
                return
            event = self._loading[model_id] = self._pending.pop(model_id)
            name = f"attnscope-load-{model_id}"
            threading.Thread(target=self._run_load, args=(model_id, event), name=name, daemon=True).start()

    def _make_room(self, model_id: str) -> bool:
        """Unload idle models (least recently used first) until ``model_id``'s load fits under
        the bound and the byte budget; False when the held ones fill it. The first load always
        fits. Under the lock."""
        self._evict(self.bound - len(self._loading) - 1)  # free memory before the load, not after
        need = self.cost_of(model_id)
        while self.max_bytes is not None and self.bytes_taken() + need > self.max_bytes and self._evict_one():
            pass
        taken = len(self.resident) + len(self._loading)
        fits = self.max_bytes is None or self.bytes_taken() + need <= self.max_bytes
        return taken == 0 or (taken < self.bound and fits)

    def cost_of(self, model_id: str) -> int:
        """What loading ``model_id`` costs: its folder's weights in bytes (read once)."""
        if model_id not in self._costs:
            try:
                self._costs[model_id] = self._cost(self.folders[model_id])
            except (OSError, ValueError, KeyError):
                self._costs[model_id] = 0  # unreadable: its load reports the folder
        return self._costs[model_id]

    def fits(self, model_id: str) -> bool:
        """Whether ``model_id`` loads within the byte budget beside the models there now."""
        return self.max_bytes is None or self.bytes_taken() + self.cost_of(model_id) <= self.max_bytes

    def bytes_taken(self) -> int:
        """The weights' bytes of the models resident and loading."""
        return sum(self.cost_of(m) for m in [*self.resident, *self._loading])

    def _run_load(self, model_id: str, event: threading.Event) -> None:
        self.release_freed()  # the models unloaded to make room: their memory back before this load's
        try:
            outcome = self._load(self.folders[model_id])
        except Exception as err:  # noqa: BLE001 - the loader reports folders; anything else is a failure too
            outcome = err
        with self._lock:
            if isinstance(outcome, self._type):
                self.resident[model_id] = outcome
                self._used[model_id] = next(self._tick)
                self.loads += 1
            else:
                self._failed[model_id] = outcome
                self.folders.pop(model_id, None)
            del self._loading[model_id]
            event.set()
            self._start_due()
            self._evict(self.bound)

    def release_freed(self) -> None:
        """After unloads, collect the unloaded models (a Transformer holds reference cycles, so
        dropping it frees nothing until the collector runs) and hand the freed memory back to the
        OS (issue 45.3: kept by malloc's arenas, a bounded server grew with every load). In the
        loading thread, before its load: a collection costs tens of milliseconds, a load more."""
        with self._lock:
            due, self._trimmed = self.unloads > self._trimmed, self.unloads
        if due:
            gc.collect()
            release_freed_memory()

    def _raise_if_failed(self, model_id: str) -> None:
        if model_id in self._failed:
            raise LoadFailed(model_id, self._failed[model_id])

    def failed(self, model_id: str) -> object | None:
        return self._failed.get(model_id)

    def _evict(self, keep: int) -> None:
        """Unload least recently used models until at most ``keep`` are resident, skipping those
        held (a request waits for them or decodes with them). Under the lock."""
        while len(self.resident) > max(keep, 0) and self._evict_one():
            pass

    def _evict_one(self) -> bool:
        """Unload the least recently used model no request holds; False when none is idle."""
        idle = [m for m in self.resident if self._holds[m] == 0]
        if not idle:
            return False
        victim = min(idle, key=lambda m: self._used.get(m, -1))
        del self.resident[victim]
        self.unloads += 1
        logger.info("unloaded %s (at most %d model(s) stay loaded; least recently used)", victim, self.bound)
        return True


def weights_bytes(folder: Path) -> int:
    """The bytes of the tensors in ``folder``'s ``*.safetensors`` files, from each file's header
    (attnscope.weights_header, whose parse the load's config check then reuses): what the
    weights take once loaded (as stored; ``int8`` serving takes less). BadHeader (a ValueError)
    for a file that is not safetensors."""
    return sum(tensor_bytes(read_header(path)) for path in sorted(folder.glob("*.safetensors")))
