"""``POST /api/translate/stream``: a translation as it is made, as server-sent events.

The request is a translate request and goes the same way (validation, admission, the queue, the
deadline, the metrics), decoding alone: ``ModelService.translate`` with an ``on_step`` callback.
The callback runs in the decode's thread and turns each :class:`~attnscope.decoding.steps.DecodeStep`
into one ``step`` event (tokens, probabilities, the step's new attention rows, rounded like the
answer's); the last event, ``answer``, is the answer ``/api/translate`` gives, built and
serialised by the same code (``answers.answer_json``). With ``"attention": "on_demand"`` a step
event carries no rows but an ``attention_id`` of its own (the rows are in the attention store). Events, in order:

- ``step`` (one per decoder step): see :func:`step_event`.
- ``answer``: the ``/api/translate`` answer (its ``timing_ms`` is this decode's).
- ``error`` (instead of ``answer``, when the decode fails after the first step, e.g. its
  deadline passes): ``{"status": 504, "detail": "..."}``. Failures before the first step are the
  plain JSON errors of ``/api/translate`` (422, 404, 503...), with their status codes.

A client that disconnects stops the decode at its next step (``attnscope_decodes_cancelled``
with reason ``client_gone``, and ``attnscope_streams`` with outcome ``client_gone``)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any, cast

import orjson
from fastapi import APIRouter, Request
from fastapi.responses import Response, StreamingResponse
from prometheus_client import Counter

from attnscope.decoding.steps import Candidate, DecodeStep
from attnscope.engine.answers import answer_json, matrix
from attnscope.engine.attention_store import AttentionStore
from attnscope.engine.registry import ServedModel
from attnscope.engine.request import AnswerOptions, ServiceRequest
from attnscope.engine.schemas import ErrorResponse, TranslateRequest, TranslationResponse
from attnscope.engine.stream_flow import StepBuffer, step_fields
from attnscope.repository import LoadedModel
from attnscope.serving import llm_common
from attnscope.serving.deps import ServiceDep
from attnscope.serving.disconnect import watch_disconnect
from attnscope.serving.errors import status_of

router = APIRouter(prefix="/api", tags=["api"])

TOP_K = 5  # the most likely next tokens each step reports, per row
STREAMS = Counter("attnscope_streams", "Streamed translations, by how they ended.", ["outcome"])
_END = b""  # the queue's last item: the decode has returned (or failed)
Decoding = Coroutine[Any, Any, list[TranslationResponse]]  # a stream's decode, awaited in a task


class StepEvents:
    """DecodeStep -> the bytes of one ``step`` event, for one request's model and options."""

    def __init__(
        self, loaded: LoadedModel, options: AnswerOptions, source_ids: Callable[[], list[int]],
        store: AttentionStore | None = None,
    ) -> None:  # fmt: skip
        """``store``: on demand, where each step's rows go (the event carries their id instead)."""
        self.loaded, self.options, self.source_ids, self.store = loaded, options, source_ids, store

    def kinds(self, step: DecodeStep) -> dict[str, Any]:
        """The step's attention rows per kind, as the answer would hold them: cross
        ``[row][layer][head][source]``, decoder_self ``[row][layer][head][t + 1]`` and, at step 0
        only, the whole encoder_self ``[layer][head][source][source]`` (of sentence 0)."""
        wanted = self.options.kinds
        found = {"cross": step.cross, "decoder_self": step.decoder_self}
        if step.encoder_self is not None:
            found["encoder_self"] = step.encoder_self[0]
        return {
            kind: matrix(rows, self.options.decimals)
            for kind, rows in found.items()
            if rows is not None and kind in self.loaded.config.attention_kinds and (wanted is None or kind in wanted)
        }

    def encode(self, step: DecodeStep) -> bytes:
        return b"event: step\ndata: " + orjson.dumps(self.event(step), option=orjson.OPT_SERIALIZE_NUMPY) + b"\n\n"

    def event(self, step: DecodeStep) -> dict[str, Any]:
        """``step``: t; ``beam``; ``chosen``: per row of the next step (beam; greedy: per row of
        this one) the token that extends row ``parent`` of this step, or null for a dead beam
        slot; ``finished`` (beam): hypotheses that ended here, with their ``ranking``; ``ended``
        (beam): what a sentence that finished here had kept (pruned tree nodes); ``top``:
        per row of this step its ``TOP_K`` likeliest next tokens and their probabilities;
        ``attention``: :meth:`kinds`, or on demand ``attention_id`` and ``attention_shapes``
        instead (:func:`~attnscope.engine.stream_flow.step_fields`: the rows are fetched by id);
        step 0 also has ``source_tokens`` (the answer's), so a player can label the source axis
        before the answer comes."""
        top_p, top_id = step.log_probs.float().exp().topk(min(TOP_K, step.log_probs.size(-1)), dim=-1)
        pieces = self.loaded.tokenizer.pieces
        first = {"source_tokens": pieces(self.source_ids())} if step.step == 0 else {}
        if self.store is not None and self.options.on_demand:
            rows = step_fields(self.store, self.loaded.id, step, self.loaded.config.attention_kinds)
        else:
            rows = {"attention": self.kinds(step)}
        return {
            **first,
            "step": step.step,
            "beam": step.beam,
            "chosen": [None if c is None else self._candidate(c) for c in step.chosen],
            "finished": [self._candidate(c) for c in step.finished],
            "ended": [self._candidate(c) for c in step.ended],
            "top": [
                [{"token": p, "token_id": i, "p": round(q, 6)} for p, i, q in zip(pieces(ids), ids, probs, strict=True)]
                for ids, probs in zip(top_id.tolist(), top_p.tolist(), strict=True)
            ],
            **rows,
        }

    def _candidate(self, c: Candidate) -> dict[str, Any]:
        out: dict[str, Any] = {
            "parent": c.parent,
            "token": self.loaded.tokenizer.pieces([c.token])[0],
            "token_id": c.token,
            "logprob": round(c.logprob, 6),
            "score": round(c.score, 6),
        }
        if c.node >= 0:
            out["node"] = c.node
        if c.ranking is not None:
            out["ranking"] = round(c.ranking, 6)
        return out


