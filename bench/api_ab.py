"""Before/after latency of the real server over HTTP: ``attnscope serve`` from another revision
(a temporary git worktree) and from this checkout, on the same models folder, both running at
once; POST /api/translate (every attention matrix in the answer) goes to each in turn, so both
see the same machine load. Prints the median ms per model and beam size and the ratio
after/before, and (on Linux) each server's CPU ms per request: on a shared machine, where the
wall-clock time also counts what other processes held the cores, that is the steadier number.

    .venv/bin/python bench/api_ab.py --before 02e2a37 [--models en-de-transformer ...] [--requests 12]

Both servers run with the default settings (1 torch thread, 2 decoding threads); run nothing
else heavy meanwhile, on a 2-core machine the two servers already share the cores.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from attnscope.config import REPO_ROOT  # noqa: E402
from attnscope.testing import server_process  # noqa: E402

SENTENCES = [
    "A man is riding a bicycle.",
    "Two young men in black jackets are walking down a busy city street at night.",
    "A little girl in a pink dress climbs a tree in the park while her father watches.",
]


def post_ms(url: str, body: dict[str, object]) -> float:
    request = urllib.request.Request(
        f"{url}/api/translate", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    start = time.perf_counter()
    with urllib.request.urlopen(request, timeout=120) as response:
        response.read()
        if response.status != 200:
            raise RuntimeError(f"{url}: HTTP {response.status}")
    return (time.perf_counter() - start) * 1e3


def cpu_ms(pid: int) -> float:
    """The CPU time (user + system) process ``pid`` has used so far, in ms (Linux: /proc); NaN
    elsewhere. Clock ticks (10 ms): meaningful summed over many requests."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) * 1e3 / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", required=True, help="a git revision to compare this checkout with")
    parser.add_argument("--models-dir", default=str(REPO_ROOT / "models"))
    parser.add_argument("--models", nargs="+", default=["en-de-transformer", "en-de-rnn-additive"])
    parser.add_argument("--beams", type=int, nargs="+", default=[1, 5])
    parser.add_argument("--requests", type=int, default=12, help="per server, model and beam size")
    args = parser.parse_args()
    models_dir = Path(args.models_dir).resolve()

    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        worktree = Path(tmp) / "before"
        try:
            subprocess.run(
                ["git", "-C", str(REPO_ROOT), "worktree", "add", "--detach", str(worktree), args.before],
                check=True, capture_output=True, text=True,
            )
        except subprocess.CalledProcessError as err:
            raise SystemExit(f"bench/api_ab.py: cannot check out {args.before!r}: {err.stderr.strip()}") from None
        stack.callback(
            subprocess.run, ["git", "-C", str(REPO_ROOT), "worktree", "remove", "--force", str(worktree)], check=False
        )
        before, old_server = stack.enter_context(server_process(models_dir, Path(tmp) / "before.log", checkout=worktree))
        after, new_server = stack.enter_context(server_process(models_dir, Path(tmp) / "after.log"))
        pids = {before: old_server.pid, after: new_server.pid}
        print(f"\nbefore = {args.before}, after = this checkout; median ms of {args.requests} requests each, "
              "and the server's CPU ms per request (mean)\n")
        print("| model | beam | before | after | after / before | CPU before | CPU after | after / before |")
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        for model in args.models:
            for beam in args.beams:
                times: dict[str, list[float]] = {before: [], after: []}
                cpu = {before: 0.0, after: 0.0}
                for i in range(args.requests):
                    body = {"model": model, "text": SENTENCES[i % len(SENTENCES)], "beam_size": beam}
                    for url in (before, after) if i % 2 else (after, before):
                        start = cpu_ms(pids[url])
                        times[url].append(post_ms(url, body))
                        cpu[url] += cpu_ms(pids[url]) - start
                old, new = statistics.median(times[before]), statistics.median(times[after])
                old_cpu, new_cpu = cpu[before] / args.requests, cpu[after] / args.requests
                print(f"| {model} | {beam} | {old:.0f} | {new:.0f} | {new / old:.2f}× "
                      f"| {old_cpu:.1f} | {new_cpu:.1f} | {new_cpu / old_cpu:.2f}× |", flush=True)


if __name__ == "__main__":
    main()
