"""Hostile but well-formed requests over real HTTP (issue 35): every one is a 4xx naming the
field or the limit, never a 500, and the server keeps serving afterwards."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

MODEL = "en-de-transformer"
BODIES: dict[str, dict[str, Any]] = {
    "/api/translate": {"model": MODEL, "text": "A man.", "max_length": 6},
    "/api/align": {"model": MODEL, "text": "A man.", "target": "Ein Mann."},
    "/api/translate/batch": {"model": MODEL, "texts": ["A man."], "max_length": 6},
    "/api/attribution": {"model": MODEL, "text": "A man.", "target": "Ein"},
}


def _fields(spec: dict[str, Any], path: str) -> list[str]:
    schema = spec["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]
    name = schema["$ref"].rsplit("/", 1)[-1]
    return sorted(spec["components"]["schemas"][name]["properties"])


@pytest.mark.parametrize("path", sorted(BODIES))
def test_null_in_every_field_is_never_a_500(http: httpx.Client, path: str) -> None:
    """``"prefix": null`` was a 500 (the schema allows null): every field set to null is answered
    (a nullable field takes its default) or refused with a 422 naming that field."""
    spec = http.get("/openapi.json").json()
    for field in _fields(spec, path):
        response = http.post(path, json={**BODIES[path], field: None})
        assert response.status_code in (200, 422), (path, field, response.text)
        if response.status_code == 422:
            assert field in response.json()["detail"], (field, response.text)


def test_prefix_null_is_no_prefix(http: httpx.Client) -> None:
    body = {**BODIES["/api/translate"], "beam_size": 1}
    plain = http.post("/api/translate", json=body)
    nulled = http.post("/api/translate", json={**body, "prefix": None})
    assert nulled.status_code == plain.status_code == 200
    assert nulled.json()["target_tokens"] == plain.json()["target_tokens"]


@pytest.mark.parametrize("depth", [2_000, 100_000])
def test_deeply_nested_json_says_so(http: httpx.Client, depth: int) -> None:
    body = b'{"model": "x", "text": ' + b"[" * depth + b"]" * depth + b"}"
    response = http.post("/api/translate", content=body, headers={"content-type": "application/json"})
    assert response.status_code == 422
    assert "nested too deeply" in response.json()["detail"]
    assert "UTF-8" not in response.json()["detail"]


def test_invalid_utf8_is_still_named(http: httpx.Client) -> None:
    response = http.post("/api/translate", content=b'{"text": "\xff"}', headers={"content-type": "application/json"})
    assert response.status_code == 422 and "UTF-8" in response.json()["detail"]


@pytest.mark.parametrize(
    "host", ["localhost:8300@evil.example", "evil.example", "localhost@evil.example", "localhost:80/x", "localhost:x"]
)
def test_host_check_refuses_userinfo_and_junk(http: httpx.Client, host: str) -> None:
    response = http.get("/api/health", headers={"host": host})
    assert response.status_code == 400, host
    assert "is not allowed" in response.json()["detail"]


@pytest.mark.parametrize("host", ["localhost", "localhost:8300", "127.0.0.1:1", "[::1]:8000"])
def test_host_check_still_allows_local_names(http: httpx.Client, host: str) -> None:
    assert http.get("/api/health", headers={"host": host}).status_code == 200


def test_samples_422_matches_its_declared_schema(http: httpx.Client) -> None:
    spec = http.get("/openapi.json").json()
    declared = spec["paths"]["/api/vision/samples"]["get"]["responses"]["422"]["content"]["application/json"]
    assert declared["schema"]["$ref"].endswith("/ErrorResponse")
    response = http.get("/api/vision/samples", params={"dataset": "nope"})
    assert response.status_code == 422
    body = response.json()
    assert isinstance(body["detail"], str) and "dataset" in body["detail"]
    assert [e["field"] for e in body["errors"]] == ["dataset"]


@pytest.mark.parametrize("text", ["\u200b", "\x01\x02\x7f"])
def test_text_without_tokens_is_a_422_naming_it(http: httpx.Client, text: str) -> None:
    """Without byte fallback, invisible characters give no tokens: 422, as docs/api.md says. (A
    byte-fallback model spells them in byte pieces and translates them: test_words.py holds
    that any non-blank text translates there.)"""
    for path, body in (("/api/translate", {"text": text}), ("/api/translate/batch", {"texts": ["A man.", text]})):
        response = http.post(path, json={"model": MODEL, **body, "max_length": 5})
        assert response.status_code == 422, (path, response.text)
        assert "no tokens" in response.json()["detail"]
