"""``attnscope serve`` against ``attnscope serve --ray`` (local Ray, one replica) on the same model
folders: seconds from the command to ``/api/ready``, median and 90th-percentile latency of POST
/api/translate (one model, greedy, every attention matrix), and seconds from SIGTERM to exit.
The two run one after the other on the same machine; on a shared machine, run it twice.

    .venv/bin/python bench/serve_ray.py [--models-dir models] [--model en-de-transformer] [--requests 50]
"""

from __future__ import annotations

import argparse
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from attnscope.testing import free_port  # noqa: E402


def start(models_dir: str, extra: list[str]) -> tuple[subprocess.Popen[bytes], str, float]:
    """The server started as a user would; returns it, its URL and its seconds to ready."""
    port = free_port()
    began = time.monotonic()
    command = [sys.executable, "-m", "attnscope.cli", "serve", "--port", str(port), "--models-dir", models_dir, *extra]
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    while True:
        if process.poll() is not None:
            raise SystemExit(f"{' '.join(command)} exited with {process.returncode}")
        try:
            if httpx.get(f"{url}/api/ready", timeout=5).status_code == 200:
                return process, url, time.monotonic() - began
        except httpx.HTTPError:
            pass
        time.sleep(0.1)


def latencies(url: str, model: str, requests: int) -> list[float]:
    body = {"model": model, "text": "A man is riding a bicycle.", "beam_size": 1}
    with httpx.Client(timeout=120) as client:
        for _ in range(5):  # warm-up
            client.post(f"{url}/api/translate", json=body).raise_for_status()
        times = []
        for _ in range(requests):
            began = time.perf_counter()
            client.post(f"{url}/api/translate", json=body).raise_for_status()
            times.append((time.perf_counter() - began) * 1000)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models-dir", default=str(ROOT / "models"))
    parser.add_argument("--model", default="en-de-transformer")
    parser.add_argument("--requests", type=int, default=50)
    args = parser.parse_args()
    for name, extra in (("plain", []), ("ray", ["--ray"])):
        process, url, ready_s = start(args.models_dir, extra)
        try:
            times = latencies(url, args.model, args.requests)
        finally:
            began = time.monotonic()
            process.send_signal(signal.SIGTERM)
            process.wait()
        p90 = statistics.quantiles(times, n=10)[-1]
        print(  # noqa: T201 - a benchmark's report
            f"{name:5s} ready {ready_s:5.1f} s  translate median {statistics.median(times):6.1f} ms  "
            f"p90 {p90:6.1f} ms  stop {time.monotonic() - began:4.1f} s"
        )


if __name__ == "__main__":
    main()
