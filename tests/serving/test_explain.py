"""The explorer's API additions: the beam tree (its best path spells the translation), forced
prefixes (the what-if), raw scores whose softmax is the attention (every score function and the
Transformer), context norms, alternatives and the attention cost."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch
from fastapi.testclient import TestClient

from attnscope.nn.config import SCORES
from attnscope.nn.factory import build_model
from attnscope.repository import save_model_folder
from attnscope.testing import TINY_PAIRS, tiny_config, tiny_tokenizer

TEXT = "A man is riding a bicycle."
ATTENDING = ["en-de-transformer", "en-de-rnn-additive", "en-de-self-attentive"]


def softmax_rows(scores: list[Any]) -> torch.Tensor:
    """[L][H][Q][K] with None for masked keys -> softmax over K (masked keys get zero)."""
    t = torch.tensor([[[[-math.inf if v is None else v for v in row] for row in h] for h in layer] for layer in scores])
    return t.softmax(-1)


def check_scores(answer: dict[str, Any]) -> None:
    assert set(answer["attention_scores"]) == set(answer["attention"])
    for kind, weights in answer["attention"].items():
        expected = torch.tensor(weights, dtype=torch.float64)
        got = softmax_rows(answer["attention_scores"][kind]).double()
        assert got.shape == expected.shape, kind
        assert float((got - expected).abs().max()) < 1e-5, kind


@pytest.mark.parametrize("model", ATTENDING)
@pytest.mark.parametrize("beam", [1, 3])
def test_beam_tree_best_path_spells_the_translation(client: TestClient, model: str, beam: int) -> None:
    answer = client.post(
        "/api/translate", json={"model": model, "text": TEXT, "beam_size": beam, "return_beam": True}
    ).json()
    tree = answer["beam"]
    nodes = {n["id"]: n for n in tree["nodes"]}
    assert len(nodes) == len(tree["nodes"])
    (root,) = [n for n in tree["nodes"] if n["parent"] is None]
    assert root["step"] == 0 and tree["best"][0] == root["id"]
    for node in tree["nodes"]:
        if node["parent"] is not None:
            assert nodes[node["parent"]]["step"] == node["step"] - 1
            assert node["score"] == pytest.approx(nodes[node["parent"]]["score"] + node["logprob"], abs=1e-4)
    assert [nodes[i]["token"] for i in tree["best"][1:]] == answer["target_tokens"]
    assert [nodes[i]["logprob"] for i in tree["best"][1:]] == pytest.approx(answer["target_logprobs"], abs=1e-4)
    assert tree["hypotheses"][0]["tokens"] == answer["target_tokens"]
    assert tree["hypotheses"][0]["node"] == tree["best"][-1] and nodes[tree["best"][-1]]["finished"]
    rankings = [h["ranking"] for h in tree["hypotheses"]]
    assert rankings == sorted(rankings, reverse=True)
    assert len({n["id"] for n in tree["nodes"] if n["step"] == 1}) <= beam


def test_no_beam_unless_asked(client: TestClient) -> None:
    answer = client.post("/api/translate", json={"model": "en-de-transformer", "text": TEXT}).json()
    assert answer["beam"] is None and answer["attention_scores"] is None and answer["forced_tokens"] == 0


@pytest.mark.parametrize("model", ["en-de-transformer", "en-de-rnn-additive"])
@pytest.mark.parametrize("beam", [1, 4])
def test_prefix_forces_the_beginning(word_client: TestClient, model: str, beam: int) -> None:
    prefix = "Zwei Hunde"  # words of the tiny word-level vocabulary, unlikely first choices
    answer = word_client.post(
        "/api/translate", json={"model": model, "text": TEXT, "beam_size": beam, "prefix": prefix}
    ).json()
    assert answer["forced_tokens"] == 2
    assert answer["target_tokens"][:2] == ["▁Zwei", "▁Hunde"]
    assert answer["translation"].startswith(prefix)
    assert len(answer["attention"]["cross"][0][0]) == len(answer["target_tokens"])  # attention covers it all
    free = word_client.post("/api/translate", json={"model": model, "text": TEXT, "beam_size": beam}).json()
    assert free["target_tokens"][:2] != ["▁Zwei", "▁Hunde"]  # the prefix changed the output


def test_bad_prefixes_are_clear_422s(client: TestClient) -> None:
    long = " ".join(["Mann"] * 60)
    for body, needle in (
        ({"prefix": long, "max_length": 20}, "no room"),
        ({"prefix": 5}, "string"),
        ({"alternatives": 21}, "20"),
        ({"return_scores": "yes"}, "bool"),
    ):
        r = client.post("/api/translate", json={"model": "en-de-rnn-additive", "text": TEXT, **body})
        assert r.status_code == 422, body
        assert needle in r.json()["detail"], r.json()


@pytest.mark.parametrize("model", ATTENDING)
def test_scores_softmax_to_the_attention_and_cost_is_the_matrix_size(client: TestClient, model: str) -> None:
    for endpoint, extra in (("/api/translate", {"beam_size": 3}), ("/api/align", {"target": "Ein Mann fährt."})):
        answer = client.post(
            endpoint, json={"model": model, "text": TEXT, "return_scores": True, "alternatives": 4, **extra}
        ).json()
        check_scores(answer)
        for kind, weights in answer["attention"].items():
            assert answer["attention_cost"][kind] == torch.tensor(weights).numel()
        cross = torch.tensor(answer["attention"]["cross"])
        layers, heads, queries, _ = cross.shape
        norms = torch.tensor(answer["context_norms"])
        vectors = torch.tensor(answer["context_vectors"])
        assert norms.shape == (layers, heads, queries) and vectors.shape[:3] == (layers, heads, queries)
        assert torch.allclose(vectors.norm(dim=-1), norms, atol=1e-4)
        assert vectors.shape[-1] == answer["key_dim"]
        assert len(answer["alternatives"]) == queries
        for token, logprob, options in zip(answer["target_tokens"], answer["target_logprobs"], answer["alternatives"], strict=True):
            assert len(options) == 4 and options == sorted(options, key=lambda o: -o["logprob"])
            assert options[0]["logprob"] >= logprob - 1e-4
            if token in [o["token"] for o in options]:
                assert next(o for o in options if o["token"] == token)["logprob"] == pytest.approx(logprob, abs=1e-4)


def test_no_attention_model_costs_nothing(client: TestClient) -> None:
    answer = client.post(
        "/api/translate", json={"model": "en-de-rnn-none", "text": TEXT, "return_scores": True}
    ).json()
    assert answer["attention_cost"] == {} and answer["attention_scores"] == {} and answer["context_norms"] is None


@pytest.fixture(scope="module")
def score_models_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny RNN per score function (all sharing one tokenizer)."""
    root = tmp_path_factory.mktemp("score-models")
    tokenizer = tiny_tokenizer()
    for score in SCORES:
        if score == "none":
            continue
        torch.manual_seed(0)
        model = build_model(tiny_config("rnn", score, tokenizer.vocab_size)).eval()
        save_model_folder(root / f"en-de-rnn-{score}", model, tokenizer, source_lang="en", target_lang="de", dtype=torch.float32)
    return root


