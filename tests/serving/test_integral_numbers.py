"""Issue 45.8: an integer field takes ``3.0`` (JSON has one number type; the schema's
``integer`` includes it), and still refuses ``3.5`` and ``"3"``."""

from __future__ import annotations

from typing import Any

BODY = {"model": "en-de-transformer", "text": "A man is riding a bicycle.", "max_length": 12}


def test_integral_floats_are_integers(client: Any) -> None:
    plain = client.post("/api/translate", json={**BODY, "beam_size": 2})
    floats = client.post("/api/translate", json={**BODY, "beam_size": 2.0, "max_length": 12.0, "precision": 3.0})
    assert plain.status_code == floats.status_code == 200
    assert floats.json()["target_tokens"] == plain.json()["target_tokens"]
    heads = client.post("/api/translate", json={**BODY, "disable_heads": [{"kind": "cross", "layer": 0.0, "head": 1.0}]})
    assert heads.status_code == 200, heads.text


def test_other_numbers_are_still_refused(client: Any) -> None:
    for value in (2.5, "2", True):
        r = client.post("/api/translate", json={**BODY, "beam_size": value})
        assert r.status_code == 422 and r.json()["errors"][0]["field"] == "beam_size", (value, r.text)
