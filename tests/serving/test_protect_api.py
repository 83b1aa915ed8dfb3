"""The API's ``protect`` option, on the shipped en->de Transformer: numbers and emoji come back
verbatim where attention puts them, ``protected`` says where, and the option's limits are 422s."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

MODEL = "en-de-transformer"
TEXT = "The bus number 42 leaves at 7:15. 🚌"


@pytest.fixture(scope="module")
def shipped_client(tmp_path_factory: pytest.TempPathFactory, client_for: Any) -> Iterator[TestClient]:
    root = tmp_path_factory.mktemp("one-model")
    shutil.copytree(Path(__file__).parents[2] / "models" / MODEL, root / MODEL)
    with client_for(root) as test_client:
        yield test_client


def test_protect_returns_the_spans_verbatim_with_their_offsets(shipped_client: TestClient) -> None:
    r = shipped_client.post("/api/translate", json={"model": MODEL, "text": TEXT, "beam_size": 5, "protect": True})
    assert r.status_code == 200, r.text
    body = r.json()
    spans = body["protected"]
    assert [(s["text"], s["kind"]) for s in spans] == [("42", "number"), ("7:15", "number"), ("🚌", "emoji")]
    for s in spans:
        assert body["translation"][s["target_start"] : s["target_end"]] == s["text"]
        assert TEXT[s["source_start"] : s["source_end"]] == s["text"]
        assert s["placed"] in ("replaced", "beside", "start", "end")
    cross = body["attention"]["cross"]
    assert len(cross[0][0]) == len(body["target_tokens"]) and len(cross[0][0][0]) == len(body["source_tokens"])
    # The source tokens are those of the text sent, not of the masked text the model translated.
    assert "".join(body["source_tokens"]).count("4") == 1


def test_without_protect_the_field_is_null_and_batches_take_it_per_text(shipped_client: TestClient) -> None:
    # protect is on by default for this model since issue 30: "without" now says so explicitly
    r = shipped_client.post("/api/translate", json={"model": MODEL, "text": TEXT, "protect": False})
    assert r.status_code == 200 and r.json()["protected"] is None
    texts = [TEXT, "A man is riding a bicycle."]
    r = shipped_client.post("/api/translate/batch", json={"model": MODEL, "texts": texts, "protect": True})
    assert r.status_code == 200, r.text
    first, second = r.json()
    assert {s["text"] for s in first["protected"]} == {"42", "7:15", "🚌"}
    assert second["protected"] == []
    plain = shipped_client.post("/api/translate", json={"model": MODEL, "text": texts[1], "protect": False}).json()
    assert second["translation"] == plain["translation"]


@pytest.mark.parametrize(("extra", "field"), [({"prefix": "Der Bus"}, "prefix"), ({"return_beam": True}, "return_beam")])
def test_protect_with_a_searched_only_option_is_a_clear_422(shipped_client: TestClient, extra: dict, field: str) -> None:
    r = shipped_client.post("/api/translate", json={"model": MODEL, "text": TEXT, "protect": True, **extra})
    assert r.status_code == 422, r.text
    assert "protect" in r.json()["detail"] and field in r.json()["detail"]


def test_a_model_without_cross_attention_translates_as_usual(client: TestClient) -> None:
    r = client.post("/api/translate", json={"model": "en-de-rnn-none", "text": "A man with 2 dogs.", "protect": True})
    assert r.status_code == 200, r.text
    assert r.json()["protected"] == []


@pytest.mark.parametrize("text", ["😀", " 🍕 🍕 ", "42", "Brzęczyszczykiewicz", "https://example.com"])
def test_a_text_that_is_all_spans_is_copied_through(shipped_client: TestClient, text: str) -> None:
    """Nothing would be left to translate once masked, so the text itself is the output (issue 30:
    it used to be translated as given, and the model hallucinated a sentence about a policeman)."""
    r = shipped_client.post("/api/translate", json={"model": MODEL, "text": text, "protect": True})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["translation"] == text.strip()
    assert body["protected"] and all(s["placed"] == "copied" for s in body["protected"])
    for s in body["protected"]:
        assert body["translation"][s["target_start"] : s["target_end"]] == s["text"] == text[s["source_start"] : s["source_end"]]
    cross = body["attention"]["cross"]
    assert len(cross[0][0]) == len(body["target_tokens"]) and len(cross[0][0][0]) == len(body["source_tokens"])
