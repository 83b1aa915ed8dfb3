"""uvicorn's HTTP/1.1 protocol with the timeouts it lacks against slow clients.

uvicorn closes an idle keep-alive connection, but waits forever for the rest of a request's
headers or body (a slowloris holds a connection with a byte every few seconds) and for a client
that never reads its answer (the answer stays buffered in memory, the connection open). Here:

- a request's headers must arrive within ``client_header_timeout_s`` of its first byte,
- its body within ``client_body_timeout_s`` of its headers (else ``408``, and the connection closes),
- an answer the client stops reading is dropped once writing has been blocked for
  ``client_send_timeout_s`` (the connection is aborted, its buffer freed).

Each is counted in ``attnscope_slow_clients_total{phase}``. A request h11 cannot parse (a bad
``Content-Length``, no ``Host`` header or two, a malformed request line) is answered here, before
any app runs: its 400 is JSON like the app's, with the security headers and an ``X-Request-ID``
(issue 45.8: uvicorn's own was plain text without them). ``attnscope serve`` runs with it;
the timeouts come from the settings given to :func:`configure` (else the environment's)."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any, Literal

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from attnscope.config import Settings, get_settings
from attnscope.serving import metrics
from attnscope.serving.middleware import SECURITY_HEADERS, new_request_id

logger = logging.getLogger(__name__)

Phase = Literal["header", "body", "send"]
_settings: Settings | None = None


def configure(settings: Settings) -> None:
    """Use ``settings``' timeouts in this process (else :func:`get_settings`, the environment's)."""
    global _settings
    _settings = settings


def _timeout_response(phase: Phase, seconds: float) -> bytes:
    body = json.dumps(
        {"detail": f"the request's {phase} did not arrive within {seconds:g} s (ATTNSCOPE_CLIENT_{phase.upper()}_TIMEOUT_S)"}
    ).encode()
    head = [b"HTTP/1.1 408 Request Timeout", b"content-type: application/json", b"connection: close",
            b"content-length: " + str(len(body)).encode()]  # fmt: skip
    head += [name + b": " + value for name, value in SECURITY_HEADERS]
    head.append(b"x-request-id: " + new_request_id().encode())
    return b"\r\n".join(head) + b"\r\n\r\n" + body


class TimedH11Protocol(H11Protocol):
    """:class:`H11Protocol` plus the header, body and send timeouts of the module docstring."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        settings = _settings or get_settings()
        self._limits: dict[Phase, float] = {
            "header": settings.client_header_timeout_s,
            "body": settings.client_body_timeout_s,
            "send": settings.client_send_timeout_s,
        }
        self._read_timer: asyncio.TimerHandle | None = None
        self._read_phase: Phase | None = None
        self._send_timer: asyncio.TimerHandle | None = None

    # -- reading: headers, then body -------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)  # type: ignore[arg-type]
        self._arm_read("header")

    def data_received(self, data: bytes) -> None:
        if not self._in_request():
            self._arm_read("header")  # the first bytes of a (next) request: keeps a running clock
        super().data_received(data)
        self._after_events()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._after_events()  # a pipelined request may have started

    def _in_request(self) -> bool:
        return self.cycle is not None and not self.cycle.response_complete

    def _after_events(self) -> None:
        if self._in_request():
            if self.cycle.more_body:
                self._arm_read("body")  # from the headers' arrival, not from each chunk
            else:
                self._disarm_read()
        elif self._read_phase == "body":
            self._disarm_read()

    def _arm_read(self, phase: Phase) -> None:
        if self._read_phase == phase:
            return
        self._disarm_read()
        self._read_phase = phase
        self._read_timer = self.loop.call_later(self._limits[phase], self._read_timed_out, phase)

    def _disarm_read(self) -> None:
        if self._read_timer is not None:
            self._read_timer.cancel()
        self._read_timer, self._read_phase = None, None

    def _read_timed_out(self, phase: Phase) -> None:
        self._read_timer, self._read_phase = None, None
        if self.transport.is_closing():
            return
        metrics.SLOW_CLIENTS.labels(phase).inc()
        logger.info("closing a connection from %s: its request %s took over %g s", _peer(self), phase, self._limits[phase])
        if self.cycle is None or not self.cycle.response_started:
            self.transport.write(_timeout_response(phase, self._limits[phase]))
        self.transport.close()  # the app (if it runs) sees http.disconnect

    # -- writing: an answer nobody reads -----------------------------------------------------

    def pause_writing(self) -> None:
        super().pause_writing()
        if self._send_timer is None:
            self._send_timer = self.loop.call_later(self._limits["send"], self._send_timed_out)

    def resume_writing(self) -> None:
        super().resume_writing()
        if self._send_timer is not None:
            self._send_timer.cancel()
            self._send_timer = None

    def _send_timed_out(self) -> None:
        self._send_timer = None
        if self.transport.is_closing() and self.transport.get_write_buffer_size() == 0:
            return
        metrics.SLOW_CLIENTS.labels("send").inc()
        logger.info(
            "aborting a connection to %s: it read nothing of its answer for %g s (%d bytes waiting)",
            _peer(self), self._limits["send"], self.transport.get_write_buffer_size(),
        )  # fmt: skip
        self.transport.abort()  # drops the buffered answer; connection_lost wakes the app's send

    def send_400_response(self, msg: str) -> None:
        """uvicorn's answer to a request h11 refused, as the app would give it (module docstring)."""
        body = json.dumps({"detail": f"{msg.rstrip('.')}: a malformed request line or header, a bad Content-Length, "
                           "or no Host header or more than one"}).encode()  # fmt: skip
        request_id = new_request_id()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                   (b"connection", b"close"), *SECURITY_HEADERS, (b"x-request-id", request_id.encode())]  # fmt: skip
        logger.info("%s 400 from %s: a request h11 could not parse", request_id, _peer(self))
        for event in (h11.Response(status_code=400, headers=headers, reason=b"Bad Request"), h11.Data(data=body), h11.EndOfMessage()):
            self.transport.write(self.conn.send(event))
        self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_read()
        if self._send_timer is not None:
            self._send_timer.cancel()
            self._send_timer = None
        super().connection_lost(exc)


def _peer(protocol: H11Protocol) -> str:
    return f"{protocol.client[0]}:{protocol.client[1]}" if protocol.client else "a client"
