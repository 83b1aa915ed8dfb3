"""`contrast` on /api/attribution: why the model wrote its token rather than a foil."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient


@pytest.mark.parametrize("model", ["en-de-transformer", "en-de-rnn-additive", "en-de-rnn-none"])
def test_contrastive_attribution_of_a_given_target(client: TestClient, model: str) -> None:
    body = {"model": model, "text": "A dog runs.", "target": "Ein Hund läuft.", "steps": 8}
    plain = client.post("/api/attribution", json=body).json()
    foil = next(t for t in plain["target_tokens"] if t != plain["target_tokens"][1])
    r = client.post("/api/attribution", json={**body, "contrast": {"position": 1, "token": foil}})
    assert r.status_code == 200, r.text
    found = r.json()["contrastive"]
    assert found["token"] == plain["target_tokens"][1] and found["foil"] == foil and found["position"] == 1
    for method in ("input_x_gradient", "integrated_gradients"):
        assert len(found[method]) == len(plain["source_tokens"])
        assert abs(sum(found[method]) - 1) < 1e-3 or sum(found[method]) == 0
    assert plain["contrastive"] is None


@pytest.mark.parametrize(
    ("contrast", "field"),
    [
        ({"position": 99, "token": "▁Hund"}, "position"),
        ({"position": 0, "token": "no-such-piece-xyz"}, "token"),
        ({"position": -1, "token": "▁Hund"}, "position"),
    ],
)
def test_bad_contrasts_are_422_naming_the_field(client: TestClient, contrast: dict[str, object], field: str) -> None:
    body = {"model": "en-de-transformer", "text": "A dog runs.", "target": "Ein Hund läuft.", "steps": 2, "contrast": contrast}
    r = client.post("/api/attribution", json=body)
    assert r.status_code == 422, r.text
    assert field in r.text


def test_contrasting_the_written_token_is_422(client: TestClient) -> None:
    body = {"model": "en-de-transformer", "text": "A dog runs.", "target": "Ein Hund läuft.", "steps": 2}
    written = client.post("/api/attribution", json=body).json()["target_tokens"][0]
    r = client.post("/api/attribution", json={**body, "contrast": {"position": 0, "token": written}})
    assert r.status_code == 422 and "nothing to contrast" in r.text
