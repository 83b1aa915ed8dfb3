"""Bad input gets a clear answer naming the field, and the server keeps serving."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from fastapi.testclient import TestClient

MODEL = "en-de-rnn-additive"
OK = {"model": MODEL, "text": "A man is riding a bicycle."}


def errors_of(r: Any) -> list[str]:
    body = r.json()
    assert isinstance(body["detail"], str) and body["detail"]
    return [e["field"] for e in body["errors"]]


def test_unknown_model_is_404_naming_the_available_ids(client: TestClient) -> None:
    for path, body in [
        ("/api/translate", {**OK, "model": "en-xx-nothing"}),
        ("/api/align", {**OK, "model": "en-xx-nothing", "target": "Hallo"}),
        ("/api/translate/batch", {"model": "en-xx-nothing", "texts": ["Hello"]}),
    ]:
        r = client.post(path, json=body)
        assert r.status_code == 404
        assert "en-xx-nothing" in r.json()["detail"] and MODEL in r.json()["detail"]
        assert MODEL in r.json()["available"]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"text": ""}, "text"),
        ({"text": " \t\n "}, "text"),
        ({"text": "\u3000\u2003"}, "text"),  # ideographic and em spaces
        ({"text": "\u200b\u200b"}, "text"),  # zero-width spaces: no tokens
        ({"text": "a" * 1001}, "text"),  # over max_chars
        ({"text": "a b " * 150}, "text"),  # 600 characters, 300 tokens: over max_tokens
        ({"text": 42}, "text"),
        ({"text": None}, "text"),
        ({"text": ["a", "b"]}, "text"),
        ({"model": ""}, "model"),
        ({"model": 3}, "model"),
        ({"beam_size": 0}, "beam_size"),
        ({"beam_size": 17}, "beam_size"),
        ({"beam_size": -1}, "beam_size"),
        ({"beam_size": "5"}, "beam_size"),
        ({"beam_size": 2.5}, "beam_size"),
        ({"beam_size": True}, "beam_size"),
        ({"max_length": 0}, "max_length"),
        ({"max_length": 100000}, "max_length"),
        ({"temperature": 0.7}, "temperature"),
    ],
)
def test_translate_rejects(client: TestClient, change: dict[str, Any], field: str) -> None:
    r = client.post("/api/translate", json={**OK, **change})
    assert r.status_code == 422, r.text
    assert errors_of(r) == [field]
    assert r.json()["detail"].startswith(f"{field}: ")


def test_missing_fields_are_named(client: TestClient) -> None:
    r = client.post("/api/translate", json={})
    assert r.status_code == 422 and sorted(errors_of(r)) == ["model", "text"]
    r = client.post("/api/align", json=OK)
    assert r.status_code == 422 and errors_of(r) == ["target"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"model": MODEL, "texts": []}, "texts"),
        ({"model": MODEL, "texts": ["ok"] * 33}, "texts"),  # over max_batch
        ({"model": MODEL, "texts": "not a list"}, "texts"),
        ({"model": MODEL, "texts": ["fine", "  "]}, "texts[1]"),
        ({"model": MODEL, "texts": ["fine", "x" * 1001]}, "texts[1]"),
        ({"model": MODEL, "texts": ["fine", 7]}, "texts[1]"),
        ({"model": MODEL, "texts": ["fine"], "beam_size": 99}, "beam_size"),
        ({"model": MODEL, "texts": ["fine"], "text": "extra"}, "text"),
    ],
)
def test_batch_rejects(client: TestClient, body: dict[str, Any], field: str) -> None:
    r = client.post("/api/translate/batch", json=body)
    assert r.status_code == 422, r.text
    assert errors_of(r) == [field]


@pytest.mark.parametrize(
    ("change", "field"),
    [({"text": " "}, "text"), ({"target": "a b " * 150}, "target"), ({"target": 1}, "target"), ({"beam_size": 2}, "beam_size")],
)
def test_align_rejects(client: TestClient, change: dict[str, Any], field: str) -> None:
    r = client.post("/api/align", json={**OK, "target": "Ein Mann.", **change})
    assert r.status_code == 422, r.text
    assert errors_of(r) == [field]


@pytest.mark.parametrize(
    "raw",
    [
        b'{"model": "en-de-rnn-additive", "text": ',  # truncated
        b"{'model': 'en-de-rnn-additive'}",  # not JSON
        b'{"model": "en-de-rnn-additive", "text": "\xff\xfe"}',  # not UTF-8
        b"",
        b"[1, 2]",
        b'"just a string"',
    ],
)
def test_malformed_json_is_422(client: TestClient, raw: bytes) -> None:
    r = client.post("/api/translate", content=raw, headers={"content-type": "application/json"})
    assert r.status_code == 422, r.text
    assert errors_of(r) == ["body"]


def test_form_encoded_body_says_to_send_json(client: TestClient) -> None:
    r = client.post("/api/translate", content=b"model=x&text=y", headers={"content-type": "application/x-www-form-urlencoded"})
    assert r.status_code == 422 and "application/json" in r.json()["detail"]


def test_lone_surrogate_is_422(client: TestClient) -> None:
    raw = b'{"model": "en-de-rnn-additive", "text": "abc \\ud800 def"}'
    r = client.post("/api/translate", content=raw, headers={"content-type": "application/json"})
    assert r.status_code == 422 and errors_of(r) == ["text"]
    assert "surrogate" in r.json()["detail"]


UNICODE = [
    "Ein Hund 🐕 spielt 👨‍👩‍👧‍👦 im Schnee ❄️",  # emoji, ZWJ sequences, variation selector
    "שלום עולם, مرحبا بالعالم",  # right-to-left scripts
    "e\u0301 n\u0303 a\u030a\u0323",  # combining marks
    "\u202eevil\u202c \u200fRTL mark",  # bidi controls
    "tab\there\x07bell\x1bescape",  # control characters
    "nul\x00inside",  # NUL
    "\x00",  # nothing but NUL
    "\ufeffBOM first",
    "一个男人在骑自行车。",
    "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝕄𝕒𝕥𝕙",  # astral plane
]


@pytest.mark.parametrize("text", UNICODE)
def test_unicode_is_accepted_or_rejected_cleanly(client: TestClient, model_info: dict[str, Any], check: Any, text: str) -> None:
    r = client.post("/api/translate", json={**OK, "text": text, "beam_size": 2})
    assert r.status_code in (200, 422), r.text
    if r.status_code == 200:
        check(r.json(), model_info[MODEL])
    else:
        assert errors_of(r) == ["text"]
    r = client.post("/api/align", json={**OK, "target": text})
    assert r.status_code in (200, 422), r.text


def test_unknown_route_and_wrong_method_answer_json(client: TestClient) -> None:
    assert client.get("/api/nothing-here").json() == {"detail": "Not Found"}
    r = client.get("/api/translate")
    assert r.status_code == 405 and r.json() == {"detail": "Method Not Allowed"}


def test_unexpected_failure_is_a_logged_json_500(
    client: TestClient, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    service = client.app.state.service  # type: ignore[attr-defined]
    served = service.get(MODEL)

    def explode(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("simulated CUDA out of memory")

    monkeypatch.setattr(served.translator, "translate", explode)
    with caplog.at_level(logging.ERROR, logger="attnscope.serving.errors"):
        r = client.post("/api/translate", json=OK)
    assert r.status_code == 500
    assert r.headers["content-type"] == "application/json"
    assert r.json() == {"detail": "internal server error (RuntimeError); see the server log"}
    assert "simulated CUDA out of memory" in caplog.text and "/api/translate" in caplog.text
    monkeypatch.undo()
    assert client.post("/api/translate", json=OK).status_code == 200  # still serving
