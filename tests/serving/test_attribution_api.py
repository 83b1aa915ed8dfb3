"""POST /api/attribution over the app: shapes follow the token lists, rows sum to one,
integrated gradients are complete, one correlation per head, and clear 4xx errors."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

TEXT = "A man is riding a bicycle."


def attribution(client: TestClient, **body: Any) -> dict[str, Any]:
    response = client.post("/api/attribution", json=body)
    assert response.status_code == 200, response.text
    return dict(response.json())


@pytest.mark.parametrize(("model", "layers", "heads"), [("en-de-transformer", 2, 2), ("en-de-rnn-additive", 1, 1)])
def test_attribution_of_a_translation(client: TestClient, model: str, layers: int, heads: int) -> None:
    out = attribution(client, model=model, text=TEXT, beam_size=1, steps=32)
    rows, cols = len(out["target_tokens"]), len(out["source_tokens"])
    for method in ("input_x_gradient", "integrated_gradients"):
        assert len(out[method]) == rows and all(len(r) == cols for r in out[method])
        assert all(abs(sum(r) - 1.0) < 1e-4 for r in out[method])
        grid = out["correlation"][method]
        assert len(grid) == layers and all(len(r) == heads for r in grid)
        assert all(v is None or -1.0 <= v <= 1.0 for r in grid for v in r)
    assert out["completeness_gap"] < 0.05
    assert len(out["cross_attention"]) == layers


def test_attribution_of_a_given_target_and_a_model_without_attention(client: TestClient) -> None:
    out = attribution(client, model="en-de-transformer", text=TEXT, target="Ein Mann fährt Fahrrad.", steps=4)
    assert out["translation"] == "Ein Mann fährt Fahrrad."
    none = attribution(client, model="en-de-rnn-none", text=TEXT, target="Ein Mann.", steps=4)
    assert none["correlation"] is None and none["cross_attention"] is None
    assert len(none["integrated_gradients"]) == len(none["target_tokens"])


@pytest.mark.parametrize(
    ("body", "status", "field"),
    [
        ({"model": "en-de-transformer", "text": TEXT, "steps": 0}, 422, "steps"),
        ({"model": "en-de-transformer", "text": TEXT, "steps": 1000}, 422, "steps"),
        ({"model": "en-de-transformer", "text": "   "}, 422, "text"),
        ({"model": "en-de-transformer", "text": TEXT, "method": "lime"}, 422, "method"),
        ({"model": "nope", "text": TEXT}, 404, None),
    ],
)
def test_bad_requests(client: TestClient, body: dict[str, Any], status: int, field: str | None) -> None:
    response = client.post("/api/attribution", json=body)
    assert response.status_code == status
    if field:
        assert [e["field"] for e in response.json()["errors"]] == [field]


@pytest.mark.parametrize("target", ["Ein Mann fährt Fahrrad.", None])
def test_an_attribution_over_the_cost_budget_is_refused_naming_the_steps_that_fit(
    tiny_models_dir: Path, client_for: Any, target: str | None
) -> None:
    """target tokens × (steps + 1) × (source + target tokens) over ATTNSCOPE_MAX_ATTRIBUTION_COST:
    a 422 (for a translation, once its length is known) whose ``steps ≤ k`` gets under it."""
    with client_for(tiny_models_dir, max_attribution_cost=20_000) as c:
        body = {"model": "en-de-transformer", "text": TEXT, "beam_size": 1, "steps": 128}
        if target is not None:
            body["target"] = target
        r = c.post("/api/attribution", json=body)
        assert r.status_code == 422, r.text
        detail = r.json()["detail"]
        assert "the limit is 20,000 (ATTNSCOPE_MAX_ATTRIBUTION_COST)" in detail and r.json()["errors"][0]["type"] == "cost_limit"
        steps = int(re.search(r"steps ≤ (\d+)", detail).group(1))  # type: ignore[union-attr]
        assert 1 <= steps < 128
        assert c.post("/api/attribution", json={**body, "steps": steps}).status_code == 200
        assert c.post("/api/attribution", json={**body, "steps": steps + 1}).status_code == 422
