"""The server's outer layers, as plain ASGI middleware (they never buffer a body or touch a
thread pool): one log line and the metrics per request, the Host allow-list, the body-size limit
and the security headers.

    request -> SecurityHeaders -> RequestLog -> HostCheck -> BodyLimit -> GZip -> the app

SecurityHeaders is outermost and RequestLog answers unexpected errors itself, so every answer
(the Host check's 400, the body limit's 413, a 500) has the headers and an ``X-Request-ID``."""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import re
import secrets
import time
from typing import Any

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from attnscope.engine import metrics as engine_metrics
from attnscope.serving import metrics
from attnscope.serving.errors import retry_after, unexpected_body, unexpected_start

logger = logging.getLogger("attnscope.serving.requests")

# Scripts only from this server; no plugins, no framing, no <base> games; styles may be inline
# (Plotly and Swagger UI set style attributes and inject <style> rules); ReDoc's search runs in
# a worker made from a blob: URL.
CONTENT_SECURITY_POLICY = "; ".join(
    [
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self' 'unsafe-inline'",
        "img-src 'self' data: blob:",
        "font-src 'self' data:",
        "worker-src 'self' blob:",
        "connect-src 'self'",
        "object-src 'none'",
        "frame-ancestors 'none'",
        "base-uri 'self'",
        "form-action 'self'",
    ]
)
SECURITY_HEADERS: list[tuple[bytes, bytes]] = [
    (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (b"cross-origin-opener-policy", b"same-origin"),
]


async def _send_json(send: Send, status: int, detail: str) -> None:
    body = json.dumps({"detail": detail}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


SHUTTING_DOWN = json.dumps(
    {"detail": "the server is shutting down and stopped this request (ATTNSCOPE_SHUTDOWN_TIMEOUT_S); retry"}
).encode()


def _json_start(status: int, body: bytes, extra: tuple[tuple[bytes, bytes], ...] = ()) -> Message:
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *extra]
    return {"type": "http.response.start", "status": status, "headers": headers}


_ID_PREFIX = secrets.token_hex(4)  # this process's; with a counter: unique across replicas
_ID_COUNTER = itertools.count(1)


def new_request_id() -> str:
    """16 hex digits: the process's random prefix and a counter. ``uuid4`` read the kernel's random
    source for every request, ~0.3 ms each under load on this machine."""
    return f"{_ID_PREFIX}{next(_ID_COUNTER) & 0xFFFFFFFF:08x}"


class RequestLog:
    """One log line per request (id, method, path, status, ms, and for inference the model,
    tokens, beams and outcome) and the request metrics. The id is the client's ``X-Request-ID``
    when it sends one, else a new one; it comes back in the answer's ``X-Request-ID``.
    ``running`` holds the tasks of the requests in progress, so that shutdown can wait for the
    ones uvicorn cancelled to send their 503 (:func:`answer_cancelled`)."""

    running: set[asyncio.Task[Any]] = set()

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        task = asyncio.current_task()
        if task is not None:
            RequestLog.running.add(task)
        headers = dict(scope.get("headers") or [])
        request_id = headers.get(b"x-request-id", b"").decode("latin-1")[:64] or new_request_id()
        fields: dict[str, Any] = {}
        scope["attnscope.log"] = fields
        status = 500
        status_started: int | None = None

        async def send_with_id(message: Message) -> None:
            nonlocal status, status_started
            if message["type"] == "http.response.start":
                status = status_started = message["status"]
                message["headers"] = [*message.get("headers", []), (b"x-request-id", request_id.encode())]
                route = _route_of(scope)
                metrics.LATENCY.labels(route).observe(time.perf_counter() - started)
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        except asyncio.CancelledError:
            # uvicorn cancels what still runs when the shutdown grace period ends: a 503 with
            # Retry-After (retry elsewhere or after the restart), not the 500 it would send
            if status_started is not None:
                raise  # the answer has begun: uvicorn drops the connection
            status = 503
            retry = tuple((k.lower().encode(), v.encode()) for k, v in retry_after(5).items())
            await send_with_id(_json_start(503, SHUTTING_DOWN, retry))
            await send({"type": "http.response.body", "body": SHUTTING_DOWN})
            engine_metrics.CANCELLED.labels("shutdown").inc()
            # answered: the request's task ends here (re-raising would only log a traceback)
        except Exception as exc:
            # Answered here, not by Starlette's outermost error layer: so the 500 carries the
            # request id and the security headers (that layer sits outside every middleware)
            if status_started is not None:
                raise  # the answer has begun: nothing to do but drop the connection
            status = 500
            await send_with_id(unexpected_start(scope, exc))
            await send({"type": "http.response.body", "body": unexpected_body(exc)})
        finally:
            if task is not None:
                RequestLog.running.discard(task)
            ms = (time.perf_counter() - started) * 1000.0
            route = _route_of(scope)
            metrics.REQUESTS.labels(route, known_method(scope["method"]), str(status)).inc()
            logger.info(
                "request id=%s %s %s model=%s tokens=%s beams=%s ms=%.1f status=%d outcome=%s",
                request_id, scope["method"], scope["path"], fields.get("model", "-"), fields.get("tokens", "-"),
                fields.get("beams", "-"), ms, status, _outcome(status),
            )  # fmt: skip


async def answer_cancelled(timeout_s: float = 1.0) -> None:
    """Give the requests still in progress (at shutdown: those uvicorn cancelled when the grace
    period ended) up to ``timeout_s`` to send their 503: without a wait the lifespan's shutdown
    can end, and the loop close, before their handlers ever run, dropping the connections."""
    pending = [task for task in RequestLog.running if not task.done() and task is not asyncio.current_task()]
    if pending:
        await asyncio.wait(pending, timeout=timeout_s)


def _route_of(scope: Scope) -> str:
    """The matched route's path template (``/api/translate``, ``/static``), never the raw path:
    metrics keep one series per route."""
    route = scope.get("route")
    return str(getattr(route, "path", None) or "unmatched")


KNOWN_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "CONNECT", "TRACE"})


