"""The typed request: one frozen value made from the validated body, every field of the body
kept; requests that decode alike share a batch key; the answer is constructed once."""

from __future__ import annotations

from dataclasses import fields, replace
from typing import Any

import pytest
from fastapi.testclient import TestClient

from attnscope.engine.explain import Extras
from attnscope.engine.heads import HeadRef
from attnscope.engine.request import AnswerOptions, Body, ServiceRequest
from attnscope.engine.schemas import (
    AlignRequest,
    BatchTranslateRequest,
    TranslateRequest,
    TranslationResponse,
)

BODIES: list[Body] = [
    TranslateRequest(
        model="m", text="A dog.", beam_size=3, max_length=9, coverage_penalty=0.2, return_beam=True, prefix="Ein",
        protect=False, return_scores=True, alternatives=2, explain=["norm"], alignment="average",
        disable_heads=[HeadRef(kind="cross", layer=0, head=1)], attention=["cross"], precision=3,
    ),  # fmt: skip
    BatchTranslateRequest(model="m", texts=["A dog.", "A cat."], beam_size=2, protect=True, precision=4),
    AlignRequest(model="m", text="A dog.", target="Ein Hund.", return_scores=True, explain=["rollout"]),
]


@pytest.mark.parametrize("body", BODIES, ids=lambda b: type(b).__name__)
def test_every_field_of_the_body_reaches_the_request(body: Body) -> None:
    request = ServiceRequest.of(body)
    values = body.model_dump()
    named = {f.name for f in fields(ServiceRequest)} | {f.name for f in fields(Extras)}
    assert set(values) <= named | {"text", "attention", "precision"}  # no field of the body is dropped
    flat = {**{f.name: getattr(request, f.name) for f in fields(ServiceRequest)}, **vars(request.extras)}
    for name, value in values.items():
        if name in named and name != "disable_heads":
            assert flat[name] == (tuple(value) if isinstance(value, list) else value), name
    assert request.texts == tuple(values.get("texts", [values.get("text")]))
    assert request.batch == isinstance(body, BatchTranslateRequest)
    assert request.answer == AnswerOptions(
        None if body.attention is None else tuple(body.attention), body.precision
    )
    assert [h.model_dump() for h in request.disable_heads] == values["disable_heads"]
    with pytest.raises(AttributeError):
        request.beam_size = 1  # type: ignore[misc]


def test_only_what_changes_the_search_is_in_the_decode_options() -> None:
    base = ServiceRequest.of(BODIES[0])
    answer_only = replace(base, answer=AnswerOptions(None, 6), prefix=None, extras=replace(base.extras, alternatives=0))
    assert base.decode_options(weights=True) == answer_only.decode_options(weights=True)
    assert hash(base.decode_options(weights=True))
    assert base.decode_options(weights=True) != replace(base, beam_size=4).decode_options(weights=True)
    assert base.decode_options(weights=True) != base.decode_options(weights=False)
    assert base.decode_options(weights=True).return_tree and not replace(
        base, extras=replace(base.extras, return_beam=False)
    ).decode_options(weights=True).return_tree


def test_an_answer_is_constructed_once_and_never_patched(
    client: TestClient, model_info: dict[str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(self: TranslationResponse, name: str, value: Any) -> None:
        raise AssertionError(f"answer.{name} set after the answer was built")

    monkeypatch.setattr(TranslationResponse, "__setattr__", refuse)
    for model in model_info:
        body = {
            "model": model, "text": "A dog runs.", "beam_size": 2, "return_beam": True, "return_scores": True,
            "alternatives": 2, "explain": ["norm"], "alignment": "average", "protect": True,
        }  # fmt: skip
        if "cross" not in model_info[model]["attention"]:
            del body["alignment"]
        body["return_beam"] = False
        assert client.post("/api/translate", json=body).status_code == 200
        batch = {"model": model, "texts": ["A dog.", "A cat."], "disable_heads": [{"kind": "decoder_self", "layer": 0, "head": 0}]}
        assert client.post("/api/translate/batch", json=batch).status_code in (200, 422)
        aligned = {"model": model, "text": "A dog.", "target": "Ein Hund.", "return_scores": True}
        assert client.post("/api/align", json=aligned).status_code == 200
