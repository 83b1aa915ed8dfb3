"""Throughput under load, over real HTTP: ``attnscope serve`` on the shipped en-de Transformer
(every attention matrix in each answer, gzip as clients ask for it), then requests/s, p50 and
p99 latency for 1 client and for 32 concurrent clients, greedy and beam 5, in one run.

Concurrent requests for the same model and settings are micro-batched by the server, so 32
clients should get several times one client's requests/s. The last column compares the
32-client p99 with the time of 32 decodes one after another (32 x the 1-client mean). Each
setting runs ``--rounds`` times, 1 client and 32 clients alternating, and the speed-up is the
ratio of the median rounds: the machine's noise (other tenants, its clock) then falls on both
sides instead of on one (single runs of one setting varied by up to 1.7x here).

The clients are lean, because they share the machine's cores with the server: each thread keeps
one connection (``http.client``), asks for gzip, reads the whole answer, checks its status and
inflates it (which checks that the gzip stream is complete); it does not parse the JSON. httpx
cost ~12 ms of client CPU per answer here (1-2 ms this way), a third of a core at 32 clients.

    .venv/bin/python bench/load.py [--model models/en-de-transformer] [--requests 128] [--rounds 3]
"""

from __future__ import annotations

import argparse
import gzip
import http.client
import json
import statistics
import sys
import tempfile
import threading
import time
import zlib
from pathlib import Path
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from attnscope.config import REPO_ROOT, default_data_dir  # noqa: E402
from attnscope.testing import running_server  # noqa: E402

FALLBACK = [
    "A man is riding a bicycle.",
    "Two young men in black jackets are walking down a busy city street at night.",
    "A little girl in a pink dress climbs a tree in the park while her father watches.",
    "A dog runs across the grass.",
]


def sentences(n: int) -> list[str]:
    """The first ``n`` English sentences of Multi30k test2016 (a few fixed ones without the corpus)."""
    path = default_data_dir() / "test_2016_flickr.en.gz"
    if path.is_file():
        with gzip.open(path, "rt", encoding="utf-8") as f:
            return [line.strip() for line, _ in zip(f, range(n), strict=False)]
    return [FALLBACK[i % len(FALLBACK)] for i in range(n)]


def ask(conn: http.client.HTTPConnection, body: dict[str, object]) -> None:
    """POST ``body`` to /api/translate on ``conn``; read the whole answer, check it (status 200,
    a complete gzip stream when gzipped) and drop it."""
    headers = {"Content-Type": "application/json", "Accept-Encoding": "gzip"}
    conn.request("POST", "/api/translate", json.dumps(body), headers)
    response = conn.getresponse()
    data = response.read()
    if response.status != 200:
        raise RuntimeError(f"HTTP {response.status}: {data[:500]!r}")
    if response.getheader("Content-Encoding") == "gzip":
        data = zlib.decompress(data, wbits=31)
    if not data.endswith(b"}"):
        raise RuntimeError(f"an incomplete answer: ...{data[-100:]!r}")


def run_clients(url: str, model: str, texts: list[str], beam: int, clients: int, total: int) -> tuple[float, list[float]]:
    """``clients`` threads, each with its own keep-alive connection, share ``total`` requests.
    Returns (wall seconds, latencies in ms)."""
    latencies: list[float] = []
    lock = threading.Lock()
    counter = iter(range(total))
    start = threading.Barrier(clients + 1)
    address = urlsplit(url)

    def client() -> None:
        conn = http.client.HTTPConnection(address.hostname or "127.0.0.1", address.port, timeout=300)
        try:
            start.wait()
            while True:
                with lock:
                    i = next(counter, None)
                if i is None:
                    return
                t0 = time.perf_counter()
                ask(conn, {"model": model, "text": texts[i % len(texts)], "beam_size": beam})
                with lock:
                    latencies.append((time.perf_counter() - t0) * 1000)
        finally:
            conn.close()

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    return time.perf_counter() - t0, latencies


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=str(REPO_ROOT / "models" / "en-de-transformer"))
    parser.add_argument("--requests", type=int, default=128, help="requests per 32-client run")
    parser.add_argument("--single", type=int, default=32, help="requests per 1-client run")
    parser.add_argument("--rounds", type=int, default=3, help="alternating 1-client/32-client runs per setting")
    args = parser.parse_args()
    model_dir = Path(args.model).resolve()
    texts = sentences(64)
    with tempfile.TemporaryDirectory() as tmp:
        models = Path(tmp) / "models"
        models.mkdir()
        (models / model_dir.name).symlink_to(model_dir)
        with running_server(models, Path(tmp) / "server.log") as url:
            run_clients(url, model_dir.name, texts, 1, 4, 16)  # warm-up
            rows = []
            for name, beam in (("greedy", 1), ("beam 5", 5)):
                ones: list[tuple[float, list[float]]] = []
                manys: list[tuple[float, list[float]]] = []
                for _ in range(args.rounds):  # interleaved: the machine's noise hits both sides
                    ones.append(run_clients(url, model_dir.name, texts, beam, 1, args.single))
                    manys.append(run_clients(url, model_dir.name, texts, beam, 32, args.requests))
                rows.append((name, Runs(ones), Runs(manys)))
    print(f"{args.rounds} alternating rounds per setting; req/s as the median round (min-max), latencies over all rounds")
    print()
    print(f"| {model_dir.name} | 1 client req/s | p50 ms | p99 ms | 32 clients req/s | p50 ms | p99 ms | speed-up | 32 sequential ms |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, one, many in rows:
        print(
            f"| {name} | {one.rate()} | {one.percentile(0.5):.0f} | {one.percentile(0.99):.0f} | {many.rate()} "
            f"| {many.percentile(0.5):.0f} | {many.percentile(0.99):.0f} | {many.median_rps / one.median_rps:.2f}x "
            f"| {32 * statistics.mean(one.latencies):.0f} |"
        )
    return 0


class Runs:
    """Several runs of one setting: (wall seconds, latencies) each."""

    def __init__(self, runs: list[tuple[float, list[float]]]) -> None:
        self.rps = [len(latencies) / seconds for seconds, latencies in runs]
        self.median_rps = statistics.median(self.rps)
        self.latencies = [x for _, latencies in runs for x in latencies]

    def rate(self) -> str:
        if len(self.rps) == 1:
            return f"{self.median_rps:.1f}"
        return f"{self.median_rps:.1f} ({min(self.rps):.1f}-{max(self.rps):.1f})"

    def percentile(self, q: float) -> float:
        return percentile(self.latencies, q)


if __name__ == "__main__":
    raise SystemExit(main())
