"""A stream's price and its backpressure (issue 45.1).

**Price.** ``/api/translate/stream`` sends, besides the final answer, one ``step`` event per
decoder step holding every live row's new attention (cross ``[row][layer][head][source]``,
decoder_self ``[row][layer][head][t + 1]``, encoder_self once), its top tokens and its chosen
candidates: beam × steps × rows, where the answer holds one hypothesis. With ``"attention":
"on_demand"`` the events carry none: each step's rows go to the attention store instead, one entry
a step (:func:`step_fields`), and :func:`stored_step_bytes` is what admission adds to the store's
count. :func:`stream_bytes`
bounds that total before decoding; admission refuses a stream over
``ATTNSCOPE_MAX_ANSWER_BYTES`` with a 422 naming the ways under it (``admit_stream``), and the
admitted cost counts the stream's bytes (the scheduler's memory accounting sees them).

**Backpressure.** The decode's thread hands each encoded event to a :class:`StepBuffer` holding
at most ``ATTNSCOPE_STREAM_BUFFER_BYTES`` (4 MB; one event more when it is empty): when it is full the decode
waits for the response writer, so a slow reader slows its decode instead of growing the server's
memory; a client that reads nothing for ``ATTNSCOPE_CLIENT_SEND_TIMEOUT_S`` is dropped (the
decode stops with ClientGone, the slot is freed).
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from dataclasses import replace
from typing import Any

from prometheus_client import Counter, Gauge

from attnscope.config import Settings
from attnscope.decoding.steps import DecodeStep
from attnscope.engine import metrics
from attnscope.engine.attention_store import AttentionStore, Recorded, kept
from attnscope.engine.errors import InvalidInput
from attnscope.engine.limits import TOKEN_BYTES, Asked, Cost, answer_bytes
from attnscope.engine.registry import ServedModel
from attnscope.nn.config import ModelConfig
from attnscope.nn.family import geometry_of

TOP_K = 5
TOP_BYTES = 60  # one {"token", "token_id", "p"} of a row's top list
CANDIDATE_BYTES = 130  # one chosen/finished candidate
QUEUED_PEAK = Gauge("attnscope_stream_queued_peak_bytes", "Most bytes any stream held unsent.", multiprocess_mode="max")
DROPPED = Counter("attnscope_streams_dropped", "Streams dropped: the client read nothing within the send timeout.")
WAITS = Counter("attnscope_stream_waits", "Times a streaming decode waited for its writer (a full buffer).")


def stream_bytes(served: ServedModel, source: int, budget: int, asked: Asked) -> int:
    """An upper bound of one stream's bytes: the step events of ``budget`` steps at ``asked.beams``
    rows each (attention rows as asked, top tokens, candidates) plus the final answer."""
    config = served.loaded.config
    g = geometry_of(config)
    width = max(asked.decimals + 3, 4)
    wanted = [k for k in g.kinds if asked.kinds is None or k in asked.kinds]
    per_row = g.decoder_layers * g.heads
    floats = 0
    if "cross" in wanted:
        floats += asked.beams * budget * per_row * source
    if "decoder_self" in wanted:
        floats += asked.beams * per_row * budget * (budget + 1) // 2
    if "encoder_self" in wanted:
        floats += g.encoder_layers * g.heads * source * source
    rows = asked.beams * budget * (TOP_K * TOP_BYTES + 2 * CANDIDATE_BYTES) + TOKEN_BYTES * source
    return floats * width + rows + answer_bytes(config, [source], [budget], asked)


def stored_step_bytes(config: ModelConfig, source: int, budget: int, beams: int, *, element: int = 4) -> int:
    """An upper bound of what an on-demand stream's steps put in the attention store (besides its
    answer's entry): ``beams`` rows a step for ``budget`` steps of cross ``(L, H, rows, S)`` and
    decoder_self ``(L, H, rows, t + 1)``, and encoder_self once, ``element`` bytes a weight."""
    g = geometry_of(config)
    per_row = g.decoder_layers * g.heads
    sizes = {
        "cross": beams * budget * per_row * source,
        "decoder_self": beams * per_row * budget * (budget + 1) // 2,
        "encoder_self": g.encoder_layers * g.heads * source * source,
    }
    return sum(sizes[kind] for kind in g.kinds) * element


def step_fields(store: AttentionStore, model: str, step: DecodeStep, kinds: tuple[str, ...]) -> dict[str, Any]:
    """An on-demand ``step`` event's ``attention_id`` and ``attention_shapes``: the step's rows of
    ``kinds`` kept in ``store`` as one entry in the one format, ``[layer][head][row][key]``
    (cross ``(L, H, N, S)``, decoder_self ``(L, H, N, t + 1)``; step 0 also the whole
    encoder_self ``(L, H, S, S)`` of its sentence), so ``GET /api/attention/{id}/{kind}/{layer}/{head}``
    is one head's rows ``[row][key]`` for this step, the numbers an inline step event holds."""
    found = {"cross": step.cross, "decoder_self": step.decoder_self}
    attention = {kind: rows.permute(1, 2, 0, 3).contiguous() for kind, rows in found.items() if rows is not None and kind in kinds}
    if step.encoder_self is not None and "encoder_self" in kinds:
        attention["encoder_self"] = step.encoder_self[0]
    recorded = Recorded(model=model, attention=kept(attention))
    return {"attention_id": store.put(recorded), "attention_shapes": recorded.shapes()}


