"""The two ASGI layers ``serve --ray`` adds around the app (issue 45.6), each a few lines of pure
ASGI so that neither needs Ray to be tested:

- :class:`OneRequestId`, outermost in each replica's app: Serve's proxy puts its request id in
  the request's ``x-request-id`` (the client's own, if it sent one), which the app's request log
  takes as its id, and adds that same id to the answer itself; the app's copy made every answer
  carry the header twice. The replica's answers leave it to the proxy.
- :class:`ReplicaGone`, in front of Serve's HTTP proxy (:func:`proxy_middlewares`, named by
  ``RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH``, which ``serve --ray`` sets for a local Ray): a request in flight on a
  replica that dies (killed, out of memory) ends in the proxy without any answer, which uvicorn
  turns into a plain-text 500. It becomes what the app says when it cannot take a request: a
  503 with ``Retry-After`` and a JSON ``detail`` (Serve restarts the replica; a retry reaches a
  live one)."""

from __future__ import annotations

import json
import logging
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

logger = logging.getLogger(__name__)
REQUEST_ID = b"x-request-id"
# What RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH names to put ReplicaGone in front of the proxies
PROXY_CALLBACK = "attnscope.serving.ray_serve_http:proxy_middlewares"
# About a replica's restart with tiny to small models; the client may retry sooner
RETRY_AFTER_S = 5


class OneRequestId:
    """Drops the app's ``x-request-id`` from each answer (Serve's proxy adds the same one)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def without_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {
                    **message,
                    "headers": [
                        (k, v) for k, v in message.get("headers", []) if k.lower() != REQUEST_ID
                    ],
                }
            await send(message)

        await self.app(scope, receive, without_id)


class ReplicaGone:
    """Answers 503 + ``Retry-After`` (JSON) where the proxy ends a request without any answer or
    with an exception before one began (the replica serving it died)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def watching(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, watching)
        except Exception:
            if started:
                raise
            logger.warning(
                "a request to %s failed before any answer: 503", scope.get("path"), exc_info=True
            )
        if not started:
            await send_unavailable(send, scope)


async def send_unavailable(send: Send, scope: Scope) -> None:
    """The 503 of :class:`ReplicaGone`, with the request's id when it had one."""
    headers = dict(scope.get("headers") or [])
    body = json.dumps(
        {
            "detail": "the replica serving this request stopped before it answered (Ray Serve is restarting it); "
            f"retry in {RETRY_AFTER_S} s",
            "errors": [],
        }
    ).encode()
    out = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
           (b"retry-after", str(RETRY_AFTER_S).encode())]  # fmt: skip
    if REQUEST_ID in headers:
        out.append((REQUEST_ID, headers[REQUEST_ID]))
    await send({"type": "http.response.start", "status": 503, "headers": out})
    await send({"type": "http.response.body", "body": body})


def proxy_middlewares() -> list[Any]:
    """The middlewares of Serve's HTTP proxies: Serve calls this in each proxy where
    ``RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH`` names it (:data:`PROXY_CALLBACK`)."""
    from starlette.middleware import Middleware

    return [Middleware(ReplicaGone)]
