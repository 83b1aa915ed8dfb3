"""Shutdown past its grace period (issue 35: 15 of 16 requests still in flight got a 500): each
request still running when ``ATTNSCOPE_SHUTDOWN_TIMEOUT_S`` ends is answered 503 with
Retry-After, over real HTTP."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from attnscope.testing import server_process

from .test_load import LONG_BODY, metric, send_raw, slow_models_dir, wait_for

__all__ = ["slow_models_dir"]  # the fixture, shared with test_load


def _answer(sock: socket.socket) -> bytes:
    sock.settimeout(120)
    received = b""
    try:
        while chunk := sock.recv(65536):
            received += chunk
    except ConnectionResetError:
        pass
    return received


@pytest.mark.parametrize("clients", [3])
def test_requests_running_past_the_grace_period_get_503(slow_models_dir: Path, tmp_path: Path, clients: int) -> None:
    env = {"ATTNSCOPE_INFERENCE_THREADS": "1", "ATTNSCOPE_SHUTDOWN_TIMEOUT_S": "1", "ATTNSCOPE_BATCH_WINDOW_MS": "0"}
    with server_process(slow_models_dir, tmp_path / "server.log", env=env) as (url, process):
        first = send_raw(url, "/api/translate/batch", LONG_BODY)
        wait_for(lambda: metric(url, "attnscope_decodes_running") == 1, "the long decode to start")
        others = [send_raw(url, "/api/translate/batch", {**LONG_BODY, "beam_size": 15 - i}) for i in range(clients - 1)]
        wait_for(lambda: metric(url, "attnscope_queue_depth") == clients - 1, "the others to queue")
        process.terminate()
        answers = [_answer(sock) for sock in (first, *others)]
        process.wait(timeout=120)
    for answer in answers:
        head = answer.split(b"\r\n\r\n", 1)[0].lower()
        assert head.startswith(b"http/1.1 503"), answer[:200]
        assert b"retry-after: " in head and b"x-request-id: " in head
        assert b"shutting down" in answer
    assert "Exception in ASGI application" not in (tmp_path / "server.log").read_text()
