"""The in-process result is the server's answer: ``to_dict()`` equals the REST JSON for the
same request, over real HTTP, for every family, greedy and beam, with explanations and the beam
tree, for align and batch; and the client's result is that same JSON too."""

from __future__ import annotations

from typing import Any

import httpx
import numpy as np
import pytest

import attnscope
from attnscope.api.local import LocalModel
from tests.api.conftest import FAMILIES

TEXT = "A man is riding a bicycle."
TARGET = "Ein Mann fährt Fahrrad."


def same(local: dict[str, Any], remote: Any) -> None:
    """Equal but for ``timing_ms`` (each side's own clock)."""
    answers = remote if isinstance(remote, list) else [remote]
    mine = local if isinstance(local, list) else [local]
    assert len(mine) == len(answers)
    for a, b in zip(mine, answers, strict=True):
        assert isinstance(a.pop("timing_ms"), float) and isinstance(b.pop("timing_ms"), float)
        assert a == b


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("beam_size", [1, 4])
def test_translate_equals_rest(local_models: dict[str, LocalModel], http: httpx.Client, family: str, beam_size: int) -> None:
    options: dict[str, Any] = {"beam_size": beam_size, "max_length": 12, "return_beam": beam_size > 1, "alternatives": 2}
    result = local_models[family].translate(TEXT, **options)
    answer = http.post("/api/translate", json={"model": family, "text": TEXT, **options})
    assert answer.status_code == 200, answer.text
    same(result.to_dict(), answer.json())
    # the arrays are the JSON's numbers, in the one format [layers, heads, query, key]
    for kind, weights in result.attention.items():
        queries, keys = result.axes(kind)
        assert weights.shape[2:] == (len(queries), len(keys))
        np.testing.assert_array_equal(weights, np.asarray(answer.json()["attention"][kind]))
    assert (result.beam is not None) == (beam_size > 1)


@pytest.mark.parametrize("family", FAMILIES)
def test_explain_and_align_equal_rest(local_models: dict[str, LocalModel], http: httpx.Client, family: str) -> None:
    methods = ["norm", "rollout", "alti", "value_zeroing"]
    explained = local_models[family].explain(TEXT, methods=methods, beam_size=2, max_length=8)
    answer = http.post("/api/translate", json={"model": family, "text": TEXT, "beam_size": 2, "max_length": 8, "explain": methods})
    assert answer.status_code == 200, answer.text
    same(explained.to_dict(), answer.json())
    assert explained.explanations is not None
    aligned = local_models[family].align(TEXT, TARGET, alignment="average" if family != "en-de-rnn-none" else None)
    body = {"model": family, "text": TEXT, "target": TARGET}
    if family != "en-de-rnn-none":
        body["alignment"] = "average"
    answer = http.post("/api/align", json=body)
    assert answer.status_code == 200, answer.text
    same(aligned.to_dict(), answer.json())
    assert aligned.text == TARGET


def test_batch_and_heads_off_equal_rest(local_models: dict[str, LocalModel], http: httpx.Client) -> None:
    texts = ["A dog runs.", "Two men play in the snow."]
    heads_off = [("cross", 0, 1)]  # a tuple is accepted for {"kind", "layer", "head"}
    results = local_models["en-de-transformer"].translate_batch(texts, beam_size=2, max_length=10, disable_heads=heads_off)
    answer = http.post(
        "/api/translate/batch",
        json={"model": "en-de-transformer", "texts": texts, "beam_size": 2, "max_length": 10,
              "disable_heads": [{"kind": "cross", "layer": 0, "head": 1}]},
    )  # fmt: skip
    assert answer.status_code == 200, answer.text
    same([r.to_dict() for r in results], answer.json())
    assert [r.source_text for r in results] == texts
    assert all(r["disabled_heads"] == [{"kind": "cross", "layer": 0, "head": 1}] for r in results)


def test_client_results_are_the_server_json(local_models: dict[str, LocalModel], api_server: str, http: httpx.Client) -> None:
    remote = attnscope.Client(api_server).load("en-de-transformer")
    local = local_models["en-de-transformer"]
    options = {"beam_size": 3, "max_length": 10, "attention": ["cross"], "precision": 3}
    got = remote.translate(TEXT, **options)
    same(got.to_dict(), http.post("/api/translate", json={"model": "en-de-transformer", "text": TEXT, **options}).json())
    same(got.to_dict(), local.translate(TEXT, **options).to_dict())
    assert got.kinds == ["cross"] and remote.info["id"] == local.info["id"] == "en-de-transformer"
    assert local.info["heads"] == got.attention["cross"].shape[1]
    # the other methods: the same results through either door
    same(remote.align(TEXT, TARGET, explain=["rollout"]).to_dict(), local.align(TEXT, TARGET, explain=["rollout"]).to_dict())
    texts = ["A dog runs.", "A cat sleeps."]
    same([r.to_dict() for r in remote.translate_batch(texts, beam_size=1, max_length=6)],
         [r.to_dict() for r in local.translate_batch(texts, beam_size=1, max_length=6)])  # fmt: skip
    explained = remote.explain(TEXT, methods=["norm"], beam_size=1, max_length=6)
    assert explained.explanation("norm").shape == explained.attention["cross"].shape


def test_attribution_equals_rest(local_models: dict[str, LocalModel], api_server: str) -> None:
    remote = attnscope.Client(api_server).load("en-de-rnn-additive")
    mine = local_models["en-de-rnn-additive"].attribute(TEXT, target=TARGET, steps=4)
    theirs = remote.attribute(TEXT, target=TARGET, steps=4)
    assert mine.to_dict() == theirs.to_dict()
    rows = mine.integrated_gradients.sum(axis=1)
    np.testing.assert_allclose(rows, 1.0, atol=1e-4)
    assert mine.cross_attention is not None and mine.cross_attention.shape[2:] == mine.integrated_gradients.shape
