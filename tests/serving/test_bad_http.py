"""Issue 45.8: a request uvicorn's h11 layer refuses before the app runs (a bad Content-Length, no
Host header, two of them) gets a 400 with the security headers, an X-Request-ID and a JSON
detail like every other answer (before: uvicorn's plain text, none of them). Over a raw socket
against ``attnscope serve``, since no HTTP client sends these."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from attnscope.serving.middleware import SECURITY_HEADERS
from attnscope.testing import running_server


@pytest.fixture(scope="module")
def address(tiny_models_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int]]:
    log = tmp_path_factory.mktemp("bad-http") / "serve.log"
    with running_server(tiny_models_dir, log) as url:
        host, port = url.removeprefix("http://").split(":")
        yield host, int(port)


def _exchange(address: tuple[str, int], request: bytes) -> tuple[int, dict[str, str], bytes]:
    with socket.create_connection(address, timeout=10) as sock:
        sock.sendall(request)
        answer = b""
        while chunk := sock.recv(65536):  # the server closes the connection after a 400
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {name.lower(): value.strip() for name, _, value in (line.partition(":") for line in lines)}
    return int(status_line.split()[1]), headers, body


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"POST /api/translate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: abc\r\n\r\n{}",
        b"POST /api/translate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}",
        b"GET /api/health HTTP/1.1\r\n\r\n",
        b"GET /api/health HTTP/1.1\r\nHost: 127.0.0.1\r\nHost: 127.0.0.1\r\n\r\n",
    ],
    ids=["content-length-not-a-number", "two-content-lengths", "no-host", "two-hosts"],
)
def test_h11s_400_has_the_headers_the_request_id_and_a_json_detail(
    address: tuple[str, int], request_bytes: bytes
) -> None:
    status, headers, body = _exchange(address, request_bytes)
    assert status == 400
    for name, value in SECURITY_HEADERS:
        assert headers[name.decode()] == value.decode()
    assert len(headers["x-request-id"]) >= 8
    assert headers["content-type"] == "application/json" and headers["connection"] == "close"
    assert "Host header" in json.loads(body)["detail"]


def test_a_good_request_on_the_same_server_is_answered(address: tuple[str, int]) -> None:
    status, headers, _ = _exchange(address, b"GET /api/health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
    assert status == 200 and headers["x-content-type-options"] == "nosniff"
