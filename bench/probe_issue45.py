"""Issue 45's scenarios for ``bench/probe.py``: four kinds of stream client, the bounded-models
spread and the worst valid mix. Each returns one row of counts (statuses), bytes, the server's
RSS and its metrics; ``bench/probe.py --issue45`` runs them against a fresh server per checkout.

- streams: N clients of each kind on the issue's stream (95 digits, beam 8, ``max_length`` 250):
  ``reader`` (reads everything), ``never`` (4 KB receive buffer, never reads), ``hangup`` (reads
  the first event, closes), ``slow`` (reads 4 KB every 50 ms); RSS before and after, the stream
  metrics (waits, queued peak, cancelled client_gone).
- spread: ``requests`` requests (translate 70 %, stream 15 %, attribution 15 %) over every text
  model of the models dir at ``--max-loaded-models bound``, each retried on 503 after its
  Retry-After (at most 5 tries): final statuses per route, loads (the log's "loading " lines), RSS.
- worst: the issue's 32 clients × 2 rounds (attribution at 128 steps, an RNN at beam 16 and
  ``max_length`` 512, en-fr at beam 16, a 2048² image captioned at beam 10), health polled.
"""

from __future__ import annotations

import base64
import io
import json
import random
import re
import socket
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
from PIL import Image

STREAM_BODY = {"model": "en-de-transformer", "text": " ".join(str(i % 10) for i in range(95)), "beam_size": 8,
               "max_length": 250}  # fmt: skip
ADMITTED_BODY = {**STREAM_BODY, "beam_size": 4, "max_length": 150}  # ~45 MB of events: within the budget


def metrics(url: str) -> dict[str, float]:
    text = httpx.get(url + "/metrics", timeout=30).text
    out = {}
    for name in ("attnscope_stream_waits_total", "attnscope_stream_queued_peak_bytes", "attnscope_streams_dropped_total"):
        found = re.search(rf"^{name} (\S+)$", text, re.M)
        out[name.removeprefix("attnscope_")] = float(found.group(1)) if found else float("nan")
    found = re.search(r'^attnscope_decodes_cancelled_total\{reason="client_gone"\} (\S+)$', text, re.M)
    out["cancelled_client_gone"] = float(found.group(1)) if found else 0.0
    return out


def _raw(url: str, body: dict[str, Any], rcvbuf: int | None = None) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    data = json.dumps(body).encode()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.connect((host, int(port)))
    sock.sendall(f"POST /api/translate/stream HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                 f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n".encode() + data)  # fmt: skip
    return sock


def _client(url: str, kind: str, hold_s: float, body: dict[str, Any]) -> tuple[str, int]:
    """(first status line, bytes read) of one stream client of ``kind``."""
    sock = _raw(url, body, 4096 if kind == "never" else None)
    got, status = 0, ""
    try:
        if kind == "never":
            time.sleep(hold_s)
            return "never-read", 0
        sock.settimeout(120)
        while chunk := sock.recv(4096):
            status = status or chunk.split(b"\r\n", 1)[0].decode(errors="replace")
            got += len(chunk)
            if kind == "hangup" and b"event: step" in chunk:
                break
            if kind == "slow":
                time.sleep(0.05)
        return status, got
    except OSError as err:
        return status or type(err).__name__, got
    finally:
        sock.close()


def streams(url: str, rss: Any, per_kind: int = 2, hold_s: float = 45.0) -> dict[str, Any]:
    """The four kinds of client on the issue's stream (beam 8, max_length 250) and on one that
    admission takes (beam 4, max_length 150)."""
    out: dict[str, Any] = {}
    for label, body in (("issue", STREAM_BODY), ("admitted", ADMITTED_BODY)):
        before = rss()
        with ThreadPoolExecutor(4 * per_kind) as pool:
            jobs = {kind: [pool.submit(_client, url, kind, hold_s, body) for _ in range(per_kind)]
                    for kind in ("reader", "never", "hangup", "slow")}  # fmt: skip
            done = {kind: [j.result() for j in js] for kind, js in jobs.items()}
        out[f"{label}_statuses"] = {k: dict(Counter(s.split(" ", 2)[1] if " " in s else s for s, _ in v))
                                    for k, v in done.items()}  # fmt: skip
        out[f"{label}_mb_read"] = {k: round(sum(b for _, b in v) / 1e6, 1) for k, v in done.items()}
        out[f"{label}_rss_before_after_mb"] = (round(before), round(rss()))
        out[f"{label}_metrics"] = metrics(url)
    return out