def test_scores_of_every_score_function(score_models_dir: Path, client_for: Any) -> None:
    with client_for(score_models_dir) as c:
        for folder in sorted(score_models_dir.iterdir()):
            answer = c.post(
                "/api/translate",
                json={"model": folder.name, "text": TINY_PAIRS[1][0], "beam_size": 2, "return_scores": True},
            ).json()
            assert answer["score"] == folder.name.removeprefix("en-de-rnn-")
            check_scores(answer)
            assert answer["attention_cost"] == {"cross": len(answer["target_tokens"]) * len(answer["source_tokens"])}


def test_the_additions_are_in_the_openapi_schema(client: TestClient) -> None:
    schemas = client.get("/openapi.json").json()["components"]["schemas"]
    request = schemas["TranslateRequest"]["properties"]
    assert {"return_beam", "prefix", "return_scores", "alternatives"} <= set(request)
    assert {"return_scores", "alternatives"} <= set(schemas["AlignRequest"]["properties"])
    response = schemas["TranslationResponse"]["properties"]
    added = {"attention_cost", "forced_tokens", "beam", "attention_scores", "context_norms", "context_vectors", "key_dim", "alternatives"}
    assert added <= set(response)
    assert all(response[name].get("description") for name in added)
    assert {"nodes", "best", "hypotheses"} <= set(schemas["BeamTree"]["properties"])