def _ended(task: asyncio.Task[Any], events: StepBuffer) -> None:
    if not task.cancelled():
        task.exception()  # retrieved: a stream whose client left ends in ClientGone, unread
    events.finish(_END)


def _error_event(exc: BaseException) -> bytes:
    code = status_of(exc)
    detail = str(exc) if code != 500 else f"internal server error ({type(exc).__name__}); see the server log"
    return b"event: error\ndata: " + orjson.dumps({"status": code, "detail": detail}) + b"\n\n"


@router.post(
    "/translate/stream",
    responses={
        200: {"content": {"text/event-stream": {}}, "description": "`step` events, then `answer` (or `error`)."},
        404: {"model": ErrorResponse, "description": "Unknown model; `available` lists the ids."},
        422: {"model": ErrorResponse, "description": "Invalid input, or a decode over the cost budget."},
        503: {"model": ErrorResponse, "description": "Busy (queue full) or still loading; see `Retry-After`."},
    },
    summary="Translate one text, streaming each decoder step (server-sent events)",
)
async def translate_stream(body: TranslateRequest, service: ServiceDep, request: Request) -> Response:
    """The body of ``/api/translate``. One ``step`` event per decoder step (its tokens, their
    probabilities and the step's new attention rows for every kind, layer and head; for beam
    search the live hypotheses with back-pointers), then an ``answer`` event holding exactly what
    ``/api/translate`` answers (see docs/api.md, "Streaming"). Not with ``protect``. A decoder-only
    model (docs/llm.md) sends the same events (its beam events name no tree nodes)."""
    if llm := llm_common.served_llm(request, body.model):
        return await _llm_stream(llm, body, service, request)
    async with service.holding(body.model) as served:  # waits for its load; translate holds it on
        return await _stream(served, body, service, request)


