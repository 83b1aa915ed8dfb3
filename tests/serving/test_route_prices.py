"""Admission prices attribution, the logit lens (with DLA), patching and vision over real HTTP
(issue 45): a request over a limit is a 422 naming it, and one the machine cannot finish before
its deadline a 503 with ``Retry-After``, both before any job runs (the server's decode count,
which every slot's job adds to, does not move). One server: limits small enough for tiny models
and a deadline of a microsecond, which no priced job can meet (before pricing, these routes were
admitted at no cost and timed out as 504s)."""

from __future__ import annotations

import base64
import io
import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from PIL import Image

from attnscope.repository import load_model_folder
from attnscope.testing import build_tiny_models, running_server
from attnscope.vision.testing import build_tiny_vision_models

MODEL = "en-de-transformer"
PASSES, FLOATS = 3_000, 45_000  # ATTNSCOPE_MAX_ATTRIBUTION_COST, ATTNSCOPE_MAX_ROUTE_FLOATS
SHORT, MEDIUM = "a b", "a b c d e f g h"
LONG = " ".join("abcdefghij"[i % 10] for i in range(40))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[httpx.Client, Any]]:
    """The client of a server with small limits and a 1 µs deadline, and the tiny Transformer."""
    root = tmp_path_factory.mktemp("price-models")
    build_tiny_models(root, kinds=[("transformer", "transformer", None)])
    build_tiny_vision_models(root)
    env = {
        "ATTNSCOPE_MAX_ATTRIBUTION_COST": str(PASSES),
        "ATTNSCOPE_MAX_ROUTE_FLOATS": str(FLOATS),
        "ATTNSCOPE_REQUEST_TIMEOUT_S": "0.000001",
    }
    log = tmp_path_factory.mktemp("price-server") / "server.log"
    with (
        running_server(root, log, env=env) as url,
        httpx.Client(base_url=url, timeout=60) as client,
    ):
        yield client, load_model_folder(root / MODEL)


def decodes(client: httpx.Client) -> float:
    """Jobs the server's decode slots have run (the count of its batch-size histogram)."""
    found = re.search(r"^attnscope_batch_texts_count (\S+)$", client.get("/metrics").text, re.M)
    return float(found.group(1)) if found else 0.0


def refused(client: httpx.Client, path: str, body: dict[str, Any], status: int) -> httpx.Response:
    """Post ``body``; assert ``status`` and that no job ran."""
    before = decodes(client)
    r = client.post(path, json=body)
    assert r.status_code == status, r.text[:400]
    assert decodes(client) == before, "refused before any job ran"
    return r


def tokens(loaded: Any, text: str) -> int:
    return len(loaded.tokenizer.encode(text)) + 1  # with EOS


def test_attribution_over_its_limit_is_a_422_naming_steps(server: tuple[httpx.Client, Any]) -> None:
    client, loaded = server
    s, t, steps = tokens(loaded, SHORT), tokens(loaded, MEDIUM), 128
    assert (
        t * (steps + 1) * (s + t) > PASSES
    )  # one backward per target token through steps + 1 rows
    fits = PASSES // (t * (s + t)) - 1
    r = refused(
        client,
        "/api/attribution",
        {"model": MODEL, "text": SHORT, "target": MEDIUM, "steps": steps},
        422,
    )
    detail = r.json()["detail"]
    assert "ATTNSCOPE_MAX_ATTRIBUTION_COST" in detail and f"steps ≤ {fits}" in detail, detail
    assert r.json()["errors"][0]["type"] == "cost_limit"


def test_a_lens_holding_too_many_floats_is_a_422(server: tuple[httpx.Client, Any]) -> None:
    client, loaded = server
    points, t = 1 + 3 * loaded.config.decoder_layers, tokens(loaded, LONG)
    assert (
        points * t * loaded.config.vocab_size > FLOATS
    )  # every point's log-probabilities over the vocabulary
    r = refused(client, "/api/lens", {"model": MODEL, "text": SHORT, "target": LONG}, 422)
    assert "ATTNSCOPE_MAX_ROUTE_FLOATS" in r.json()["detail"]


def test_patching_over_its_limit_is_a_422(server: tuple[httpx.Client, Any]) -> None:
    client, _ = server
    r = refused(
        client,
        "/api/patch",
        {"model": MODEL, "clean": LONG, "corrupted": LONG, "target": SHORT},
        422,
    )
    detail = r.json()["detail"]
    assert "ATTNSCOPE_MAX_ATTRIBUTION_COST" in detail and "patching" in detail, detail


def png(side: int) -> str:
    buffer = io.BytesIO()
    Image.new("L", (side, side), 90).save(buffer, format="PNG")
    return base64.b64encode(buffer.getvalue()).decode()


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/api/attribution", {"model": MODEL, "text": SHORT, "target": SHORT, "steps": 4}),
        ("/api/attribution", {"model": MODEL, "text": SHORT, "steps": 4, "beam_size": 1}),
        ("/api/lens", {"model": MODEL, "text": SHORT, "target": SHORT}),
        ("/api/lens", {"model": MODEL, "text": SHORT, "beam_size": 1}),
        ("/api/patch", {"model": MODEL, "clean": SHORT, "corrupted": "a a", "target": SHORT}),
        ("/api/vision/glimpses", {"model": "vision-ram-translated", "image": png(60)}),
    ],
)
def test_a_job_that_cannot_finish_by_its_deadline_is_a_503_with_retry_after(
    server: tuple[httpx.Client, Any], path: str, body: dict[str, Any]
) -> None:
    client, _ = server
    r = refused(client, path, body, 503)
    assert int(r.headers["Retry-After"]) >= 1
    assert "ATTNSCOPE_REQUEST_TIMEOUT_S" in r.json()["detail"]
