"""A bounded reliability probe of ``attnscope serve`` on loopback (issue 35): a hostile set, the
worst valid mix at N concurrent clients with /api/health polled throughout, and slow clients.
Reports one table row per server: requests, 5xx, 504, 503, other 4xx, peak RSS, health p99.

    .venv/bin/python bench/probe.py [--checkout /work/main] [--clients 32] [--models en-de-transformer]

``--checkout`` runs another tree's code (e.g. main, for a before/after table). The server
binds 127.0.0.1 and the probe talks to nothing else. Bounded: N × rounds requests of the mix, each at
most the server's deadline; a few slow connections held for ``--slow-s`` seconds."""

from __future__ import annotations

import argparse
import base64
import io
import multiprocessing
import random
import socket
import statistics
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
from PIL import Image

from app.testing import server_process

MODEL = "en-de-transformer"
HERE = Path(__file__).resolve().parent.parent  # this checkout (``app`` may be installed from another)


def digits(n: int) -> str:
    return " ".join(str(i % 10) for i in range(n))


def worst_request(tokens: int) -> dict[str, Any]:
    """A long digit string (the output copies it, so it runs long), beam 4, max_length 300,
    every attention kind at 6 decimals: within the old server's per-request budget."""
    return {"model": MODEL, "text": digits(tokens), "beam_size": 4, "max_length": 300}


def hostile_requests() -> list[tuple[str, str, dict[str, Any]]]:
    """(method, path, httpx kwargs): inputs the issue found answered 500 (or wrongly)."""
    ok = {"model": MODEL, "text": "A man.", "max_length": 8}
    png = io.BytesIO()
    Image.new("L", (16, 16), 128).save(png, format="PNG")
    raw = bytearray(png.getvalue())
    rng = random.Random(35)
    out: list[tuple[str, str, dict[str, Any]]] = [
        ("POST", "/api/translate", {"json": {**ok, "prefix": None}}),
        ("POST", "/api/translate", {"json": {**ok, "text": "\u200b\u200c"}}),
        ("POST", "/api/translate", {"content": b"[" * 100_000, "headers": {"content-type": "application/json"}}),
        ("GET", "/api/health", {"headers": {"host": "localhost:8300@evil.example"}}),
        ("GET", "/api/vision/samples", {"params": {"dataset": "nope"}}),
    ]
    out += [(f"FOO{i}", "/api/health", {}) for i in range(20)]
    for _ in range(40):  # mutated PNGs (a byte or a few, anywhere past the signature)
        mutated = bytearray(raw)
        for _ in range(rng.randrange(1, 4)):
            mutated[rng.randrange(8, len(mutated))] = rng.randrange(256)
        image = base64.b64encode(bytes(mutated)).decode()
        out.append(("POST", "/api/vision/glimpses", {"json": {"model": "vision-ram-translated", "image": image}}))
    return out


