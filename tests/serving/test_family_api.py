"""A model family registered from outside the package is served like the shipped ones, with no
edit to serving code: listed, translated with attention, scores and a head switched off, sized
by admission control; and /api/score-functions serves the registries the pages read."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar, Literal

import pytest
from fastapi.testclient import TestClient

from attnscope.nn.config import SCORES, RNNConfig
from attnscope.nn.family import families, register, unregister
from attnscope.nn.recurrent_family import RNNFamily
from attnscope.nn.scores import SCORE_FUNCTIONS
from attnscope.testing import build_tiny_models
from tests.serving.conftest import make_client


@dataclasses.dataclass(frozen=True, kw_only=True)
class ServedToyConfig(RNNConfig):
    architecture: Literal["served_toy"] = "served_toy"  # type: ignore[assignment]


class ServedToyFamily(RNNFamily):
    architecture: ClassVar[str] = "served_toy"
    label: ClassVar[str] = "Served toy"
    config_class: ClassVar[type] = ServedToyConfig


@pytest.fixture(scope="module")
def toy_client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    register(ServedToyFamily())
    try:
        root: Path = tmp_path_factory.mktemp("toy-family")
        build_tiny_models(root, kinds=[("toy", "served_toy", "general"), ("transformer", "transformer", None)])
        with make_client(root) as client:
            yield client
    finally:
        unregister("served_toy")


def test_a_registered_family_is_listed(toy_client: TestClient) -> None:
    models = {m["id"]: m for m in toy_client.get("/api/models").json()["models"]}
    toy = models["en-de-toy"]
    assert (toy["architecture"], toy["score"], toy["layers"], toy["heads"], toy["encoder_layers"]) == ("served_toy", "general", 1, 1, 1)
    assert toy["attention"] == ["cross"]


def test_a_registered_family_translates_with_scores_and_heads_off(toy_client: TestClient) -> None:
    body = {"model": "en-de-toy", "text": "A man is riding a bicycle.", "return_scores": True, "max_length": 6}
    plain = toy_client.post("/api/translate", json=body)
    assert plain.status_code == 200, plain.text
    answer = plain.json()
    rows = answer["attention"]["cross"][0][0]
    assert len(rows) == len(answer["target_tokens"]) and all(abs(sum(r) - 1) < 1e-4 for r in rows)
    assert answer["key_dim"] == 16 and len(answer["attention_scores"]["cross"][0][0]) == len(rows)
    off = toy_client.post("/api/translate", json={**body, "disable_heads": [{"kind": "cross", "layer": 0, "head": 0}]})
    assert off.status_code == 200, off.text
    missing = toy_client.post("/api/translate", json={**body, "disable_heads": [{"kind": "cross", "layer": 1, "head": 0}]})
    assert missing.status_code == 422 and "an RNN has one attention layer" in missing.text


def test_score_functions_route_serves_the_registries(toy_client: TestClient) -> None:
    data = toy_client.get("/api/score-functions").json()
    names = [f["name"] for f in data["score_functions"]]
    assert names == list(SCORES) == list(SCORE_FUNCTIONS)
    scaled = next(f for f in data["score_functions"] if f["name"] == "scaled_dot")
    assert scaled["formula"] == "sᵀ h_i / √n" and scaled["module"] == "attnscope.nn.scores.DotScore"
    assert next(f for f in data["score_functions"] if f["name"] == "none")["module"] is None
    tags = {f["architecture"]: f for f in data["families"]}
    assert set(tags) == set(families()) and tags["served_toy"]["label"] == "Served toy"
    assert tags["transformer"]["formula"].endswith("√d_k") and tags["rnn"]["formula"] == ""
