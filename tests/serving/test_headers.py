"""Every answer carries the security headers and an ``X-Request-ID``: the Host check's 400, the
body limit's 413 (by Content-Length and streamed) and an unexpected 500 included (issue 35)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from attnscope.serving.middleware import SECURITY_HEADERS

MODEL = "en-de-transformer"


def assert_headers(response: httpx.Response) -> None:
    for name, value in SECURITY_HEADERS:
        assert response.headers.get(name.decode()) == value.decode(), (response.status_code, name)
    assert len(response.headers.get("x-request-id", "")) >= 8, response.status_code


def _chunks(size: int) -> Iterator[bytes]:
    for _ in range(size // 65536 + 1):
        yield b" " * 65536


@pytest.mark.parametrize(
    "request_kwargs,status",
    [
        ({"method": "GET", "url": "/api/health"}, 200),
        ({"method": "GET", "url": "/api/health", "headers": {"host": "evil.example"}}, 400),
        ({"method": "GET", "url": "/api/health", "headers": {"host": "localhost:8300@evil.example"}}, 400),
        ({"method": "POST", "url": "/api/translate", "content": b" " * 1_000_001}, 413),
        ({"method": "POST", "url": "/api/translate", "content": _chunks(1_100_000)}, 413),
        ({"method": "POST", "url": "/api/translate", "json": {"model": MODEL}}, 422),
        ({"method": "GET", "url": "/nothing-here"}, 404),
        ({"method": "DELETE", "url": "/api/translate"}, 405),
    ],
    ids=["200", "host-400", "host-userinfo-400", "413-length", "413-streamed", "422", "404", "405"],
)
def test_every_answer_over_http_has_the_headers(http: httpx.Client, request_kwargs: dict[str, Any], status: int) -> None:
    kwargs = dict(request_kwargs)
    if kwargs.get("url") == "/api/translate" and "json" not in kwargs:
        kwargs["headers"] = {"content-type": "application/json"}
    response = http.request(**kwargs)
    assert response.status_code == status
    assert_headers(response)


def test_the_500_has_the_headers_and_the_request_id(
    client: TestClient, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    served = client.app.state.service.get(MODEL)  # type: ignore[attr-defined]

    def explode(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("simulated failure")

    monkeypatch.setattr(served.translator, "translate", explode)
    with caplog.at_level(logging.ERROR, logger="attnscope.serving.errors"):
        response = client.post("/api/translate", json={"model": MODEL, "text": "A man."}, headers={"x-request-id": "abc12345"})
    assert response.status_code == 500
    assert response.json() == {"detail": "internal server error (RuntimeError); see the server log"}
    assert_headers(response)
    assert response.headers["x-request-id"] == "abc12345"
    assert "simulated failure" in caplog.text
