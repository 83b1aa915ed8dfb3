"""Issue 45.1: a stream is priced by its step events (beam × steps × rows) and backpressured (a
bounded buffer: the decode waits for the writer; a client that reads nothing is dropped at its
send timeout). Asserted on bytes, events and counters, never on timings. The buffer alone:
tests/engine/test_step_buffer.py."""

from __future__ import annotations

import json
import re
import socket
from pathlib import Path

import httpx
import pytest

from attnscope.config import Settings
from attnscope.engine.limits import Asked, answer_bytes
from attnscope.engine.registry import ServedModel
from attnscope.engine.stream_flow import stream_bytes
from attnscope.testing import running_server, until

from .conftest import make_client

MODEL = "en-de-transformer"
LONG = " ".join(str(i % 10) for i in range(60))


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
            until(lambda: _metric(url, 'attnscope_decodes_cancelled_total{reason="client_gone"}') >= clients,
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
