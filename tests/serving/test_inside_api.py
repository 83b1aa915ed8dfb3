"""POST /api/lens and /api/patch over the app (tiny random models): shapes follow the tokens and
the model, the lens's last point is the written word's own rank, the attribution adds up, identical
sources patch to zero, and bad input gets a 4xx naming the problem."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

TEXT = "A man is riding a bicycle."


def post(client: TestClient, path: str, status: int = 200, **body: Any) -> dict[str, Any]:
    response = client.post(path, json=body)
    assert response.status_code == status, response.text
    return dict(response.json())


def test_lens_of_a_translation(client: TestClient) -> None:
    out = post(client, "/api/lens", model="en-de-transformer", text=TEXT, beam_size=1, k=3)
    points, targets = len(out["points"]), len(out["target_tokens"])
    assert out["points"][0] == "embed" and points == 1 + 3 * 2
    assert len(out["top_tokens"]) == points and all(len(p) == targets for p in out["top_tokens"])
    assert all(len(cell) == 3 for p in out["top_tokens"] for cell in p)
    assert out["rank"][-1] == [0] * targets  # greedy: each written word is the last point's top-1
    assert [row[0] for row in out["top_tokens"][-1]] == out["target_tokens"]
    assert all(e is not None for e in out["emergence"])
    dla = out["attribution"]
    assert len(dla["cross_heads"]) == 2 and len(dla["cross_heads"][0]) == 2
    for t, logit in enumerate(dla["logit"]):
        parts = dla["embeddings"][t] + dla["final_bias"][t] + sum(row[t] for row in dla["feed_forward"])
        for kind in ("self", "cross"):
            parts += sum(h[t] for layer in dla[f"{kind}_heads"] for h in layer) + sum(b[t] for b in dla[f"{kind}_bias"])
        assert abs(parts - logit) < 1e-3  # rounded to 5 digits on the wire
    assert "σ frozen" in dla["norm"]


def test_patch_with_identical_sources_is_zero(client: TestClient) -> None:
    out = post(client, "/api/patch", model="en-de-transformer", clean=TEXT, corrupted=TEXT, beam_size=1)
    assert len(out["cross_heads"]) == 2 and len(out["self_heads"][0]) == 2
    assert all(v == 0 for grid in ("self_heads", "cross_heads", "positions") for row in out[grid] for v in row)
    assert out["position_rows"] == ["embed", "enc 1", "enc 2"]
    assert all(len(row) == len(out["clean_tokens"]) for row in out["positions"])
    assert out["total_effect"] == 0 and out["clean_log_prob"] == out["corrupted_log_prob"]


def test_patch_at_one_position_and_with_a_given_target(client: TestClient) -> None:
    out = post(client, "/api/patch", model="en-de-transformer", clean="a b c", corrupted="a b d",
               target="x y", position=0)
    assert out["translation"] == "x y" and out["position"] == 0
    assert abs(out["total_effect"] - (out["corrupted_log_prob"][0] - out["clean_log_prob"][0])) < 1e-4


def test_rnn_patching_replaces_each_steps_context(client: TestClient) -> None:
    """An RNN: no head or position grids, a context per decoder step instead; any source length."""
    same = post(client, "/api/patch", model="en-de-rnn-additive", clean=TEXT, corrupted=TEXT, beam_size=1)
    targets = len(same["target_tokens"])
    assert same["self_heads"] == [] and same["positions"] == [] and same["total_effect"] == 0
    assert same["context_steps"] == [0] * targets and len(same["context_grid"]) == targets
    out = post(client, "/api/patch", model="en-de-rnn-additive", clean=TEXT, corrupted="Two dogs play in the snow.",
               beam_size=1)  # fmt: skip
    grid, steps = out["context_grid"], out["context_steps"]
    assert any(abs(v) > 0 for row in grid for v in row)
    assert all(grid[i][j] == 0 for i in range(targets) for j in range(i))  # a step moves no earlier token
    assert all(abs(sum(row) - s) < 1e-3 for row, s in zip(grid, steps, strict=True))
    at = post(client, "/api/patch", model="en-de-rnn-additive", clean=TEXT, corrupted="Two dogs play in the snow.",
              beam_size=1, position=1)  # fmt: skip
    assert at["context_steps"] == [row[1] for row in grid]


@pytest.mark.parametrize(
    ("path", "body", "status", "words"),
    [
        ("/api/patch", {"clean": "a b c", "corrupted": "a b c d e"}, 422, ["corrupted", "equally long"]),
        ("/api/patch", {"clean": "a b c", "corrupted": "a b d", "position": 40}, 422, ["position", "target has"]),
        ("/api/lens", {"model": "no-such-model", "text": TEXT}, 404, ["no-such-model"]),
        ("/api/lens", {"model": "en-de-rnn-additive", "text": TEXT}, 422,
         ["en-de-rnn-additive is an RNN", "residual stream", "context vector"]),
        ("/api/patch", {"model": "en-de-rnn-additive", "clean": "a b", "corrupted": "b", "position": 40}, 422,
         ["position", "target has"]),
        ("/api/lens", {"text": TEXT, "k": 0}, 422, ["k"]),
    ],
)
def test_bad_input_is_named(client: TestClient, path: str, body: dict[str, Any], status: int, words: list[str]) -> None:
    out = post(client, path, status, **({"model": "en-de-transformer"} | body))
    text = str(out)
    assert all(word in text for word in words), text
