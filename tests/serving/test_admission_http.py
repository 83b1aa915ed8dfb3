"""Admission over real HTTP (issue 35): a vision request over ATTNSCOPE_MAX_VISION_COST and an
``explain`` request whose answer would pass ATTNSCOPE_MAX_ANSWER_BYTES are refused with a 422
naming the limit and a way under it, before any decode runs."""

from __future__ import annotations

import base64
import io
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from PIL import Image

from attnscope.engine.explain import Extras
from attnscope.engine.limits import Asked, answer_bytes
from attnscope.repository import load_model_folder
from attnscope.testing import TINY_PAIRS, build_tiny_models, running_server
from attnscope.vision.testing import build_tiny_vision_models

TRANSFORMER = "en-de-transformer"
TEXT = TINY_PAIRS[3][0]
MAX_LENGTH = 12
VISION_COST = 200_000  # a tiny RAM: 3 glimpses of 60², so 400² fits and 500² does not; a caption: beam 2 of 10 steps of 84²


def png(side: int) -> str:
    buffer = io.BytesIO()
    Image.new("L", (side, side), 90).save(buffer, format="PNG")
    return base64.b64encode(buffer.getvalue()).decode()


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[httpx.Client, int]]:
    """A server whose answer-size limit is the estimate of a plain translation of TEXT (so any
    explanation tips it over), with a low vision cost limit; the client and the source length."""
    root = tmp_path_factory.mktemp("admission-models")
    build_tiny_models(root)
    build_tiny_vision_models(root)
    loaded = load_model_folder(root / TRANSFORMER)
    source = len(loaded.tokenizer.encode(TEXT)) + 1
    limit = answer_bytes(loaded.config, [source], [MAX_LENGTH], Asked(None, 6, Extras(), 1))
    env = {"ATTNSCOPE_MAX_ANSWER_BYTES": str(limit), "ATTNSCOPE_MAX_VISION_COST": str(VISION_COST)}
    log = tmp_path_factory.mktemp("admission-server") / "server.log"
    with running_server(root, log, env=env) as url, httpx.Client(base_url=url, timeout=60) as client:
        yield client, source


def decodes(client: httpx.Client) -> float:
    """How many decodes the server has run (the count of its batch-size histogram)."""
    text = client.get("/metrics").text
    match = re.search(r"^attnscope_batch_texts_count (\S+)$", text, re.M)
    return float(match.group(1)) if match else 0.0


def test_an_explanation_over_the_answer_size_is_refused_before_decoding(limited: tuple[httpx.Client, int]) -> None:
    client, _ = limited
    body = {"model": TRANSFORMER, "text": TEXT, "max_length": MAX_LENGTH}
    assert client.post("/api/translate", json=body).status_code == 200
    before = decodes(client)
    r = client.post("/api/translate", json={**body, "explain": ["norm", "rollout", "alti", "value_zeroing"]})
    assert r.status_code == 422, r.text[:300]
    detail = r.json()["detail"]
    assert "ATTNSCOPE_MAX_ANSWER_BYTES" in detail and 'no "explain"' in detail, detail
    assert r.json()["errors"][0]["type"] == "answer_size_limit"
    assert decodes(client) == before, "refused before any decode ran"
    r = client.post("/api/align", json={"model": TRANSFORMER, "text": TEXT, "target": TEXT, "explain": ["alti"]})
    assert r.status_code in (200, 422) and r.status_code != 500


def test_a_vision_request_over_its_cost_is_a_422_naming_the_limit(limited: tuple[httpx.Client, int]) -> None:
    client, _ = limited
    body = {"model": "vision-ram-translated", "image": png(100)}
    assert client.post("/api/vision/glimpses", json=body).status_code == 200
    r = client.post("/api/vision/glimpses", json={**body, "image": png(500)})
    assert r.status_code == 422, r.text[:300]
    detail = r.json()["detail"]
    assert "ATTNSCOPE_MAX_VISION_COST" in detail and "500×500" in detail, detail
    assert r.json()["errors"][0]["loc"] == ["body", "image"] and r.json()["errors"][0]["type"] == "cost_limit"
    side = int(re.search(r"e\.g\. (\d+)×", detail).group(1))  # type: ignore[union-attr]
    assert client.post("/api/vision/glimpses", json={**body, "image": png(side)}).status_code == 200, detail


def test_a_caption_names_the_beam_size_that_fits(limited: tuple[httpx.Client, int]) -> None:
    client, _ = limited
    body = {"model": "vision-sat-scenes", "image": png(84), "beam_size": 10}
    r = client.post("/api/vision/caption", json=body)
    assert r.status_code == 422, r.text[:300]
    detail = r.json()["detail"]
    assert "ATTNSCOPE_MAX_VISION_COST" in detail
    beams = re.search(r"beam_size ≤ (\d+)", detail)
    assert beams, detail
    assert client.post("/api/vision/caption", json={**body, "beam_size": int(beams.group(1))}).status_code == 200


def test_admission_refuses_what_the_rate_now_cannot_finish_before_any_decode(
    tiny_models_dir: Path, client_for: Any
) -> None:
    """Issue 45.2 over the app: with the seconds per unit of work forced high, /api/translate is
    a 503 with Retry-After and no decode starts; forced low, the same request is a 200."""
    body = {"model": "en-de-transformer", "text": "a dog runs on the grass", "beam_size": 4, "max_length": 60}
    with client_for(tiny_models_dir, request_timeout_s=30) as c:
        scheduler = c.app.state.service.scheduler
        decodes = _batches(c)
        scheduler._work_s = 1.0  # a second per unit of work: hours for this request
        r = c.post("/api/translate", json=body)
        assert r.status_code == 503, r.text
        assert int(r.headers["Retry-After"]) >= 1 and "ATTNSCOPE_REQUEST_TIMEOUT_S" in r.json()["detail"]
        assert _batches(c) == decodes  # refused up front: nothing decoded
        scheduler._work_s = 1e-12
        assert c.post("/api/translate", json=body).status_code == 200
        assert _batches(c) == decodes + 1


def _batches(client: Any) -> float:
    """Decodes run so far (the batch histogram's count, from /metrics)."""
    text = client.get("/metrics").text
    return float(re.search(r"^attnscope_batch_requests_count (\S+)$", text, re.M)[1])  # type: ignore[index]
