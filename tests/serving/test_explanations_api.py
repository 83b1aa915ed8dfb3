"""`explain` on /api/translate and /api/align: the shapes of every method for every family and
attention kind, the methods a family has no definition for, and admission control."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from tests.serving.conftest import make_client

ALL = ["norm", "rollout", "alti", "value_zeroing"]
MODELS = ["en-de-transformer", "en-de-rnn-additive", "en-de-rnn-none", "en-de-self-attentive"]


def shape(value: Any) -> tuple[int, ...]:
    return tuple(np.asarray(value).shape)


def check_explanations(answer: dict[str, Any], info: dict[str, Any]) -> None:
    """Each method's kinds and shapes against the answer's own attention and token lists."""
    found = answer["explanations"]
    src, tgt, dec_in = (len(answer[k]) for k in ("source_tokens", "target_tokens", "decoder_input_tokens"))
    keys = {"cross": (tgt, src), "encoder_self": (src, src), "decoder_self": (tgt, dec_in)}
    if info["architecture"] == "transformer":
        assert found["unavailable"] == {}
        assert set(found["norm"]) == set(answer["attention"]) == set(keys)
        for kind, matrix in answer["attention"].items():
            assert shape(found["norm"][kind]) == shape(matrix)
            assert shape(found["norm_values"][kind]) == (*shape(matrix)[:2], shape(matrix)[3])
            layers = shape(matrix)[0]
            for method in ("rollout", "value_zeroing"):
                assert shape(found[method][kind]) == (layers, *keys[kind])
                sums = np.asarray(found[method][kind]).sum(-1)
                assert np.all((np.abs(sums - 1) < 1e-3) | (sums == 0)), (method, kind)
        alti = found["alti"]
        layers = shape(answer["attention"]["cross"])[0]
        assert shape(alti["source"]) == (layers, tgt, src) and shape(alti["target"]) == (layers, tgt, dec_in)
        assert shape(alti["encoder"]) == (shape(answer["attention"]["encoder_self"])[0], src, src)
        total = np.asarray(alti["source"]).sum(-1) + np.asarray(alti["target"]).sum(-1)
        np.testing.assert_allclose(total, 1.0, atol=1e-3)
        np.testing.assert_allclose(alti["source_share"], np.asarray(alti["source"])[-1].sum(-1), atol=1e-3)
        return
    assert found["rollout"] is None and found["alti"] is None and found["value_zeroing"] is None
    assert set(found["unavailable"]) >= {"rollout", "alti", "value_zeroing"}
    if not answer["attention"]:
        assert found["norm"] is None and "no attention" in found["unavailable"]["norm"]
        return
    assert set(found["norm"]) == set(answer["attention"])
    for kind, matrix in answer["attention"].items():
        assert shape(found["norm"][kind]) == shape(matrix) == (1, 1, *keys[kind])


@pytest.mark.parametrize("model", MODELS)
def test_translate_explains_every_family_and_kind(client: TestClient, model_info: dict[str, Any], model: str) -> None:
    r = client.post("/api/translate", json={"model": model, "text": "A man rides a horse.", "beam_size": 2, "explain": ALL})
    assert r.status_code == 200, r.text
    check_explanations(r.json(), model_info[model])


@pytest.mark.parametrize("model", MODELS)
def test_align_explains_the_given_target(client: TestClient, model_info: dict[str, Any], model: str) -> None:
    body = {"model": model, "text": "A dog runs.", "target": "Ein Hund läuft.", "explain": ALL, "precision": 4}
    r = client.post("/api/align", json=body)
    assert r.status_code == 200, r.text
    check_explanations(r.json(), model_info[model])


def test_without_explain_there_are_no_explanations(client: TestClient) -> None:
    r = client.post("/api/align", json={"model": "en-de-transformer", "text": "A dog runs.", "target": "Ein Hund."})
    assert r.status_code == 200 and r.json()["explanations"] is None


def test_only_the_methods_asked_for_come_back(client: TestClient) -> None:
    body = {"model": "en-de-transformer", "text": "A dog runs.", "target": "Ein Hund.", "explain": ["alti"]}
    found = client.post("/api/align", json=body).json()["explanations"]
    assert found["alti"] is not None and found["norm"] is None and found["rollout"] is None


def test_explanations_follow_switched_off_heads(client: TestClient) -> None:
    heads = [{"kind": "cross", "layer": layer, "head": head} for layer in range(2) for head in range(2)]
    body = {"model": "en-de-transformer", "text": "A dog runs.", "target": "Ein Hund.", "explain": ["alti", "norm"], "disable_heads": heads}
    found = client.post("/api/align", json=body).json()["explanations"]
    assert max(found["alti"]["source_share"]) == 0.0
    assert np.asarray(found["norm"]["cross"]).max() == 0.0


def test_an_unknown_method_is_a_422_naming_the_field(client: TestClient) -> None:
    r = client.post("/api/translate", json={"model": "en-de-transformer", "text": "A dog.", "explain": ["lime"]})
    assert r.status_code == 422
    assert "explain[0]" in r.text and "value_zeroing" in r.text  # the field and the choices


def test_admission_charges_for_explanations(tiny_models_dir: Path) -> None:
    text = "A man rides a horse along the beach while two dogs play in the snow."
    with make_client(tiny_models_dir, max_explain_cost=3_000) as client:
        body = {"model": "en-de-transformer", "text": text, "target": text, "explain": ["value_zeroing"]}
        r = client.post("/api/align", json=body)
        assert r.status_code == 422, r.text
        error = r.json()
        assert "ATTNSCOPE_MAX_EXPLAIN_COST" in r.text and "value_zeroing" in r.text
        assert error["errors"][0]["loc"] == ["body", "explain"]
        cheap = client.post("/api/align", json={**body, "explain": ["norm"]})
        assert cheap.status_code == 200, cheap.text
        long = client.post("/api/translate", json={"model": "en-de-transformer", "text": text, "explain": ["alti"]})
        assert long.status_code == 422