def admit_stream(settings: Settings, served: ServedModel, source: int, budget: int, asked: Asked, cost: Cost) -> Cost:
    """``cost`` (the answer's admission) with the stream's bytes in place of the answer's; 422
    naming the limit and the largest beam_size / max_length (or fewer kinds) that fit."""
    size = stream_bytes(served, source, budget, asked)
    limit = settings.max_answer_bytes
    if size <= limit:
        return replace(cost, answer_bytes=size)
    metrics.REJECTED.labels("answer_size").inc()

    def fits(beams: int = asked.beams, steps: int = budget, **change: object) -> bool:
        return stream_bytes(served, source, steps, replace(asked, beams=beams, **change)) <= limit  # type: ignore[arg-type]

    ways = [f"beam_size ≤ {b}" for b in range(asked.beams - 1, 0, -1) if fits(beams=b)][:1]
    ways += [f"max_length ≤ {m}" for m in range(budget - 1, 0, -1) if fits(steps=m)][:1]
    ways += [f"precision ≤ {d}" for d in range(asked.decimals - 1, -1, -1) if fits(decimals=d)][:1]
    ways.append('"attention": []')
    raise InvalidInput(
        ("body",),
        f"this stream would send up to {size / 1e6:.1f} MB ({asked.beams} beam rows × up to {budget} steps of "
        f"attention, top tokens and candidates, then the answer); the limit is {limit / 1e6:g} MB "
        f"(ATTNSCOPE_MAX_ANSWER_BYTES). To get under it, ask for {', or '.join(ways)}",
        kind="answer_size_limit",
    )


_peak = 0  # this process's largest peak, for the gauge


def _note_peak(size: int) -> None:
    global _peak
    if size > _peak:
        _peak = size
        QUEUED_PEAK.set(size)


class StepBuffer:
    """The bounded hand-over of encoded events from a decode's thread (:meth:`put`) to the
    response writer on the event loop (:meth:`get`). ``queued_bytes``/``peak_bytes`` and
    ``waits`` say what it held and how often the decode waited."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, *, max_bytes: int, send_timeout_s: float, gone: threading.Event
    ) -> None:
        self._loop, self.max_bytes, self.send_timeout_s, self.gone = loop, max_bytes, send_timeout_s, gone
        self._items: deque[bytes] = deque()
        self._cond = threading.Condition()
        self._wake = asyncio.Event()
        self._closed = False
        self.queued_bytes = self.peak_bytes = self.waits = 0

    def put(self, data: bytes) -> None:
        """In the decode's thread: wait while the buffer is full, at most the send timeout; then
        the stream is dropped: ``gone`` is set, so the decode stops at its next step (as for a
        client that hung up: ``attnscope_decodes_cancelled{reason="client_gone"}``). After the
        writer has gone, events are dropped at once."""
        with self._cond:
            if self._items and self.queued_bytes + len(data) > self.max_bytes:
                self.waits += 1
                WAITS.inc()
                room = self._cond.wait_for(
                    lambda: self._closed or not self._items or self.queued_bytes + len(data) <= self.max_bytes,
                    timeout=self.send_timeout_s,
                )
                if not room:
                    DROPPED.inc()
                    self._closed = True
            if self._closed:
                self.gone.set()
                return
            self._append(data)
        self._loop.call_soon_threadsafe(self._wake.set)

    def finish(self, data: bytes) -> None:
        """On the event loop: the last item (the end marker), never waiting."""
        with self._cond:
            self._append(data)
        self._wake.set()

    def _append(self, data: bytes) -> None:
        self._items.append(data)
        self.queued_bytes += len(data)
        if self.queued_bytes > self.peak_bytes:
            self.peak_bytes = self.queued_bytes
            _note_peak(self.peak_bytes)

    async def get(self) -> bytes:
        """On the event loop: the next event, waiting for one."""
        while True:
            with self._cond:
                if self._items:
                    data = self._items.popleft()
                    self.queued_bytes -= len(data)
                    self._cond.notify_all()
                    return data
                self._wake.clear()
            await self._wake.wait()

    def close(self) -> None:
        """The writer has gone: a waiting or later :meth:`put` returns at once, dropping its event."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
