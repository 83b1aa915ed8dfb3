"""Bounded model memory (``ATTNSCOPE_MAX_LOADED_MODELS``): every model is listed, at most the bound
is loaded, the others load on first use and the least recently used one is unloaded, never one a
request holds; one load per model however many requests ask for it at once."""

from __future__ import annotations

import json
import math
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from attnscope.testing import TINY_KINDS, build_tiny_models, running_server

from .conftest import make_client

A, B = "en-de-rnn-additive", "en-de-transformer"
REQUEST = {"text": "a dog runs on the grass", "beam_size": 2}


@pytest.fixture(scope="module")
def two_models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("bounded-models")
    build_tiny_models(root, kinds=[k for k in TINY_KINDS if k[0] in ("transformer", "rnn-additive")])
    return root


@pytest.fixture(scope="module")
def expected(two_models: Path) -> dict[str, dict[str, Any]]:
    """Each model's answer from a server that keeps every model loaded (today's default)."""
    with make_client(two_models) as client:
        return {m: _answer(client, m) for m in (A, B)}


@pytest.fixture
def bounded(two_models: Path) -> Iterator[TestClient]:
    with make_client(two_models, max_loaded_models=1) as client:
        yield client


def _answer(client: TestClient, model: str) -> dict[str, Any]:
    response = client.post("/api/translate", json={**REQUEST, "model": model})
    assert response.status_code == 200, response.text
    return {k: v for k, v in response.json().items() if k != "timing_ms"}


def _states(client: TestClient) -> dict[str, str]:
    return {m["id"]: m["state"] for m in client.get("/api/models").json()["models"]}


def test_every_model_is_listed_and_the_first_loaded(bounded: TestClient, two_models: Path) -> None:
    assert _states(bounded) == {A: "loaded", B: "not_loaded"}
    with make_client(two_models) as everything:  # a listed model describes itself as when loaded
        full = {m["id"]: m for m in everything.get("/api/models").json()["models"]}
    listed = {m["id"]: m for m in bounded.get("/api/models").json()["models"]}
    assert {k: v for k, v in listed[B].items() if k != "state"} == {k: v for k, v in full[B].items() if k != "state"}
    assert all(m["state"] == "loaded" for m in full.values())
    assert bounded.get("/api/ready").json() == {"status": "ready", "models": 2, "unavailable": 0, "loaded": 2, "total": 2}


def test_alternating_requests_answer_as_unbounded_with_one_model_resident(
    bounded: TestClient, expected: dict[str, dict[str, Any]]
) -> None:
    residency = bounded.app.state.service.registry.residency  # type: ignore[attr-defined]
    for model in (B, A, B, A, A, B):
        assert _answer(bounded, model) == expected[model]
        assert list(residency.resident) == [model]  # only the one just used stays
        assert _states(bounded) == {model: "loaded", ({A, B} - {model}).pop(): "not_loaded"}
    assert residency.loads == 1 + 5  # the first at start-up, then one per switch, none for A, A


def test_the_pages_show_the_state(bounded: TestClient) -> None:
    page = bounded.get("/models").text
    cards = json.loads(re.search(r'<script type="application/json" id="cards-data">(.*?)</script>', page, re.S)[1])  # type: ignore[index]
    assert {c["id"]: c["state"] for c in cards} == {A: "loaded", B: "not_loaded"}


def test_a_stream_waits_for_its_model_to_load(bounded: TestClient) -> None:
    """Issue 45.3: a stream for a model that is not loaded waited for nothing and answered 503
    "model X is loading"; it now waits for the load like /api/translate and streams."""
    response = bounded.post("/api/translate/stream", json={"model": B, "text": "a dog"})
    assert response.status_code == 200, response.text
    assert "event: step" in response.text and "event: answer" in response.text
    assert _states(bounded) == {A: "not_loaded", B: "loaded"}


