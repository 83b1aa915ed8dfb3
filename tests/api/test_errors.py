"""Errors are the REST errors: an invalid option raises InvalidRequest (a ValueError) whose text
is the 422's ``detail``, in process and through the client; the client retries a 503 after its
Retry-After a bounded number of times."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

import attnscope
from attnscope.api.local import LocalModel

BAD: list[dict[str, Any]] = [
    {"beam_size": 99},  # schema: le=16
    {"beam": 3},  # an unknown option
    {"explain": ["lime"]},  # not a method
    {"disable_heads": [{"kind": "cross", "layer": 7, "head": 0}]},  # the service's check: no layer 7
    {"protect": True, "prefix": "Ein"},  # the service's combination check
]


@pytest.mark.parametrize("options", BAD, ids=lambda o: next(iter(o)))
def test_invalid_options_raise_the_rest_422(
    local_models: dict[str, LocalModel], http: httpx.Client, api_server: str, options: dict[str, Any]
) -> None:
    rest = http.post("/api/translate", json={"model": "en-de-transformer", "text": "A dog runs.", **options})
    assert rest.status_code == 422
    detail = rest.json()["detail"]
    with pytest.raises(attnscope.InvalidRequest) as local:
        local_models["en-de-transformer"].translate("A dog runs.", **options)
    assert isinstance(local.value, ValueError)
    assert str(local.value) == detail and local.value.errors == rest.json()["errors"]
    with pytest.raises(attnscope.InvalidRequest) as remote:
        attnscope.Client(api_server).load("en-de-transformer").translate("A dog runs.", **options)
    assert str(remote.value) == detail and remote.value.status == 422


def test_too_long_text_is_the_same_error(local_models: dict[str, LocalModel], http: httpx.Client) -> None:
    text = "a " * 600
    rest = http.post("/api/translate", json={"model": "en-de-rnn-additive", "text": text})
    assert rest.status_code == 422
    with pytest.raises(attnscope.InvalidRequest, match="^text: ") as err:
        local_models["en-de-rnn-additive"].translate(text)
    assert str(err.value) == rest.json()["detail"]


def test_unknown_model(tiny_models_dir: Any, api_server: str) -> None:
    with pytest.raises(attnscope.ModelNotFound) as local:
        attnscope.load("en-de-nothing", models_dir=tiny_models_dir)
    assert "en-de-transformer" in local.value.available and "en-de-nothing" in str(local.value)
    with pytest.raises(attnscope.ModelNotFound) as remote:
        attnscope.Client(api_server).load("en-de-nothing")
    assert remote.value.available == local.value.available


class Flaky(BaseHTTPRequestHandler):
    """Answers 503 (Retry-After: 0) ``busy`` times, then 200 with a JSON body."""

    busy = 2
    calls: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        Flaky.calls.append(self.path)
        if len(Flaky.calls) <= Flaky.busy:
            self._send(503, {"detail": "the queue is full; try again"}, {"Retry-After": "0"})
        else:
            self._send(200, {"status": "ok", "device": "cpu", "models": 0})

    def _send(self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        raw = json.dumps(body).encode()
        self.send_response(status)
        for name, value in {"Content-Type": "application/json", "Content-Length": str(len(raw)), **(headers or {})}.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def flaky() -> Iterator[str]:
    Flaky.calls = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), Flaky)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join()


def test_503_is_retried_after_retry_after(flaky: str) -> None:
    Flaky.busy = 2
    assert attnscope.Client(flaky, retries=3).health()["status"] == "ok"
    assert len(Flaky.calls) == 3


def test_503_retries_are_bounded(flaky: str) -> None:
    Flaky.busy = 10
    with pytest.raises(attnscope.ServerBusy, match="the queue is full") as err:
        attnscope.Client(flaky, retries=2).health()
    assert len(Flaky.calls) == 3 and err.value.retry_after_s == 0


def test_a_path_that_is_no_model_folder(tmp_path: Any, local_models: dict[str, LocalModel]) -> None:
    with pytest.raises(attnscope.ModelNotFound, match="is not a model folder"):
        attnscope.load(tmp_path)
    with pytest.raises(attnscope.ModelNotFound, match="missing/en-de-transformer: no such model folder"):
        attnscope.load(tmp_path / "missing" / "en-de-transformer")
    with pytest.raises(TypeError, match="'model' is an argument"):
        local_models["en-de-transformer"].translate("A dog runs.", model="en-de-rnn-none")
