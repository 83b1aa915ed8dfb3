"""The OpenAPI document: valid, complete, and its examples work against the running app."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from openapi_spec_validator import validate

from attnscope.engine.schemas import AlignRequest, BatchTranslateRequest, TranslateRequest

ENDPOINTS = {
    ("get", "/api/health"),
    ("get", "/api/models"),
    ("post", "/api/translate"),
    ("post", "/api/align"),
    ("post", "/api/translate/batch"),
}


@pytest.fixture(scope="module")
def spec(client: TestClient) -> dict[str, Any]:
    r = client.get("/openapi.json")
    assert r.status_code == 200
    return r.json()


def test_schema_validates(spec: dict[str, Any]) -> None:
    validate(spec)


def test_every_endpoint_is_documented(spec: dict[str, Any]) -> None:
    documented = {(method, path) for path, item in spec["paths"].items() for method in item}
    assert ENDPOINTS <= documented
    for method, path in ENDPOINTS:
        operation = spec["paths"][path][method]
        assert operation.get("summary") and "200" in operation["responses"]
        if method == "post":
            assert {"404", "422"} <= set(operation["responses"])


def test_every_reference_resolves(spec: dict[str, Any]) -> None:
    def refs(node: Any) -> list[str]:
        if isinstance(node, dict):
            own = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
            return own + [r for v in node.values() for r in refs(v)]
        if isinstance(node, list):
            return [r for v in node for r in refs(v)]
        return []

    schemas = spec["components"]["schemas"]
    for ref in refs(spec):
        assert ref.startswith("#/components/schemas/") and ref.rsplit("/", 1)[1] in schemas, ref


def test_examples_are_valid_requests_that_work(spec: dict[str, Any], client: TestClient) -> None:
    schemas = spec["components"]["schemas"]
    for name, model, path in [
        ("TranslateRequest", TranslateRequest, "/api/translate"),
        ("BatchTranslateRequest", BatchTranslateRequest, "/api/translate/batch"),
        ("AlignRequest", AlignRequest, "/api/align"),
    ]:
        examples = schemas[name]["examples"]
        assert examples and schemas[name]["additionalProperties"] is False
        for example in examples:
            model.model_validate(example)
            r = client.post(path, json=example)
            assert r.status_code == 200, (path, r.text)


def test_docs_page_is_served(client: TestClient) -> None:
    r = client.get("/docs")
    assert r.status_code == 200 and "swagger" in r.text.lower()
