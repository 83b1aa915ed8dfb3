"""The attention store of a real server started with a small ATTNSCOPE_ATTENTION_STORE_BYTES: the
oldest answer's attention is evicted (404 saying to translate again), a request whose attention
could never fit is refused before decoding (422 naming the setting), and 16 clients translating
and fetching at once never take the store past its bound."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from attnscope.testing import running_server

MODEL = "en-de-rnn-additive"  # one layer, one head, cross only: a few hundred bytes an answer
BOUND = 1000


@pytest.fixture(scope="module")
def small(tiny_models_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    log = tmp_path_factory.mktemp("small-store") / "server.log"
    env = {"ATTNSCOPE_ATTENTION_STORE_BYTES": str(BOUND), "ATTNSCOPE_INFERENCE_THREADS": "2"}
    with running_server(tiny_models_dir, log, env=env) as url, httpx.Client(base_url=url, timeout=60) as http:
        yield http


def translate(http: httpx.Client, text: str) -> dict:
    body = {"model": MODEL, "text": text, "beam_size": 1, "max_length": 8, "attention": "on_demand"}
    response = http.post("/api/translate", json=body)
    assert response.status_code == 200, response.text
    return response.json()


def test_the_oldest_is_evicted_with_a_message(small: httpx.Client) -> None:
    first = translate(small, "A man is riding a bicycle.")
    assert small.get(f"/api/attention/{first['attention_id']}/cross/0/0").status_code == 200
    for i in range(8):  # far more than BOUND holds
        translate(small, f"Two dogs play number {i}.")
    gone = small.get(f"/api/attention/{first['attention_id']}/cross/0/0")
    assert gone.status_code == 404
    assert "translate again" in gone.json()["detail"] and "evicted" in gone.json()["detail"]
    status = small.get("/api/attention").json()
    assert status["max_bytes"] == BOUND and status["evicted"] > 0 and status["used_bytes"] <= BOUND


def test_attention_that_cannot_fit_is_refused_before_decoding(small: httpx.Client) -> None:
    body = {"model": MODEL, "text": "A man is riding a bicycle. " * 4, "beam_size": 1, "attention": "on_demand"}
    refused = small.post("/api/translate", json=body)
    assert refused.status_code == 422
    assert "ATTNSCOPE_ATTENTION_STORE_BYTES" in refused.json()["detail"]
    inline = small.post("/api/translate", json={**body, "attention": None})
    assert inline.status_code == 200  # the store's bound is no limit on inline answers


def test_a_stream_counts_its_steps_in_the_store(small: httpx.Client) -> None:
    """On demand, a stream keeps every beam row of every step besides its answer: a beam-4 stream
    whose answer would fit but whose steps would not is refused before decoding; greedy plays."""
    body = {"model": MODEL, "text": "A dog runs.", "max_length": 8, "attention": "on_demand"}  # ~300 B an answer
    ok = small.post("/api/translate", json={**body, "beam_size": 4})
    assert ok.status_code == 200, ok.text
    refused = small.post("/api/translate/stream", json={**body, "beam_size": 4})
    assert refused.status_code == 422 and "ATTNSCOPE_ATTENTION_STORE_BYTES" in refused.json()["detail"]
    played = small.post("/api/translate/stream", json={**body, "beam_size": 1})
    assert played.status_code == 200 and played.text.count("attention_id") >= 3  # the steps' and the answer's


def test_the_bound_holds_under_concurrent_clients(small: httpx.Client) -> None:
    def client(n: int) -> list[int]:
        statuses = []
        for i in range(6):
            answer = translate(small, f"A dog {n} runs {i} times.")
            statuses.append(small.get(f"/api/attention/{answer['attention_id']}/cross/0").status_code)
            statuses.append(small.get("/api/attention").json()["used_bytes"])
        return statuses

    with ThreadPoolExecutor(16) as pool:
        seen = [s for statuses in pool.map(client, range(16)) for s in statuses]
    fetched, used = seen[0::2], seen[1::2]
    assert set(fetched) <= {200, 404} and 200 in fetched  # an answer may be evicted by the others first
    assert max(used) <= BOUND
    status = small.get("/api/attention").json()
    assert status["peak_bytes"] <= BOUND and status["entries"] >= 1
