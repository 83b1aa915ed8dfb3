"""Admission and the outer layers, over the app: a decode over the cost budget is refused with a
422 that names the limit and ways under it (each of which works); the issue's worst request on
the shipped Transformer is refused before any decoding; a deadline ends a decode with a 504;
bodies over the limit get 413; the Host allow-list and the security headers; gzip and the
``attention`` / ``precision`` fields."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path
from typing import Any

import pytest
from isal import igzip

from attnscope.config import REPO_ROOT
from attnscope.text.tokenizer import Tokenizer

TRANSFORMER = "en-de-transformer"
LONG = " ".join(["a", "play", "in"] * 40)  # 120 tokens of the tiny tokenizer


def test_cost_over_budget_is_refused_with_ways_under_it(tiny_models_dir: Path, client_for: Any) -> None:
    with client_for(tiny_models_dir, max_attention_floats=400_000) as c:
        body = {"model": TRANSFORMER, "text": LONG, "beam_size": 8, "max_length": 100}
        r = c.post("/api/translate", json=body)
        assert r.status_code == 422
        detail = r.json()["detail"]
        assert "the limit is 0.4 M (ATTNSCOPE_MAX_ATTENTION_FLOATS)" in detail and r.json()["errors"][0]["type"] == "cost_limit"
        beams = int(re.search(r"beam_size ≤ (\d+)", detail).group(1))  # type: ignore[union-attr]
        length = int(re.search(r"max_length ≤ (\d+)", detail).group(1))  # type: ignore[union-attr]
        assert '"attention": []' in detail
        for fix in ({"beam_size": beams}, {"max_length": length}, {"attention": []}):
            assert c.post("/api/translate", json={**body, **fix}).status_code == 200, fix
        assert c.post("/api/translate", json={**body, "beam_size": beams + 1}).status_code == 422
        metrics = c.get("/metrics").text
        assert re.search(r'^attnscope_rejections_total\{reason="cost"\} [1-9]', metrics, re.M)


def test_a_batchs_cost_counts_each_texts_own_budget(tiny_models_dir: Path, client_for: Any) -> None:
    """Without max_length each text of a batch is charged for its own default budget: a short text
    beside a long one costs what it costs alone (1.40 M weights for both at beam 8, where charging
    the short one the long one's 192 tokens would make 2.0 M); the ways under the limit work."""
    with client_for(tiny_models_dir, max_attention_floats=1_450_000) as c:
        body = {"model": TRANSFORMER, "texts": [LONG, "a play"], "beam_size": 8}
        r = c.post("/api/translate/batch", json=body)
        assert r.status_code == 200, r.text
        r = c.post("/api/translate/batch", json={**body, "beam_size": 9})
        assert r.status_code == 422
        detail = r.json()["detail"]
        assert "1.6 M attention weights (9 beams × up to 192 output tokens)" in detail  # 1.5 × 121 + 10
        length = int(re.search(r"max_length ≤ (\d+)", detail).group(1))  # type: ignore[union-attr]
        assert c.post("/api/translate/batch", json={**body, "beam_size": 9, "max_length": length}).status_code == 200


def test_the_worst_request_on_the_shipped_transformer_is_refused(tmp_path: Path, client_for: Any) -> None:
    """One 199-token digit string, beam 16, max_length 512 (the issue's): refused with 422 under
    the default budget, before any decoding."""
    shipped = REPO_ROOT / "models" / TRANSFORMER
    (tmp_path / TRANSFORMER).symlink_to(shipped)
    tokenizer = Tokenizer.load(shipped / "tokenizer.model")
    text = " ".join("0123456789"[i % 10] for i in range(199))
    while len(tokenizer.encode(text)) > 199:  # one character at a time: a lossless tokenizer splits digits
        text = text[:-1]
    assert len(tokenizer.encode(text)) == 199
    with client_for(tmp_path) as c:
        r = c.post("/api/translate", json={"model": TRANSFORMER, "text": text, "beam_size": 16, "max_length": 512})
        assert r.status_code == 422
        assert "90.7 M attention weights (16 beams × 512 output tokens)" in r.json()["detail"]


def test_a_decode_past_its_deadline_is_a_504(tiny_models_dir: Path, client_for: Any) -> None:
    with client_for(tiny_models_dir, request_timeout_s=0.001) as c:
        c.app.state.service.scheduler._work_s = 1e-15  # admitted (estimated far inside the deadline), then late
        r = c.post("/api/translate", json={"model": TRANSFORMER, "text": LONG, "beam_size": 4, "max_length": 200})
        assert r.status_code == 504
        assert "ran past its 0.001 s deadline (ATTNSCOPE_REQUEST_TIMEOUT_S)" in r.json()["detail"]


def test_bodies_over_the_limit_get_413(client_for: Any, tiny_models_dir: Path) -> None:
    with client_for(tiny_models_dir, max_body_bytes=2000) as c:
        big = json.dumps({"model": TRANSFORMER, "text": "a " * 2000})
        r = c.post("/api/translate", content=big, headers={"content-type": "application/json"})
        assert r.status_code == 413 and "over the limit of 2000 bytes" in r.json()["detail"]

        def chunks() -> Any:  # no Content-Length: the limit applies as the body streams in
            yield b'{"model": "en-de-transformer", "text": "'
            for _ in range(100):
                yield b"a " * 50
            yield b'"}'

        r = c.post("/api/translate", content=chunks(), headers={"content-type": "application/json"})
        assert r.status_code == 413 and r.json()["detail"].startswith("the request body is over the limit")
        assert c.post("/api/translate", json={"model": TRANSFORMER, "text": "a play"}).status_code == 200


def test_host_allow_list_and_security_headers(client_for: Any, tiny_models_dir: Path) -> None:
    with client_for(tiny_models_dir) as c:
        for path in ("/api/health", "/", "/static/css/app.css", "/nowhere"):
            r = c.get(path)
            assert "script-src 'self'" in r.headers["content-security-policy"]
            assert "frame-ancestors 'none'" in r.headers["content-security-policy"]
            assert r.headers["x-content-type-options"] == "nosniff"
            assert r.headers["referrer-policy"] == "no-referrer"
        r = c.get("/api/health", headers={"host": "rebound.example:8000"})
        assert r.status_code == 400 and "ATTNSCOPE_ALLOWED_HOSTS" in r.json()["detail"]
        assert c.get("/api/health", headers={"host": "127.0.0.1:8000"}).status_code == 200
        assert c.get("/api/health", headers={"host": "[::1]:8000"}).status_code == 200
    with client_for(tiny_models_dir, allowed_hosts=["localhost", "*.example.org"]) as c:
        assert c.get("/api/health", headers={"host": "mt.example.org"}).status_code == 200
        assert c.get("/api/health", headers={"host": "example.org.evil"}).status_code == 400


@pytest.mark.parametrize("precision", [6, 2])
def test_gzip_attention_kinds_and_precision(client: Any, precision: int) -> None:
    body = {"model": TRANSFORMER, "text": "A man is riding a bicycle.", "beam_size": 1, "precision": precision}
    full = client.post("/api/translate", json=body, headers={"accept-encoding": "gzip"})
    assert full.headers["content-encoding"] == "gzip" and len(full.content) > 0
    answer = full.json()  # the client decompressed it
    assert set(answer["attention"]) == {"cross", "encoder_self", "decoder_self"}
    weights = [w for row in answer["attention"]["cross"][0][0] for w in row]
    assert all(round(w, precision) == w for w in weights)
    only_cross = client.post("/api/translate", json={**body, "attention": ["cross"]}).json()
    assert set(only_cross["attention"]) == {"cross"} and only_cross["attention"]["cross"] == answer["attention"]["cross"]
    none = client.post("/api/translate", json={**body, "attention": []}).json()
    assert none["attention"] == {} and none["target_tokens"] == answer["target_tokens"]
    raw = client.post("/api/translate", json=body, headers={"accept-encoding": "identity"})
    assert "content-encoding" not in raw.headers
    assert json.loads(raw.content) == {**answer, "timing_ms": json.loads(raw.content)["timing_ms"]}
    assert len(gzip.compress(raw.content)) < len(raw.content) / 2


def test_gzip_level_is_a_setting(tiny_models_dir: Path, client_for: Any) -> None:
    """Default level 1 (the cheapest: answers are gzipped on every request), through ISA-L's
    igzip; ATTNSCOPE_GZIP_LEVEL 9 goes through zlib and sends the same answer smaller. Each body
    is exactly what that compressor makes of the answer (no timestamp, so it is deterministic)."""
    body = {"model": TRANSFORMER, "text": LONG, "beam_size": 2, "max_length": 60}
    sent: dict[int, tuple[bytes, dict[str, Any]]] = {}
    for level in (1, 9):
        with client_for(tiny_models_dir, **({} if level == 1 else {"gzip_level": 9})) as c:
            with c.stream("POST", "/api/translate", json=body, headers={"accept-encoding": "gzip"}) as r:
                assert r.headers["content-encoding"] == "gzip"
                raw = b"".join(r.iter_raw())
        plain = gzip.decompress(raw)
        assert raw == (igzip.compress(plain, 1, mtime=0) if level == 1 else gzip.compress(plain, 9, mtime=0))
        sent[level] = raw, json.loads(plain)
    assert len(sent[9][0]) < len(sent[1][0])
    assert {**sent[1][1], "timing_ms": 0} == {**sent[9][1], "timing_ms": 0}
