"""The server under load, over real HTTP: with every decode slot busy, health, readiness, the
model list, pages, static files and metrics still answer; a full queue answers 503 with
Retry-After; a client that disconnects stops its decode (visible in /metrics); shutdown stops a
running decode instead of waiting for it; ``--workers 2`` serves from two processes.

The long decode is real: a random Transformer whose end-of-sentence token can never win (its
tied embedding row is zero), beam 16 over 16 texts up to 512 tokens, without attention."""

from __future__ import annotations

import json
import re
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch

from attnscope.nn.config import EOS_ID, config_from_dict
from attnscope.nn.factory import build_model
from attnscope.repository import save_model_folder
from attnscope.testing import server_process, tiny_tokenizer

SLOW = "en-de-slow"
LONG_BODY = {
    "model": SLOW,
    "texts": [f"a play in {'a play ' * (i % 5)}the snow" for i in range(16)],
    "beam_size": 16,
    "max_length": 512,
    "attention": [],
}


@pytest.fixture(scope="module")
def slow_models_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("slow-models")
    tokenizer = tiny_tokenizer()
    config = config_from_dict(
        {"architecture": "transformer", "vocab_size": tokenizer.vocab_size, "d_model": 256, "heads": 4,
         "ff_dim": 1024, "encoder_layers": 2, "decoder_layers": 2, "dropout": 0.0}
    )  # fmt: skip
    torch.manual_seed(0)
    model = build_model(config).eval()
    with torch.no_grad():
        model.get_submodule("embed").weight[EOS_ID] = 0.0  # type: ignore[index]
    save_model_folder(root / SLOW, model, tokenizer, source_lang="en", target_lang="de", dtype=torch.float32)
    return root


def metric(url: str, name: str, labels: str = "") -> float:
    text = httpx.get(f"{url}/metrics", timeout=30).text
    match = re.search(rf"^{re.escape(name + labels)} ([0-9.e+-]+)$", text, flags=re.M)
    return float(match.group(1)) if match else 0.0


def wait_for(check: Any, what: str, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.1)


def send_raw(url: str, path: str, body: dict[str, Any]) -> socket.socket:
    """POST ``body`` on a socket of our own, so the test decides when the client goes away."""
    host, port = url.removeprefix("http://").split(":")
    payload = json.dumps(body).encode()
    sock = socket.create_connection((host, int(port)))
    head = (
        f"POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(payload)}\r\n\r\n"
    )
    sock.sendall(head.encode() + payload)
    return sock


@pytest.fixture(scope="module")
def busy_server(slow_models_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Any, Path]]:
    log = tmp_path_factory.mktemp("busy") / "server.log"
    env = {"ATTNSCOPE_INFERENCE_THREADS": "1", "ATTNSCOPE_MAX_QUEUE": "0", "ATTNSCOPE_SHUTDOWN_TIMEOUT_S": "1"}
    with server_process(slow_models_dir, log, env=env) as (url, process):
        yield url, process, log


def test_busy_slots_starve_nothing_and_a_gone_client_stops_its_decode(busy_server: tuple[str, Any, Path]) -> None:
    url, _, _ = busy_server
    cancelled_before = metric(url, "attnscope_decodes_cancelled_total", '{reason="client_gone"}')
    sock = send_raw(url, "/api/translate/batch", LONG_BODY)
    wait_for(lambda: metric(url, "attnscope_decodes_running") == 1, "the long decode to start")

    with httpx.Client(base_url=url, timeout=30) as http:
        for path in ("/api/health", "/api/ready", "/api/models", "/", "/models", "/static/js/api.js",
                     "/vendor/plotly.min.js", "/docs", "/metrics"):  # fmt: skip
            assert http.get(path).status_code == 200, path
        busy = http.post("/api/translate", json={"model": SLOW, "text": "a play", "beam_size": 1, "max_length": 3})
        assert busy.status_code == 503
        assert int(busy.headers["Retry-After"]) >= 1 and "ATTNSCOPE_MAX_QUEUE=0" in busy.json()["detail"]
    assert metric(url, "attnscope_decodes_running") == 1, "the long decode ended before the checks: not busy"
    assert metric(url, "attnscope_rejections_total", '{reason="queue_full"}') >= 1

    sock.close()  # the client gives up
    wait_for(lambda: metric(url, "attnscope_decodes_running") == 0, "the abandoned decode to stop")
    assert metric(url, "attnscope_decodes_cancelled_total", '{reason="client_gone"}') == cancelled_before + 1
    r = httpx.post(f"{url}/api/translate", json={"model": SLOW, "text": "a play", "beam_size": 1, "max_length": 3})
    assert r.status_code == 200, "the slot is free again"


def test_shutdown_stops_a_running_decode(busy_server: tuple[str, Any, Path]) -> None:
    url, process, log = busy_server
    sock = send_raw(url, "/api/translate/batch", LONG_BODY)
    wait_for(lambda: metric(url, "attnscope_decodes_running") == 1, "the long decode to start")
    process.terminate()  # SIGTERM, as a process manager sends it
    process.wait(timeout=120)
    sock.close()
    assert process.returncode in (0, -15)  # uvicorn re-raises the SIGTERM it handled
    text = log.read_text()
    assert "decode of 1 request(s) stopped" in text and "Finished server process" in text


def test_two_workers_serve_from_two_processes(tiny_models_dir: Path, tmp_path: Path) -> None:
    with server_process(tiny_models_dir, tmp_path / "server.log", args=("--workers", "2")) as (url, process):
        children = Path(f"/proc/{process.pid}/task/{process.pid}/children").read_text().split()
        workers = [c for c in children if b"spawn_main" in Path(f"/proc/{c}/cmdline").read_bytes()]
        assert len(workers) == 2
        for _ in range(4):
            # /api/ready answered from one worker; the other may still be loading (a 503 with
            # Retry-After, which a client honours): every request is answered 200 in the end
            for _attempt in range(30):
                r = httpx.post(f"{url}/api/translate", json={"model": "en-de-rnn-additive", "text": "A man.", "max_length": 5})
                if r.status_code != 503:
                    break
                time.sleep(min(float(r.headers.get("retry-after", "1")), 2.0))
            assert r.status_code == 200, r.text