def peak_rss_mb(pid: int) -> float:
    """The process's peak resident memory (VmHWM), in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024.0
    return float("nan")


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024.0
    return float("nan")


class HealthPoller:
    """Polls /api/health every ``every_s`` from a process of its own (the probe's 32 client
    threads would otherwise hold this interpreter's GIL and add their waits to the latencies
    measured); latencies in ms."""

    def __init__(self, url: str, every_s: float = 0.05) -> None:
        context = multiprocessing.get_context("spawn")
        self._stop = context.Event()
        self._ours, theirs = context.Pipe()
        self._process = context.Process(target=_poll, args=(url, every_s, self._stop, theirs), daemon=True)
        self.latencies: list[float] = []

    def __enter__(self) -> HealthPoller:
        self._process.start()
        self._ours.recv()  # polling has begun (a spawned process takes a while to import)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self.latencies = self._ours.recv()
        self._process.join()

    def p99(self) -> float:
        if len(self.latencies) < 2:
            return float("nan")
        return statistics.quantiles(self.latencies, n=100, method="inclusive")[98]


def _poll(url: str, every_s: float, stop: Any, out: Any) -> None:
    latencies: list[float] = []
    with httpx.Client(base_url=url, timeout=30) as client:
        client.get("/api/health")
        out.send("polling")
        while not stop.is_set():
            started = time.perf_counter()
            client.get("/api/health")
            latencies.append((time.perf_counter() - started) * 1000.0)
            stop.wait(every_s)
    out.send(latencies)


def slow_clients(url: str, count: int, hold_s: float) -> int:
    """Open ``count`` connections that send half a request, wait ``hold_s``; how many are still open."""
    host, port = url.removeprefix("http://").split(":")
    socks = []
    for _ in range(count):
        sock = socket.create_connection((host, int(port)))
        sock.sendall(b"GET /api/health HTTP/1.1\r\nHost: localhost\r\nX-Slow: ")
        socks.append(sock)
    time.sleep(hold_s)
    still_open = 0
    for sock in socks:
        sock.setblocking(False)
        try:
            sock.recv(1, socket.MSG_PEEK)  # data (a 408) or b"" (closed): the server dealt with it
        except BlockingIOError:
            still_open += 1  # nothing sent, not closed
        except OSError:
            pass
        sock.close()
    return still_open


def probe(
    checkout: Path, models: list[str], clients: int, tokens: int, slow: int, slow_s: float, *, rounds: int = 1
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "models"
        root.mkdir()
        for name in models:
            (root / name).symlink_to(checkout / "models" / name)
        with server_process(root, Path(tmp) / "server.log", checkout=checkout, start_timeout_s=600) as (url, process):
            statuses: Counter[int] = Counter()
            dropped: Counter[str] = Counter()
            for method, path, kwargs in hostile_requests():
                try:
                    statuses[httpx.request(method, url + path, timeout=120, **kwargs).status_code] += 1
                except httpx.HTTPError as err:
                    dropped[f"{method} {path}: {type(err).__name__}"] += 1
            hostile_5xx = sum(n for s, n in statuses.items() if s >= 500)
            mix: Counter[int] = Counter()
            started = time.perf_counter()
            with HealthPoller(url) as health, ThreadPoolExecutor(clients) as pool:

                def one(_: int) -> int:
                    with httpx.Client(base_url=url, timeout=180) as c:
                        return c.post("/api/translate", json=worst_request(tokens)).status_code

                for status in pool.map(one, range(clients * rounds)):
                    mix[status] += 1
            wall = time.perf_counter() - started
            rss_after = rss_mb(process.pid)
            open_slow = slow_clients(url, slow, slow_s) if slow else 0
            return {
                "checkout": str(checkout),
                "hostile": sum(statuses.values()),
                "hostile_5xx": hostile_5xx,
                "hostile_dropped": dict(dropped),
                "health_polls": len(health.latencies),
                "mix": dict(sorted(mix.items())),
                "mix_wall_s": round(wall, 1),
                "peak_rss_mb": round(peak_rss_mb(process.pid)),
                "rss_after_mb": round(rss_after),
                "health_p99_ms": round(health.p99(), 1),
                "health_max_ms": round(max(health.latencies or [float("nan")]), 1),
                "slow_still_open": f"{open_slow}/{slow}",
            }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkout", type=Path, action="append", help="tree(s) to run; default: this one")
    parser.add_argument("--models", nargs="+", default=[MODEL, "vision-ram-translated"])
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--tokens", type=int, default=60, help="digits in the worst request's text (2 tokens each)")
    parser.add_argument("--rounds", type=int, default=1, help="requests each client sends, one after another")
    parser.add_argument("--slow", type=int, default=20, help="slow (slowloris) connections")
    parser.add_argument("--slow-s", type=float, default=15.0, help="how long they are held")
    args = parser.parse_args()
    for checkout in args.checkout or [HERE]:
        row = probe(checkout, args.models, args.clients, args.tokens, args.slow, args.slow_s, rounds=args.rounds)
        print(" | ".join(f"{k}={v}" for k, v in row.items()), flush=True)


if __name__ == "__main__":
    main()
