"""Over real HTTP: `attnscope serve` in its own process, spoken to with httpx."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

MODELS = ["en-de-transformer", "en-de-rnn-additive", "en-de-rnn-none", "en-de-self-attentive"]
TEXTS = ["A man is riding a bicycle.", "Two dogs play in the snow.", "Children play football."]


@pytest.fixture(scope="module")
def infos(http: httpx.Client) -> dict[str, dict[str, Any]]:
    r = http.get("/api/models")
    assert r.status_code == 200
    return {m["id"]: m for m in r.json()["models"]}


def test_health(http: httpx.Client) -> None:
    r = http.get("/api/health")
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    assert r.json() == {"status": "ok", "device": "cpu", "models": 4}


@pytest.mark.parametrize("model", MODELS)
def test_every_endpoint(http: httpx.Client, infos: dict[str, Any], check: Any, model: str) -> None:
    assert infos[model]["device"] == "cpu"
    answer = http.post("/api/translate", json={"model": model, "text": TEXTS[0]}).json()
    check(answer, infos[model])
    aligned = http.post("/api/align", json={"model": model, "text": TEXTS[0], "target": "Ein Mann fährt Fahrrad."})
    assert aligned.status_code == 200
    check(aligned.json(), infos[model])
    batch = http.post("/api/translate/batch", json={"model": model, "texts": TEXTS, "beam_size": 2})
    assert batch.status_code == 200 and len(batch.json()) == len(TEXTS)
    for item in batch.json():
        check(item, infos[model])


def test_concurrent_requests_share_models_safely(http: httpx.Client, server: str, same_answer: Any) -> None:
    """Many requests at once on the same model instances (micro-batched where their settings
    match) give the answers they give alone."""
    jobs = [(m, t, b) for m in ("en-de-transformer", "en-de-self-attentive") for t in TEXTS for b in (1, 3)]

    def ask(job: tuple[str, str, int]) -> dict[str, Any]:
        model, text, beam = job
        with httpx.Client(base_url=server, timeout=60) as own:
            r = own.post("/api/translate", json={"model": model, "text": text, "beam_size": beam})
        assert r.status_code == 200
        return r.json()

    alone = [ask(job) for job in jobs]
    with ThreadPoolExecutor(max_workers=8) as pool:
        together = list(pool.map(ask, jobs * 2))
    for i, answer in enumerate(together):
        same_answer(answer, alone[i % len(jobs)])


def test_bad_input_over_the_wire_then_still_serving(http: httpx.Client) -> None:
    headers = {"content-type": "application/json"}
    cases: list[tuple[bytes, int]] = [
        (b'{"model": "en-de-rnn-additive", "text": "unterminated', 422),
        (b'{"model": "en-de-rnn-additive", "text": "\xc3\x28 bad utf-8"}', 422),
        (b'{"model": "en-de-rnn-additive", "text": "a\\u0000b \\ud83d\\ude00 \\u05e9\\u05dc"}', 200),
        (b'{"model": "en-de-rnn-additive", "text": "\\udc00"}', 422),
        (b'{"model": "nope", "text": "Hi"}', 404),
        (b'{"model": "en-de-rnn-additive", "text": "Hi", "beam_size": 0}', 422),
        (b'{"model": "en-de-rnn-additive", "text": "Hi", "surprise": 1}', 422),
    ]
    for raw, status in cases:
        r = http.post("/api/translate", content=raw, headers=headers)
        assert r.status_code == status, (raw, r.text)
        assert r.headers["content-type"] == "application/json"
        assert status == 200 or r.json()["detail"]
    assert http.get("/api/health").json()["status"] == "ok"
    assert http.post("/api/translate", json={"model": "en-de-rnn-additive", "text": "Hi"}).status_code == 200


def test_docs_and_openapi(http: httpx.Client) -> None:
    assert http.get("/docs").status_code == 200
    spec = http.get("/openapi.json").json()
    assert "/api/translate" in spec["paths"]