def known_method(method: str) -> str:
    """The HTTP method as a metrics label: any other (a client can send ``FOO123``) is "other",
    so invented methods cannot grow ``/metrics`` without bound."""
    return method if method in KNOWN_METHODS else "other"


def _outcome(status: int) -> str:
    if 200 <= status < 400:
        return "ok"
    return {413: "too_large", 422: "rejected", 499: "client_gone", 503: "busy", 504: "deadline"}.get(
        status, "error" if status >= 500 else "rejected"
    )


class HostCheck:
    """Answer only to allowed Host names (against DNS rebinding: a page on another site whose
    name resolves to 127.0.0.1 would otherwise reach this server with the user's browser)."""

    def __init__(self, app: ASGIApp, allowed: list[str]) -> None:
        self.app = app
        self.allowed = [name.lower() for name in allowed]

    def allows(self, host: str) -> bool:
        if "*" in self.allowed:
            return True
        name = host_name(host)
        return any(name == a or (a.startswith("*.") and name.endswith(a[1:])) for a in self.allowed)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            host = dict(scope.get("headers") or []).get(b"host", b"").decode("latin-1")
            if not self.allows(host):
                engine_metrics.REJECTED.labels("host").inc()
                await _send_json(
                    send, 400, f"host {host!r} is not allowed; add it to ATTNSCOPE_ALLOWED_HOSTS (comma-separated)"
                )
                return
        await self.app(scope, receive, send)


_HOST = re.compile(r"(?:\[(?P<v6>[0-9a-f:.]+)\]|(?P<name>[a-z0-9_.-]+)|(?P<bare6>[0-9a-f:.]*:[0-9a-f:.]*))(?::\d{1,5})?")


def host_name(host: str) -> str:
    """A Host header without its port: ``localhost:8000`` -> ``localhost``, ``[::1]:8000`` -> ``::1``.
    Anything else than a name, an IPv4 or IPv6 address and a numeric port (``localhost:8300@evil.example``,
    userinfo, paths, spaces) gives "", which no allow-list entry matches."""
    host = host.strip().lower()
    match = _HOST.fullmatch(host)
    if match is None:
        return ""
    if match["bare6"] is not None:  # ::1 without brackets: the whole is the address
        return host if ":" in host and _HOST.fullmatch(f"[{host}]") else ""
    return str(match["v6"] or match["name"])


class BodyLimit:
    """413 for a body over ``limit`` bytes: at once when ``Content-Length`` says so, else as soon
    as the streamed body passes it (nothing larger is ever read)."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    def _too_large(self) -> str:
        return f"the request body is over the limit of {self.limit} bytes (ATTNSCOPE_MAX_BODY_BYTES)"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope.get("headers") or []).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.limit:
            engine_metrics.REJECTED.labels("body_too_large").inc()
            await _send_json(send, 413, self._too_large())
            return
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    engine_metrics.REJECTED.labels("body_too_large").inc()
                    raise HTTPException(413, self._too_large())  # FastAPI passes it on: a JSON 413
            return message

        await self.app(scope, counted, send)


class SecurityHeaders:
    """The headers of :data:`SECURITY_HEADERS` on every answer, errors included."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_secured(message: Message) -> None:
            if message["type"] == "http.response.start":
                present = {name.lower() for name, _ in message.get("headers", [])}
                message["headers"] = [*message.get("headers", []), *(h for h in SECURITY_HEADERS if h[0] not in present)]
            await send(message)

        await self.app(scope, receive, send_secured)