def spread(url: str, models: list[str], log_text: Any, requests: int = 400, clients: int = 8) -> dict[str, Any]:
    rng = random.Random(45)
    plan = [(rng.choice(models), rng.random()) for _ in range(requests)]
    loads_before = log_text().count("loading ")

    def one(item: tuple[str, float]) -> tuple[str, int]:
        model, pick = item
        route = "/api/translate" if pick < 0.7 else "/api/translate/stream" if pick < 0.85 else "/api/attribution"
        body: dict[str, Any] = {"model": model, "text": "A man is riding a bicycle.", "max_length": 20}
        if route == "/api/attribution":
            body = {"model": model, "text": "A man is riding a bicycle.", "steps": 8}
        status = 0
        for _ in range(5):
            r = httpx.post(url + route, json=body, timeout=120)
            status = r.status_code
            if status != 503:
                break
            time.sleep(float(r.headers.get("Retry-After", "2")))
        return route, status

    with ThreadPoolExecutor(clients) as pool:
        results = list(pool.map(one, plan))
    by_route: dict[str, Counter[int]] = {}
    for route, status in results:
        by_route.setdefault(route, Counter())[status] += 1
    return {"spread": {r: dict(sorted(c.items())) for r, c in by_route.items()},
            "spread_loads": log_text().count("loading ") - loads_before}  # fmt: skip


def _big_png(side: int = 2048) -> str:
    """A ``side``² PNG whose body fits the server's 1 MB limit (a valid request: 4 × 4 blocks
    of noise, ~580 KB in base64; plain noise at 2048² is 5.6 MB, which is a 413 before any
    admission and so not part of the worst *valid* mix)."""
    buffer = io.BytesIO()
    noise = Image.effect_noise((side // 4, side // 4), 64).convert("L")
    noise.resize((side, side), Image.Resampling.NEAREST).save(buffer, format="PNG", optimize=True)
    return base64.b64encode(buffer.getvalue()).decode()


def worst_requests(rnn: str = "en-de-rnn-additive") -> list[tuple[str, dict[str, Any]]]:
    digits = " ".join(str(i % 10) for i in range(95))
    image = _big_png()
    return [
        ("/api/attribution", {"model": "en-de-transformer", "text": "A man in a blue shirt is riding a bicycle.", "steps": 128}),
        ("/api/translate", {"model": rnn, "text": digits, "beam_size": 16, "max_length": 512}),
        ("/api/translate", {"model": "en-fr-transformer", "text": digits, "beam_size": 16}),
        ("/api/vision/caption", {"model": "vision-sat-scenes", "image": image, "beam_size": 10}),
    ]


def worst(url: str, clients: int = 32, rounds: int = 2) -> dict[str, Any]:
    kinds = worst_requests()

    def one(i: int) -> tuple[str, int]:
        path, body = kinds[i % len(kinds)]
        try:
            return path, httpx.post(url + path, json=body, timeout=180).status_code
        except httpx.HTTPError as err:
            return path, -1 if "timed out" not in str(err) else -2

    with ThreadPoolExecutor(clients) as pool:
        results = list(pool.map(one, range(clients * rounds)))
    statuses = Counter(s for _, s in results)
    return {"worst_requests": len(results), "worst_statuses": dict(sorted(statuses.items())),
            "worst_by_route": {p: dict(Counter(s for q, s in results if q == p)) for p, _ in kinds}}  # fmt: skip
