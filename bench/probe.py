"""A bounded reliability probe of ``attnscope serve`` on loopback (issue 35): a hostile set, the
worst valid mix at N concurrent clients with /api/health polled throughout, clients that never
read their answers, and slow clients.
Reports one table row per server: requests, 5xx, 504, 503, other 4xx, peak RSS, health p99.

    .venv/bin/python bench/probe.py [--checkout /work/main] [--clients 32] [--models en-de-transformer]

``--issue45 streams|spread|worst`` runs issue 45's scenarios instead (bench/probe_issue45.py).
``--checkout`` runs another tree's code (e.g. main, for a before/after table). The server
binds 127.0.0.1 and the probe talks to nothing else. Bounded: N × rounds requests of the mix, each at
most the server's deadline; a few slow connections held for ``--slow-s`` seconds."""

from __future__ import annotations

import argparse
import base64
import io
import json
import multiprocessing
import random
import re
import socket
import statistics
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from PIL import Image

from attnscope.testing import server_process

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


@dataclass(frozen=True)
class Plan:
    """What one probe runs: the worst mix (``clients`` × ``rounds`` requests of ``tokens``
    digits), ``slow`` slowloris connections held ``slow_s``, ``never_read`` clients that never
    read their big answers (held until the server closes them, at most ``never_read_s``), on
    a server of ``workers`` processes."""

    models: tuple[str, ...] = (MODEL, "vision-ram-translated")
    clients: int = 32
    rounds: int = 1
    tokens: int = 60
    slow: int = 20
    slow_s: float = 15.0
    never_read: int = 0
    never_read_s: float = 60.0
    workers: int = 1


def probe(checkout: Path, plan: Plan) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "models"
        root.mkdir()
        for name in plan.models:
            (root / name).symlink_to(checkout / "models" / name)
        args = ("--workers", str(plan.workers)) if plan.workers > 1 else ()
        with server_process(root, Path(tmp) / "server.log", checkout=checkout, start_timeout_s=600, args=args) as (
            url,
            process,
        ):
            row: dict[str, Any] = {"checkout": str(checkout), "workers": plan.workers}
            row.update(hostile(url))
            row.update(worst_mix(url, plan, process.pid))
            row["rss_after_mb"] = round(sum(rss_mb(pid) for pid in servers(process.pid)))
            if plan.never_read:
                row.update(never_reading(url, plan.never_read, plan.tokens, plan.never_read_s))
            peaks = [peak_rss_mb(pid) for pid in servers(process.pid)]
            row["peak_rss_mb"] = round(sum(peaks))
            row["peak_rss_per_worker_mb"] = round(max(peaks))
            if plan.slow:
                row["slow_still_open"] = f"{slow_clients(url, plan.slow, plan.slow_s)}/{plan.slow}"
            return row