async def _stream(served: ServedModel, body: TranslateRequest, service: ServiceDep, request: Request) -> Response:
    asked = ServiceRequest.of(body)  # as /api/translate's, explain included (issue 34)
    encoder = StepEvents(
        served.loaded, asked.answer, lambda: served.translator.for_languages(*asked.languages).source_ids(body.text),
        store=service.attention_store,
    )  # languages checked by service.translate before any step
    def decode(gone: threading.Event, put: Callable[[bytes], None]) -> Decoding:
        def on_step(step: DecodeStep) -> None:  # in the decode's thread
            put(encoder.encode(step))

        return service.translate(asked, gone=gone, log=request.scope.get("attnscope.log"), on_step=on_step)

    return await _respond(service, request, decode)


async def _respond(
    service: ServiceDep,
    request: Request,
    decode: Callable[[threading.Event, Callable[[bytes], None]], Decoding],
) -> Response:
    """The event stream of ``decode(gone, put)`` (its steps ``put`` as encoded events, in the
    decode's thread), or its plain JSON error when it fails before the first step."""
    events: StepBuffer | None = None

    def put(data: bytes) -> None:
        assert events is not None
        events.put(data)

    # Until the first step (in the queue, say) a client that leaves is seen here; from then on,
    # by the response: closing its body sets ``gone`` (see _events).
    async with watch_disconnect(request) as gone:
        # bounded: when the writer falls behind, the decode waits (past the send timeout it stops)
        events = StepBuffer(
            asyncio.get_running_loop(), max_bytes=service.settings.stream_buffer_bytes,
            send_timeout_s=service.settings.client_send_timeout_s, gone=gone,
        )  # fmt: skip
        buffer = events
        task = asyncio.create_task(decode(gone, put))
        # Events were queued (call_soon_threadsafe) before the decode's result was: _END comes last.
        task.add_done_callback(lambda done: _ended(done, buffer))
        first = await buffer.get()
    if first == _END:  # refused or failed before any step: the plain JSON error (or no steps)
        task.result()
    return StreamingResponse(
        _events(first, buffer, task, gone, service),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


async def _events(
    first: bytes, events: StepBuffer, task: asyncio.Task[list[TranslationResponse]], gone: threading.Event,
    service: Any,
) -> AsyncIterator[bytes]:
    """The response body: the step events as they come, then the answer (or an error). Closed
    early (the client left), it tells the decode to stop."""
    outcome = "client_gone"
    try:
        item = first
        while item != _END:
            yield item
            item = await events.get()
        if task.exception() is not None:
            outcome = "error"
            yield _error_event(cast(BaseException, task.exception()))
            return
        (answer,) = task.result()
        body = await service.pool.encode(lambda: answer_json(answer))
        outcome = "completed"
        yield b"event: answer\ndata: " + body + b"\n\n"
    finally:
        if outcome == "client_gone":
            gone.set()  # the decode stops before its next step
            events.close()  # and a decode waiting for room in the buffer stops now
        STREAMS.labels(outcome).inc()


async def _llm_stream(llm: Any, body: TranslateRequest, service: ServiceDep, request: Request) -> Response:
    """A decoder-only model's stream (docs/llm.md): a ``step`` event per step of the search
    (:class:`attnscope.llm.common.StepEvents`, the shape of an encoder-decoder's), then the
    ``answer`` ``/api/translate`` gives."""
    encoder = llm_common.step_events(llm, body, service.attention_store)  # 422/404 before the stream starts

    def decode(gone: threading.Event, put: Callable[[bytes], None]) -> Decoding:
        def on_step(found: Any) -> None:  # in the decode's thread: an attnscope.llm.search.SearchStep
            assert encoder is not None
            put(b"event: step\ndata: " + orjson.dumps(encoder.event(found), option=orjson.OPT_SERIALIZE_NUMPY) + b"\n\n")

        return llm_common.translate(service, llm, body, on_step=on_step if encoder else None, gone=gone)

    return await _respond(service, request, decode)
