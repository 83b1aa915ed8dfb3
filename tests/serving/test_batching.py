"""Micro-batching over real HTTP: concurrent requests with the same model and settings are
decoded together (the server's /metrics show decodes that served several requests), and each
answer is the one that request gets alone (same tokens; numbers equal up to float32 noise)."""

from __future__ import annotations

import re
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from attnscope.testing import TINY_PAIRS

MODEL = "en-de-transformer"


def batch_counts(url: str) -> tuple[float, float]:
    """(decodes, requests they served) so far, from the batch-size histogram."""
    text = httpx.get(f"{url}/metrics").text
    count = float(re.search(r"^attnscope_batch_requests_count ([0-9.e+]+)$", text, re.M).group(1))  # type: ignore[union-attr]
    total = float(re.search(r"^attnscope_batch_requests_sum ([0-9.e+]+)$", text, re.M).group(1))  # type: ignore[union-attr]
    return count, total


def test_concurrent_requests_are_batched_and_answer_as_alone(server: str, same_answer: Any) -> None:
    bodies = [
        {"model": MODEL, "text": source, "beam_size": 3, **({"max_length": 4} if i % 3 == 0 else {})}
        for i, (source, _) in enumerate(TINY_PAIRS)
    ] * 2
    with httpx.Client(base_url=server, timeout=120) as http:
        alone = [http.post("/api/translate", json=body).json() for body in bodies]
    before = batch_counts(server)
    start = threading.Barrier(len(bodies))

    def ask(body: dict[str, Any]) -> dict[str, Any]:
        with httpx.Client(base_url=server, timeout=120) as http:
            start.wait()
            r = http.post("/api/translate", json=body)
        assert r.status_code == 200, r.text
        return r.json()

    with ThreadPoolExecutor(len(bodies)) as pool:
        together = list(pool.map(ask, bodies))
    decodes, requests = (after - b for after, b in zip(batch_counts(server), before, strict=True))
    assert requests == len(bodies)
    assert decodes < requests, "no decode served more than one request"
    for got, expected in zip(together, alone, strict=True):
        same_answer(got, expected)
    assert any(not a["finished"] and len(a["target_tokens"]) == 4 for a in together), "a max_length cut was batched"