def servers(pid: int) -> list[int]:
    """The processes that serve: ``pid`` itself, or with ``--workers`` its spawned workers."""
    children = [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    workers = [c for c in children if b"spawn_main" in Path(f"/proc/{c}/cmdline").read_bytes()]
    return workers or [pid]


def hostile(url: str) -> dict[str, Any]:
    statuses: Counter[int] = Counter()
    dropped: Counter[str] = Counter()
    for method, path, kwargs in hostile_requests():
        try:
            statuses[httpx.request(method, url + path, timeout=120, **kwargs).status_code] += 1
        except httpx.HTTPError as err:
            dropped[f"{method} {path}: {type(err).__name__}"] += 1
    return {
        "hostile": sum(statuses.values()),
        "hostile_5xx": sum(n for s, n in statuses.items() if s >= 500),
        "hostile_dropped": dict(dropped),
    }


def worst_mix(url: str, plan: Plan, pid_of_server: int) -> dict[str, Any]:
    """``clients`` concurrent clients each sending ``rounds`` worst requests, health polled throughout."""
    mix: Counter[int] = Counter()
    started = time.perf_counter()
    with HealthPoller(url) as health, ThreadPoolExecutor(plan.clients) as pool:

        def one(_: int) -> int:
            with httpx.Client(base_url=url, timeout=180) as c:
                return c.post("/api/translate", json=worst_request(plan.tokens)).status_code

        rss: list[float] = []  # the servers' RSS after each answer: a plateau, or growth
        for status in pool.map(one, range(plan.clients * plan.rounds)):
            mix[status] += 1
            rss.append(sum(rss_mb(pid) for pid in servers(pid_of_server)))
    quarters = [round(rss[min(len(rss) - 1, len(rss) * q // 4)]) for q in (1, 2, 3, 4)] if rss else []
    return {
        "mix": dict(sorted(mix.items())),
        "mix_wall_s": round(time.perf_counter() - started, 1),
        "health_polls": len(health.latencies),
        "health_p99_ms": round(health.p99(), 1),
        "health_max_ms": round(max(health.latencies or [float("nan")]), 1),
        "rss_by_quarter_mb": quarters,
    }


def never_reading(url: str, count: int, tokens: int, hold_s: float) -> dict[str, Any]:
    """``count`` clients that ask for a big uncompressed answer and never read it (4 KB receive
    buffers); how many the server has aborted within ``hold_s`` (its send timeout), as counted
    in its metrics (a client cannot see the close without reading)."""
    host, port = url.removeprefix("http://").split(":")
    body = json.dumps(worst_request(tokens)).encode()
    head = f"POST /api/translate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    before = aborted(url)
    socks = []
    for _ in range(count):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect((host, int(port)))
        sock.sendall(head.encode() + body)
        socks.append(sock)
    started = time.monotonic()
    while aborted(url) - before < count and time.monotonic() - started < hold_s:
        time.sleep(1.0)
    closed = aborted(url) - before
    for sock in socks:
        sock.close()
    return {"never_read_aborted": f"{closed:g}/{count}", "never_read_s": round(time.monotonic() - started)}


def aborted(url: str) -> float:
    """Connections the server aborted for not reading their answers (attnscope_slow_clients_total{phase="send"})."""
    text = httpx.get(url + "/metrics", timeout=30).text
    found = re.search(r'^attnscope_slow_clients_total\{phase="send"\} (\S+)$', text, re.M)
    return float(found.group(1)) if found else 0.0


SCENARIO_MODELS = {
    "streams": (MODEL,),
    "spread": None,  # every text model of the checkout
    "worst": (MODEL, "en-de-rnn-additive", "en-fr-transformer", "vision-sat-scenes"),
}


def probe45(checkout: Path, scenario: str) -> dict[str, Any]:
    """One of issue 45's scenarios (bench/probe_issue45.py) on a fresh server of ``checkout``:
    its row plus the server's peak RSS and, for the worst mix, health p99."""
    import probe_issue45 as scenarios

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "models"
        root.mkdir()
        names = SCENARIO_MODELS[scenario] or tuple(
            p.name for p in sorted((checkout / "models").iterdir()) if (p / "config.json").is_file()
        )
        for name in names:
            (root / name).symlink_to(checkout / "models" / name)
        log = Path(tmp) / "server.log"
        args = ("--max-loaded-models", "2") if scenario == "spread" else ()
        with server_process(root, log, checkout=checkout, start_timeout_s=600, args=args) as (url, process):
            row: dict[str, Any] = {"checkout": str(checkout), "scenario": scenario}
            if scenario == "streams":
                row.update(scenarios.streams(url, lambda: rss_mb(process.pid)))
            elif scenario == "spread":
                row.update(scenarios.spread(url, list(names), log.read_text))
            else:
                with HealthPoller(url) as health:
                    row.update(scenarios.worst(url))
                row["health_p99_ms"] = round(health.p99(), 1)
            row["peak_rss_mb"] = round(peak_rss_mb(process.pid))
            row["rss_after_mb"] = round(rss_mb(process.pid))
            return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkout", type=Path, action="append", help="tree(s) to run; default: this one")
    parser.add_argument("--models", nargs="+", default=list(Plan.models))
    parser.add_argument("--clients", type=int, default=Plan.clients)
    parser.add_argument("--tokens", type=int, default=Plan.tokens, help="digits in the worst request's text (2 tokens each)")
    parser.add_argument("--rounds", type=int, default=Plan.rounds, help="requests each client sends, one after another")
    parser.add_argument("--slow", type=int, default=Plan.slow, help="slow (slowloris) connections")
    parser.add_argument("--slow-s", type=float, default=Plan.slow_s, help="how long they are held")
    parser.add_argument("--never-read", type=int, default=Plan.never_read, help="clients that never read their answers")
    parser.add_argument("--never-read-s", type=float, default=Plan.never_read_s, help="longest they are held")
    parser.add_argument("--workers", type=int, default=Plan.workers, help="server processes (attnscope serve --workers)")
    parser.add_argument("--issue45", choices=sorted(SCENARIO_MODELS), action="append",
                        help="run issue 45's scenario(s) instead: streams (four kinds of stream client), spread "
                             "(16 models at --max-loaded-models 2), worst (the 32-client worst mix)")  # fmt: skip
    args = parser.parse_args()
    if args.issue45:
        for checkout in args.checkout or [HERE]:
            for scenario in args.issue45:
                row = probe45(checkout, scenario)
                print(" | ".join(f"{k}={v}" for k, v in row.items()), flush=True)
        return
    plan = Plan(
        tuple(args.models), args.clients, args.rounds, args.tokens, args.slow, args.slow_s,
        args.never_read, args.never_read_s, args.workers,
    )  # fmt: skip
    for checkout in args.checkout or [HERE]:
        row = probe(checkout, plan)
        print(" | ".join(f"{k}={v}" for k, v in row.items()), flush=True)


if __name__ == "__main__":
    main()
