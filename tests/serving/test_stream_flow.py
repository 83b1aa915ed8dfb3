"""Issue 45.1: a stream is priced by its step events (beam × steps × rows) and backpressured (a
bounded buffer: the decode waits for the writer; a client that reads nothing is dropped at its
send timeout). Asserted on bytes, events and counters, never on timings."""

from __future__ import annotations

import asyncio
import json
import re
import socket
import threading
import time
from pathlib import Path

import httpx
import pytest

from attnscope.config import Settings
from attnscope.engine.limits import Asked, answer_bytes
from attnscope.engine.registry import ServedModel
from attnscope.engine.stream_flow import StepBuffer, stream_bytes
from attnscope.testing import in_own_thread, running_server

from .conftest import make_client

MODEL = "en-de-transformer"
LONG = " ".join(str(i % 10) for i in range(60))


def _until(condition: object, what: str, bound_s: float = 60.0) -> None:
    """Wait for a state (not a time): fails only if it never comes within a generous bound."""
    deadline = time.monotonic() + bound_s
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def test_the_buffer_holds_at_most_its_bytes_and_the_producer_waits() -> None:

    def body() -> None:
        loop = asyncio.new_event_loop()
        gone = threading.Event()
        buffer = StepBuffer(loop, max_bytes=3000, send_timeout_s=600, gone=gone)
        put = []

        def produce() -> None:
            for i in range(10):
                buffer.put(bytes([i]) * 1000)
                put.append(i)

        producer = threading.Thread(target=produce, daemon=True)
        producer.start()
        _until(lambda: buffer.waits == 1, "the producer never waited")
        assert put == [0, 1, 2] and buffer.queued_bytes == 3000  # full: the decode waits
        assert loop.run_until_complete(buffer.get()) == b"\0" * 1000  # the writer sends one ...
        _until(lambda: len(put) == 4 and buffer.waits == 2, "one more event once there was room")
        assert buffer.queued_bytes == 3000 and buffer.peak_bytes == 3000
        got = [loop.run_until_complete(buffer.get()) for _ in range(9)]
        producer.join(60)
        assert [g[0] for g in got] == list(range(1, 10)) and buffer.peak_bytes == 3000 and not gone.is_set()
        loop.close()

    in_own_thread(body)  # a loop of its own: the browser tests' Playwright keeps one running here


def test_a_reader_that_never_reads_is_dropped_and_the_decode_told() -> None:
    loop = asyncio.new_event_loop()
    gone = threading.Event()
    buffer = StepBuffer(loop, max_bytes=2000, send_timeout_s=0.05, gone=gone)
    for _ in range(50):  # a decode of 50 steps, nobody reading
        buffer.put(b"x" * 1000)
    assert gone.is_set()  # the decode stops at its next step
    assert buffer.queued_bytes == 2000 and buffer.peak_bytes == 2000  # never more than its bound
    loop.close()


def test_a_closed_writer_drops_events_at_once() -> None:
    loop = asyncio.new_event_loop()
    gone = threading.Event()
    buffer = StepBuffer(loop, max_bytes=1000, send_timeout_s=600, gone=gone)
    buffer.put(b"a" * 1000)
    waiting = threading.Thread(target=buffer.put, args=(b"b" * 1000,), daemon=True)
    waiting.start()
    _until(lambda: buffer.waits == 1, "never waited")
    buffer.close()  # the response was closed (the client left)
    waiting.join(60)
    assert not waiting.is_alive() and gone.is_set() and buffer.queued_bytes == 1000
    loop.close()


def test_a_stream_is_priced_by_its_steps_not_only_its_answer(tiny_models_dir: Path) -> None:
    body = {"model": MODEL, "text": LONG, "beam_size": 8, "max_length": 120}
    with make_client(tiny_models_dir) as c:
        served: ServedModel = c.app.state.service.get(MODEL)
        source = len(served.translator.source_ids(LONG))
        asked = Asked(None, 6, None, 8)
        stream, answer = stream_bytes(served, source, 120, asked), answer_bytes(served.loaded.config, [source], [120], asked)
        assert stream > 4 * answer  # 8 beam rows a step against one hypothesis
    limit = (stream + answer) // 2
    with make_client(tiny_models_dir, max_answer_bytes=limit) as c:
        assert c.post("/api/translate", json=body).status_code == 200  # the answer alone fits
        r = c.post("/api/translate/stream", json=body)
        assert r.status_code == 422 and "this stream would send up to" in r.json()["detail"]
        assert "ATTNSCOPE_MAX_ANSWER_BYTES" in r.json()["detail"] and "beam_size ≤" in r.json()["detail"]
        ok = c.post("/api/translate/stream", json={**body, "beam_size": 1})
        assert ok.status_code == 200 and "event: answer" in ok.text


def _metric(url: str, name: str) -> float:
    text = httpx.get(url + "/metrics", timeout=30).text
    found = re.search(rf"^{name} (\S+)$", text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


@pytest.mark.parametrize("clients", [3])
def test_clients_that_never_read_keep_the_queue_bounded(tiny_models_dir: Path, tmp_path: Path, clients: int) -> None:
    """Streams of a long beam search whose clients never read (4 KB receive buffers): each
    stream's unsent events stay within ATTNSCOPE_STREAM_BUFFER_BYTES (plus one event), the
    decodes wait, and at the send timeout the clients are dropped and the decodes stopped."""
    limit = 20_000
    env = {"ATTNSCOPE_STREAM_BUFFER_BYTES": str(limit), "ATTNSCOPE_CLIENT_SEND_TIMEOUT_S": "2"}
    # ~35 MB of step events: more than the kernel's socket buffers hold, so the writer blocks
    body = json.dumps({"model": MODEL, "text": LONG, "beam_size": 8, "max_length": 400}).encode()
    head = (f"POST /api/translate/stream HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode()  # fmt: skip
    with running_server(tiny_models_dir, tmp_path / "server.log", env=env) as url:
        socks = []
        for _ in range(clients):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.connect(("127.0.0.1", int(url.rsplit(":", 1)[1])))
            sock.sendall(head + body)
            socks.append(sock)
        try:
            # dropped at the send timeout: by the connection's own send watchdog, or (a writer
            # that still takes bytes but too slowly) by the buffer; either way the decode stops
            _until(lambda: _metric(url, 'attnscope_decodes_cancelled_total{reason="client_gone"}') >= clients,
                   "decodes not stopped", bound_s=180)  # fmt: skip
            assert _metric(url, "attnscope_stream_waits_total") >= clients  # each decode waited for its writer
            # never more than the bound plus one event; the largest is step 0's, which carries the
            # whole encoder_self (2 × 2 × 121² weights, ~0.53 MB), of a stream of ~35 MB
            assert 0 < _metric(url, "attnscope_stream_queued_peak_bytes") <= 600_000
        finally:
            for sock in socks:
                sock.close()
        assert httpx.post(url + "/api/translate", json={"model": MODEL, "text": "A man."}, timeout=60).status_code == 200


def test_the_setting_is_validated() -> None:
    with pytest.raises(ValueError, match="stream_buffer_bytes"):
        Settings(stream_buffer_bytes=10)
