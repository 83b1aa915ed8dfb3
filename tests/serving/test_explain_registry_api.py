"""An explanation method registered from outside the package (tests/explain/head_mean_method.py,
one module) is served like the shipped ones with no edit to serving code: listed by
/api/explain-methods, validated, computed into answers, priced by admission; and the catalog
serves the shipped methods' papers and families."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from attnscope.explain import registry
from attnscope.explain.registry import unregister
from tests.serving.conftest import make_client

TEXT = "A man rides a horse along the beach."


@pytest.fixture(scope="module")
def method_client(tiny_models_dir: Path) -> Iterator[TestClient]:
    import tests.explain.head_mean_method  # noqa: F401  (registers head_mean)

    try:
        with make_client(tiny_models_dir, max_explain_cost=60_000) as client:
            yield client
    finally:
        unregister("head_mean")


def test_the_catalog_lists_the_shipped_methods_with_papers_and_families(client: TestClient) -> None:
    data = client.get("/api/explain-methods").json()["methods"]
    by_name = {m["name"]: m for m in data}
    assert list(by_name)[:4] == ["norm", "rollout", "value_zeroing", "alti"]
    assert by_name["alti"]["label"] == "ALTI+" and by_name["alti"]["url"].startswith("https://")
    norm = by_name["norm"]["families"]
    assert norm == {"rnn": None, "self_attentive_rnn": None, "transformer": None, "decoder_only": None}
    # Decoder-only LLMs: every method runs (docs/llm.md)
    assert by_name["rollout"]["families"]["decoder_only"] is None
    assert by_name["value_zeroing"]["families"]["decoder_only"] is None
    assert by_name["alti"]["families"]["decoder_only"] is None
    assert "residual" in by_name["rollout"]["families"]["rnn"]
    assert by_name["norm"]["fields"] == ["norm", "norm_values"] and by_name["norm"]["draw"]["per"] == "head"
    assert by_name["alti"]["draw"]["parts"] == {"cross": "source", "decoder_self": "target", "encoder_self": "encoder"}


def test_the_openapi_document_lists_the_methods(client: TestClient) -> None:
    doc = client.get("/openapi.json").json()
    assert "/api/explain-methods" in doc["paths"]
    explain = doc["components"]["schemas"]["TranslateRequest"]["properties"]["explain"]
    assert explain["items"]["enum"] == list(registry.names())


def test_an_unknown_method_is_refused_naming_the_registered_ones(method_client: TestClient) -> None:
    r = method_client.post("/api/translate", json={"model": "en-de-transformer", "text": TEXT, "explain": ["lime"]})
    assert r.status_code == 422
    assert "explain" in r.json()["errors"][0]["loc"] and "head_mean" in r.text and "alti" in r.text


def test_a_registered_method_is_listed(method_client: TestClient) -> None:
    data = {m["name"]: m for m in method_client.get("/api/explain-methods").json()["methods"]}
    assert list(data)[-1] == "head_mean"  # after the shipped ones
    assert data["head_mean"]["families"]["transformer"] is None
    assert data["head_mean"]["families"]["rnn"] == "an RNN has one head: its mean is its weights"


def test_a_registered_method_is_computed_into_the_answer(method_client: TestClient) -> None:
    body = {"model": "en-de-transformer", "text": "A dog.", "max_length": 3, "explain": ["head_mean", "norm"]}
    r = method_client.post("/api/translate", json=body)
    assert r.status_code == 200, r.text
    answer = r.json()
    found = answer["explanations"]["head_mean"]
    for kind, weights in answer["attention"].items():  # [layer][head][query][key], averaged here by hand
        for layer, heads in enumerate(weights):
            for q, row in enumerate(found[kind][layer]):
                mean = [sum(h[q][k] for h in heads) / len(heads) for k in range(len(row))]
                assert row == pytest.approx(mean, abs=1e-5)
    assert answer["explanations"]["norm"] is not None and answer["explanations"]["rollout"] is None
    rnn = method_client.post("/api/translate", json={**body, "model": "en-de-rnn-additive"}).json()
    assert rnn["explanations"]["unavailable"] == {"head_mean": "an RNN has one head: its mean is its weights"}


def test_admission_prices_a_registered_method(method_client: TestClient) -> None:
    body = {"model": "en-de-transformer", "text": TEXT, "target": TEXT, "explain": ["head_mean"]}
    r = method_client.post("/api/align", json=body)
    assert r.status_code == 422, r.text
    assert "ATTNSCOPE_MAX_EXPLAIN_COST" in r.text and "leave out head_mean" in r.text
    assert r.json()["errors"][0]["loc"] == ["body", "explain"]
    cheap = method_client.post("/api/align", json={**body, "explain": ["rollout"]})
    assert cheap.status_code == 200, cheap.text
    rnn = method_client.post("/api/align", json={**body, "model": "en-de-rnn-additive"})
    assert rnn.status_code == 200, rnn.text  # a family the method does not run on is not charged for it


def test_the_head_roles_catalog_names_every_role_with_its_threshold(client: TestClient) -> None:
    from attnscope.analysis.roles import ROLES, SINK

    roles = client.get("/api/head-roles").json()["roles"]
    assert [r["name"] for r in roles] == list(ROLES)
    by_name = {r["name"]: r for r in roles}
    assert by_name["positional-previous"]["short"] == "prev" and f"{SINK:.0%}" in by_name["sink"]["help"]
    assert all(r["short"] and r["help"] for r in roles)
