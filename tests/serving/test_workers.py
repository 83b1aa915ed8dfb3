"""``--workers N`` logs like one worker does (issue 35): each worker process writes its model
loads and one line per request, each line carrying the pid of the process that wrote it."""

from __future__ import annotations

import re
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from attnscope.testing import server_process

MOST_REQUESTS = 200  # bounded: connections go to whichever worker accepts first


def test_two_workers_each_log_their_loads_and_requests(tiny_models_dir: Path, tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    body = {"model": "en-de-rnn-additive", "text": "A man.", "max_length": 5}

    def one(_: int) -> int:
        with httpx.Client(timeout=60) as client:  # a new connection each time
            return client.post(f"{url}/api/translate", json=body).status_code

    def pids(pattern: str) -> set[str]:
        return set(re.findall(r"\[(\d+)\] " + pattern, log.read_text()))

    with server_process(tiny_models_dir, log, args=("--workers", "2")) as (url, process):
        children = Path(f"/proc/{process.pid}/task/{process.pid}/children").read_text().split()
        workers = {c for c in children if b"spawn_main" in Path(f"/proc/{c}/cmdline").read_bytes()}
        assert len(workers) == 2
        # The server is ready when one worker answers /api/ready; the other may still be loading
        # (a 503 "still loading" under load, once in a whole-suite run): wait for both to say so.
        for _ in range(600):  # a bound on polls, not a timing assertion
            if len(pids(r"attnscope\.engine\.registry: serving \d+ model")) == 2:
                break
            time.sleep(0.1)
        assert pids(r"attnscope\.engine\.registry: serving \d+ model") == workers, log.read_text()[-3000:]
        with ThreadPoolExecutor(8) as pool:
            for start in range(0, MOST_REQUESTS, 8):
                assert set(pool.map(one, range(start, start + 8))) == {200}
                if len(pids(r"attnscope\.serving\.requests: request id=\w+ POST /api/translate .*status=200")) == 2:
                    break
        requests = pids(r"attnscope\.serving\.requests: request id=\w+ POST /api/translate .*status=200")
        loads = pids(r"attnscope\.engine\.registry: loaded en-de-rnn-additive")
    assert requests == workers, log.read_text()[-3000:]
    assert loads == workers, log.read_text()[-3000:]
