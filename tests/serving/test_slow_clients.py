"""Slow clients cannot hold connections or memory (issue 35: 500 slowloris connections were
all still open after 30 s; 24 clients that never read their answers held 7 GB). Bounded: a few
connections against a server whose timeouts are set to 1 s."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from attnscope.testing import running_server

TIMEOUTS = {
    "ATTNSCOPE_CLIENT_HEADER_TIMEOUT_S": "1",
    "ATTNSCOPE_CLIENT_BODY_TIMEOUT_S": "1",
    "ATTNSCOPE_CLIENT_SEND_TIMEOUT_S": "1",
}
WAIT_S = 30  # an upper bound for the server to act, far above its 1 s timeouts: no timing asserted


@pytest.fixture(scope="module")
def strict_server(tiny_models_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    log = tmp_path_factory.mktemp("slow") / "server.log"
    with running_server(tiny_models_dir, log, env=TIMEOUTS) as url:
        yield url


def _connect(url: str, rcvbuf: int | None = None) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    sock = socket.socket()
    if rcvbuf is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.connect((host, int(port)))
    sock.settimeout(WAIT_S)
    return sock


def _read_until_closed(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (a reset counts as closed)."""
    received = b""
    try:
        while chunk := sock.recv(65536):
            received += chunk
    except ConnectionResetError:
        pass
    return received


def _slow_clients(url: str) -> dict[str, float]:
    counts = {}
    for line in httpx.get(f"{url}/metrics").text.splitlines():
        if line.startswith("attnscope_slow_clients_total{"):
            phase = line.split('phase="')[1].split('"')[0]
            counts[phase] = float(line.rsplit(" ", 1)[1])
    return counts


def test_slow_headers_get_408_and_the_connection_closes(strict_server: str) -> None:
    socks = [_connect(strict_server) for _ in range(4)]
    for sock in socks:
        sock.sendall(b"GET /api/health HTTP/1.1\r\nHost: localhost\r\nX-Slow: ")  # never finished
    for sock in socks:
        answer = _read_until_closed(sock)  # raises socket.timeout if the server kept it open
        assert answer.startswith(b"HTTP/1.1 408"), answer[:80]
        assert b"ATTNSCOPE_CLIENT_HEADER_TIMEOUT_S" in answer
        assert b"x-request-id: " in answer and b"content-security-policy: " in answer
        sock.close()
    assert _slow_clients(strict_server).get("header", 0) >= 4
    assert httpx.get(f"{strict_server}/api/health").status_code == 200


def test_a_byte_at_a_time_does_not_keep_headers_alive(strict_server: str) -> None:
    sock = _connect(strict_server)
    sent = 0
    try:
        for byte in b"GET /api/health HTTP/1.1\r\nHost: localhost\r\nX-Slow: " + b"a" * 200:
            sock.sendall(bytes([byte]))
            sent += 1
            time.sleep(0.1)
    except (BrokenPipeError, ConnectionResetError):
        pass
    answer = _read_until_closed(sock)
    sock.close()
    assert answer.startswith(b"HTTP/1.1 408") or sent < 200  # closed while it was still trickling


def test_slow_body_gets_408(strict_server: str) -> None:
    sock = _connect(strict_server)
    sock.sendall(
        b"POST /api/translate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
        b"Content-Length: 100\r\n\r\n{\"model\": "
    )
    answer = _read_until_closed(sock)
    sock.close()
    assert answer.startswith(b"HTTP/1.1 408"), answer[:80]
    assert b"ATTNSCOPE_CLIENT_BODY_TIMEOUT_S" in answer


def test_a_client_that_never_reads_is_disconnected(strict_server: str) -> None:
    """4.7 MB of Plotly.js to a client with a tiny receive buffer that reads nothing: once
    writing has been blocked for the send timeout, the server aborts the connection."""
    before = _slow_clients(strict_server).get("send", 0)
    sock = _connect(strict_server, rcvbuf=4096)
    sock.sendall(b"GET /vendor/plotly.min.js HTTP/1.1\r\nHost: localhost\r\n\r\n")
    deadline = time.monotonic() + WAIT_S
    while _slow_clients(strict_server).get("send", 0) <= before:
        assert time.monotonic() < deadline, "the server kept writing to a client that reads nothing"
        time.sleep(0.2)
    received = _read_until_closed(sock)
    sock.close()
    length = int(received.split(b"content-length: ", 1)[1].split(b"\r\n", 1)[0])
    assert len(received.split(b"\r\n\r\n", 1)[1]) < length  # the rest was dropped, not delivered
