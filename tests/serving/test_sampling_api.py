"""Sampling on ``/api/translate`` for every encoder-decoder family, over HTTP against a real server:
the same seed answers the same translation, temperature 0 and top_k 1 answer the greedy one, and
bad sampling requests are 422s naming the problem."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

TEXT = "a man rides a red bicycle near the old house"
MODELS = ["en-de-transformer", "en-de-rnn-additive", "en-de-self-attentive"]


def _translate(http: httpx.Client, model: str, **extra: object) -> dict[str, Any]:
    response = http.post("/api/translate", json={"model": model, "text": TEXT, "attention": [], **extra})
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


@pytest.mark.parametrize("model", MODELS)
def test_a_seed_reproduces_its_sample(http: httpx.Client, model: str) -> None:
    hot = {"temperature": 4.0, "top_p": 0.95, "seed": 7}
    first = _translate(http, model, sampling=hot)
    again = _translate(http, model, sampling=hot)
    assert first["target_tokens"] == again["target_tokens"] and first["translation"] == again["translation"]
    greedy = _translate(http, model, beam_size=1)
    assert _translate(http, model, sampling={"temperature": 0, "seed": 3})["target_tokens"] == greedy["target_tokens"]
    assert _translate(http, model, sampling={"top_k": 1, "seed": 3})["target_tokens"] == greedy["target_tokens"]
    others = {str(_translate(http, model, sampling={**hot, "seed": s})["target_tokens"]) for s in range(4)}
    assert len(others) > 1  # a random model at temperature 4: the seeds draw differently


def test_bad_sampling_requests_are_422(http: httpx.Client) -> None:
    body = {"model": MODELS[0], "text": TEXT}
    for extra, words in [
        ({"beam_size": 4, "sampling": {"seed": 1}}, "use beam_size 1"),
        ({"return_beam": True, "sampling": {"seed": 1}}, "no beam tree"),
        ({"sampling": {"temperature": 1.0}}, "seed"),
        ({"sampling": {"seed": 1, "top_p": 1.5}}, "top_p"),
    ]:
        response = http.post("/api/translate", json={**body, **extra})
        assert response.status_code == 422 and words in response.text, response.text
