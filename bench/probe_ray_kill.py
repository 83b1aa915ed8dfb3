"""Issue 45.6 on a real local Ray: requests in flight on a replica that is killed (SIGKILL) get
a 503 with ``Retry-After`` (``ReplicaGone`` in front of Serve's proxy), not Serve's plain 500,
and every answer carries one ``X-Request-ID``. Starts ``attnscope serve --ray`` with one shipped
model, sends ``--requests`` slow translations (the issue's digit string at beam 8), kills the
replica once they are running, then prints each status with its Retry-After and content type.

    .venv/bin/python bench/probe_ray_kill.py [--model en-de-transformer] [--requests 2] [--external]

``--external`` first starts a Ray cluster of its own the way an operator would (``ray start --head
--block`` in a process group of its own, with ``RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH`` and
``PYTHONPATH`` set on the cluster as docs/ray.md says) and serves on it with ``serve --ray
ADDRESS``: someone else's cluster, where ``serve --ray`` cannot set the proxies' environment.
Both run under ``RAY_AUTH_MODE=token`` (Ray 2.60's token authentication, the token in
``~/.ray/auth_token``), as an operator joining a token cluster must.
The cluster is stopped by signalling that process group (never ``ray stop``, which would end
every Ray on the machine).
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


def replica_pids(group: int | None = None) -> list[int]:
    """Processes whose command line names a Serve replica of the attnscope deployment (of the
    process group ``group`` only, when given: this probe's own cluster, never another's)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if b"ServeReplica:attnscope" in cmdline and (group is None or _under(int(entry.name), group)):
                found.append(int(entry.name))
    return found


def _under(pid: int, group: int) -> bool:
    """Whether ``pid`` or one of its ancestors is in process group ``group`` (the raylet starts
    its workers in sessions of their own, so a replica is in the group only through its parents)."""
    while pid > 1:
        try:
            if os.getpgid(pid) == group:
                return True
            pid = int((Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return False
    return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="en-de-transformer")
    parser.add_argument("--requests", type=int, default=2)
    parser.add_argument("--kill-after", type=float, default=1.0, help="seconds between sending and the kill")
    parser.add_argument("--external", action="store_true", help="serve on a cluster started apart (ray start)")
    args = parser.parse_args()
    cluster = external_cluster() if args.external else None
    try:
        probe(args, None if cluster is None else cluster[0], None if cluster is None else cluster[1].pid)
    finally:
        if cluster is not None:
            os.killpg(cluster[1].pid, signal.SIGTERM)
            try:
                cluster[1].wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(cluster[1].pid, signal.SIGKILL)


def external_cluster() -> tuple[str, subprocess.Popen[bytes]]:
    """A Ray head started apart (its address, its process), with the proxy callback set on it."""
    port = free_port()
    env = {**os.environ, "RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH": "attnscope.serving.ray_serve_http:proxy_middlewares",
           "PYTHONPATH": str(REPO_ROOT), "RAY_AUTH_MODE": "token"}  # fmt: skip
    ray = str(Path(sys.executable).with_name("ray"))
    head = subprocess.Popen([ray, "start", "--head", "--block", "--port", str(port), "--num-cpus", "2",
                             "--include-dashboard", "false", "--disable-usage-stats",
                             "--temp-dir", tempfile.mkdtemp(prefix="probe-ray-")], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    time.sleep(20)  # the head's GCS and raylet
    if head.poll() is not None:
        raise SystemExit("ray start --head failed")
    print(f"external Ray head at 127.0.0.1:{port} (pid {head.pid})", flush=True)
    return f"127.0.0.1:{port}", head


def probe(args: argparse.Namespace, address: str | None, group: int | None) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        models = Path(tmp) / "models"
        models.mkdir()
        (models / args.model).symlink_to(REPO_ROOT / "models" / args.model)
        port, log = free_port(), Path(tmp) / "serve.log"
        command = [sys.executable, "-m", "attnscope.cli", "serve", "--ray", *([address] if address else []), "--port",
                   str(port), "--models-dir", str(models), "--only-models-dir", "--device", "cpu"]  # fmt: skip
        with log.open("wb") as sink:
            # Ray 2.60's token authentication (docs/ray.md): a process joining at an explicit address
            # sends ~/.ray/auth_token only under RAY_AUTH_MODE=token
            env = {**os.environ, **({"RAY_AUTH_MODE": "token"} if address else {})}
            server = subprocess.Popen(command, cwd=REPO_ROOT, stdout=sink, stderr=subprocess.STDOUT, env=env)
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
            sent = time.monotonic()
            with ThreadPoolExecutor(args.requests) as pool:
                jobs = [
                    pool.submit(httpx.post, f"{url}/api/translate", json=body, timeout=120)
                    for _ in range(args.requests)
                ]
                time.sleep(args.kill_after)  # the decodes are running
                pids = replica_pids(group)
                for pid in pids:
                    os.kill(pid, signal.SIGKILL)
                print(f"killed replica process(es) {pids} after {time.monotonic() - sent:.1f} s", flush=True)
                for job in jobs:
                    r = job.result()
                    print(f"after {time.monotonic() - sent:.1f} s: status {r.status_code}, Retry-After {r.headers.get('retry-after')}, "
                          f"content-type {r.headers.get('content-type')}, body {r.text[:120]!r}")  # fmt: skip
        finally:
            server.send_signal(signal.SIGTERM)
            try:
                server.wait(timeout=90)
            except subprocess.TimeoutExpired:
                server.kill()


if __name__ == "__main__":
    main()