def test_a_folder_whose_weights_fail_is_listed_then_unavailable(two_models: Path, tmp_path: Path) -> None:
    root = tmp_path / "models"
    build_tiny_models(root, kinds=[k for k in TINY_KINDS if k[0] in ("transformer", "rnn-additive")])
    (root / B / "model.safetensors").write_bytes(b"not safetensors")
    with make_client(root, max_loaded_models=1) as client:
        assert _states(client) == {A: "loaded", B: "not_loaded"}  # config, tokenizer and card are fine
        response = client.post("/api/translate", json={**REQUEST, "model": B})
        assert response.status_code == 404 and "model.safetensors" in response.json()["detail"]
        body = client.get("/api/models").json()
        assert [m["id"] for m in body["models"]] == [A]
        assert [u["id"] for u in body["unavailable"]] == [B]


def _close(a: Any, b: Any) -> bool:
    """Equal, numbers within 1e-4 (a decode batched with others rounds differently)."""
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) or isinstance(b, float):
        return isinstance(a, int | float) and isinstance(b, int | float) and math.isclose(a, b, abs_tol=1e-4)
    return bool(a == b)


def test_bounded_server_over_http(two_models: Path, tmp_path: Path, expected: dict[str, dict[str, Any]]) -> None:
    """``attnscope serve --max-loaded-models 1``: concurrent requests for both models all answer as
    an unbounded server does, and each model is loaded no more often than it is switched to."""
    log = tmp_path / "serve.log"
    with running_server(two_models, log, args=("--max-loaded-models", "1")) as url:
        def ask(model: str) -> dict[str, Any]:
            answer = httpx.post(f"{url}/api/translate", json={**REQUEST, "model": model}, timeout=60).json()
            return {k: v for k, v in answer.items() if k != "timing_ms"}

        results: dict[int, dict[str, Any]] = {}
        order = [B, B, B, A, B, A, B, B]
        threads = [threading.Thread(target=lambda i=i, m=m: results.__setitem__(i, ask(m))) for i, m in enumerate(order)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        for i, m in enumerate(order):  # micro-batched with each other: floats equal to float32 rounding
            assert _close(results[i], expected[m]), (i, m)
        states = {m["id"]: m["state"] for m in httpx.get(f"{url}/api/models").json()["models"]}
        assert sorted(states.values()) == ["loaded", "not_loaded"]
    loading: set[str] = set()  # in the log, a model's load never starts while one of it runs
    for line in log.read_text().splitlines():
        if started := re.search(r"loading (\S+) \(at most 1 stay loaded\)", line):
            assert started[1] not in loading, line
            loading.add(started[1])
        elif done := re.search(r" loaded (\S+) \(", line):
            loading.discard(done[1])
    assert not loading


def test_a_family_that_cannot_be_built_on_meta_is_listed_from_a_full_load(
    two_models: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import attnscope.engine.registry as registry

    def no_meta(config: Any) -> Any:
        raise RuntimeError("cannot build on the meta device")

    monkeypatch.setattr(registry, "build_model", no_meta)
    with make_client(two_models, max_loaded_models=1) as client:
        assert _states(client) == {A: "loaded", B: "not_loaded"}
        preview = client.app.state.service.registry._previews[B]
        assert {p.device.type for p in preview.loaded.model.parameters()} == {"meta"}  # no weights kept
        assert client.post("/api/translate", json={**REQUEST, "model": B}).status_code == 200


def test_a_byte_budget_over_http_keeps_one_model_loaded(two_models: Path) -> None:
    from attnscope.engine.residency import weights_bytes

    budget = max(weights_bytes(two_models / m) for m in (A, B)) + 1  # room for either, not both
    with make_client(two_models, max_loaded_bytes=budget) as client:
        residency = client.app.state.service.registry.residency  # type: ignore[attr-defined]
        for model in (A, B, A):
            assert client.post("/api/translate", json={**REQUEST, "model": model}).status_code == 200
            assert list(residency.resident) == [model] and residency.bytes_taken() <= budget
