"""Issue 45.6 on a real local Ray: requests in flight on a replica that is killed (SIGKILL) get
a 503 with ``Retry-After`` (``ReplicaGone`` in front of Serve's proxy), not Serve's plain 500,
and every answer carries one ``X-Request-ID``. Starts ``attnscope serve --ray`` with one shipped
model, sends ``--requests`` slow translations (the issue's digit string at beam 8), kills the
replica once they are running, then prints each status with its Retry-After and content type.

    .venv/bin/python bench/probe_ray_kill.py [--model en-de-transformer] [--requests 2]
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from attnscope.testing import REPO_ROOT, free_port


def replica_pids() -> list[int]:
    """Processes whose command line names a Serve replica of the attnscope deployment."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if b"ServeReplica:attnscope" in cmdline:
                found.append(int(entry.name))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="en-de-transformer")
    parser.add_argument("--requests", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        models = Path(tmp) / "models"
        models.mkdir()
        (models / args.model).symlink_to(REPO_ROOT / "models" / args.model)
        port, log = free_port(), Path(tmp) / "serve.log"
        command = [sys.executable, "-m", "attnscope.cli", "serve", "--ray", "--port", str(port), "--models-dir",
                   str(models), "--only-models-dir", "--device", "cpu"]  # fmt: skip
        with log.open("wb") as sink:
            server = subprocess.Popen(command, cwd=REPO_ROOT, stdout=sink, stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline:
                try:
                    if httpx.get(f"{url}/api/ready", timeout=5).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                time.sleep(0.5)
            else:
                raise SystemExit(f"not ready:\n{log.read_text()[-3000:]}")
            health = httpx.get(f"{url}/api/health", timeout=30)
            print(f"x-request-id headers on one answer: {health.headers.get_list('x-request-id')}")
            body = {
                "model": args.model,
                "text": " ".join(str(i % 10) for i in range(95)),
                "beam_size": 8,
                "max_length": 150,
            }
            with ThreadPoolExecutor(args.requests) as pool:
                jobs = [
                    pool.submit(httpx.post, f"{url}/api/translate", json=body, timeout=120)
                    for _ in range(args.requests)
                ]
                time.sleep(1.0)  # the decodes are running
                pids = replica_pids()
                for pid in pids:
                    os.kill(pid, signal.SIGKILL)
                print(f"killed replica process(es) {pids}")
                for job in jobs:
                    r = job.result()
                    print(f"status {r.status_code}, Retry-After {r.headers.get('retry-after')}, "
                          f"content-type {r.headers.get('content-type')}, body {r.text[:120]!r}")  # fmt: skip
        finally:
            server.send_signal(signal.SIGTERM)
            try:
                server.wait(timeout=90)
            except subprocess.TimeoutExpired:
                server.kill()


if __name__ == "__main__":
    main()
