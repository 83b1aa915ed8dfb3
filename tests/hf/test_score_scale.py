"""``score_scale`` in the ``return_scores`` answer: what q·k is divided by to give a raw score.
An imported T5 does not scale (1.0; its self-attention scores add a position bias), the shipped
Transformer divides by √d_k, an RNN has no q·k (no field); softmax over the scores still gives the
attention, and an answer that did not ask for scores has no ``score_scale`` at all."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from builders import t5_folder  # tests/hf (on sys.path: conftest)
from fastapi.testclient import TestClient

from attnscope.hf.importer import import_model
from attnscope.testing import build_tiny_models
from tests.serving.conftest import make_client

TEXT = "A man is riding a bicycle."


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    root: Path = tmp_path_factory.mktemp("score-scale")
    import_model(str(t5_folder(tmp_path_factory.mktemp("t5-source"))), root / "en-de-t5", dtype="float32")
    build_tiny_models(root, kinds=[("transformer", "transformer", None), ("rnn", "rnn", "additive")])
    with make_client(root) as test_client:
        yield test_client


def _scores(client: TestClient, model: str) -> dict[str, Any]:
    answer = client.post("/api/translate", json={"model": model, "text": TEXT, "max_length": 6, "return_scores": True})
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def _softmax_is_attention(answer: dict[str, Any]) -> None:
    """Softmax over each row of scores is the attention row (to 1e-4: the tiny T5's scores reach
    a few hundred, where float32's spacing is 1.5e-5 and a sharp softmax passes that on)."""
    for kind, scores in answer["attention_scores"].items():
        raw = torch.tensor([[[[-math.inf if s is None else s for s in row] for row in head] for head in layer] for layer in scores])
        weights = torch.tensor(answer["attention"][kind])
        assert torch.allclose(raw.double().softmax(-1), weights.double(), atol=1e-4), kind


def test_t5_scores_are_not_scaled(client: TestClient) -> None:
    answer = _scores(client, "en-de-t5")
    assert answer["score_scale"] == 1.0 and answer["key_dim"] == 16
    _softmax_is_attention(answer)


def test_shipped_transformer_divides_by_root_dk(client: TestClient) -> None:
    answer = _scores(client, "en-de-transformer")
    assert answer["score_scale"] == pytest.approx(math.sqrt(answer["key_dim"])) and answer["score_scale"] != 1.0
    _softmax_is_attention(answer)


def test_rnn_has_no_scale(client: TestClient) -> None:
    answer = _scores(client, "en-de-rnn")
    assert answer["key_dim"] and answer["attention_scores"] and "score_scale" not in answer


def test_only_answers_with_scores_carry_it(client: TestClient) -> None:
    plain = client.post("/api/translate", json={"model": "en-de-transformer", "text": TEXT, "max_length": 6})
    assert plain.status_code == 200 and "score_scale" not in plain.json() and plain.json()["key_dim"] is None
    schema = client.get("/openapi.json").json()["components"]["schemas"]["TranslationResponse"]["properties"]
    assert schema["score_scale"]["description"].startswith("Only with return_scores")
