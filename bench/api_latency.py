"""Latency of the real server over HTTP: ``attnscope serve`` on the shipped models (CPU), then
median and 90th-percentile time of POST /api/translate per model, beam 1 and beam 5, with every
attention matrix in the answer. With ``--protect``, sentences with numbers and emoji, each sent
without and with ``"protect": true`` in turn (interleaved), and the ratio of the medians.

    .venv/bin/python bench/api_latency.py [--models-dir models] [--requests 10] [--models ID ...] [--protect]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from attnscope.testing import running_server  # noqa: E402

SENTENCES = [
    "A man is riding a bicycle.",
    "Two young men in black jackets are walking down a busy city street at night.",
    "A little girl in a pink dress climbs a tree in the park while her father watches.",
]
PROTECT_SENTENCES = [
    "The bus number 42 leaves at 7:15. 🚌",
    "3 young men in black jackets are walking down 5th street at 11:30 at night 🌃.",
    "A little girl in a pink dress climbs 2 trees in the park while her father pays $12.50 😀",
]


def post(url: str, body: dict[str, object]) -> tuple[float, int]:
    data = json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    start = time.perf_counter()
    with urllib.request.urlopen(request, timeout=120) as response:
        size = len(response.read())
    return (time.perf_counter() - start) * 1000, size


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--models-dir", default="models")
    parser.add_argument("--requests", type=int, default=10)
    parser.add_argument("--models", nargs="+", default=None, help="model ids (default: every served model)")
    parser.add_argument("--protect", action="store_true", help="time protect against plain on sentences with numbers and emoji")
    args = parser.parse_args()
    log = Path(tempfile.mkdtemp()) / "server.log"
    with running_server(args.models_dir, log) as base:
        with urllib.request.urlopen(f"{base}/api/models") as response:
            models = args.models or [m["id"] for m in json.load(response)["models"]]
        if args.protect:
            return _protect(base, models, args.requests)
        print(f"{'model':24s} beam | median ms   p90 ms | answer KiB  ({args.requests} requests, 3 sentences)")
        for model in models:
            for beam in (1, 5):
                times, sizes = [], []
                post(f"{base}/api/translate", {"model": model, "text": SENTENCES[0], "beam_size": beam})  # warm-up
                for i in range(args.requests):
                    ms, size = post(
                        f"{base}/api/translate", {"model": model, "text": SENTENCES[i % 3], "beam_size": beam}
                    )
                    times.append(ms)
                    sizes.append(size)
                p90 = statistics.quantiles(times, n=10)[-1] if len(times) > 1 else times[0]
                print(
                    f"{model:24s} {beam:4d} | {statistics.median(times):9.0f} {p90:8.0f} | "
                    f"{statistics.median(sizes) / 1024:10.1f}"
                )
    return 0


def _protect(base: str, models: list[str], requests: int) -> int:
    print(f"{'model':24s} beam | plain ms  protect ms  ratio  ({requests} requests each, interleaved)")
    for model in models:
        for beam in (1, 5):
            times: dict[bool, list[float]] = {False: [], True: []}
            for protect in (False, True):  # warm-up; the first protect request learns the placeholders
                post(f"{base}/api/translate", {"model": model, "text": PROTECT_SENTENCES[0], "beam_size": beam, "protect": protect})
            for i in range(requests):
                for protect in (False, True):
                    body = {"model": model, "text": PROTECT_SENTENCES[i % 3], "beam_size": beam, "protect": protect}
                    times[protect].append(post(f"{base}/api/translate", body)[0])
            plain, protected = statistics.median(times[False]), statistics.median(times[True])
            print(f"{model:24s} {beam:4d} | {plain:8.0f} {protected:11.0f} {protected / plain:6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
