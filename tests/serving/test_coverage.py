"""The coverage penalty as a request option (/api/translate and /api/translate/batch) and as a
model default (the card's decoding.coverage_penalty, shown in /api/models)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from fastapi.testclient import TestClient

from attnscope.repository import load_model_folder, save_model_folder, write_card
from attnscope.translator import Translator

TEXT = "Two dogs play in the snow."
MODEL = "en-de-transformer"
BETA = 1.0


@pytest.fixture(scope="module")
def sharp_dir(tiny_models_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny Transformer with its cross-attention made peaked (queries and keys × 8), so
    hypotheses differ in what they cover and the penalty changes the winner (near-uniform random
    attention covers everything alike). Plus a copy whose card sets coverage_penalty = BETA."""
    root = tmp_path_factory.mktemp("coverage-models")
    loaded = load_model_folder(tiny_models_dir / MODEL)
    with torch.no_grad():
        for name, p in loaded.model.named_parameters():
            if "cross_attn.q_proj" in name or "cross_attn.k_proj" in name:
                p.mul_(8)
    for name in (MODEL, "en-de-transformer-covering"):
        save_model_folder(root / name, loaded.model, loaded.tokenizer, source_lang="en", target_lang="de", dtype=torch.float32)
    write_card(root / "en-de-transformer-covering", {"decoding": {"coverage_penalty": BETA, "tuned_on": "val"}})
    save_model_folder(
        root / "en-de-rnn-none",
        load_model_folder(tiny_models_dir / "en-de-rnn-none").model,
        loaded.tokenizer,
        source_lang="en",
        target_lang="de",
        dtype=torch.float32,
    )
    return root


@pytest.fixture(scope="module")
def cov_client(sharp_dir: Path, client_for: Any) -> Iterator[TestClient]:
    with client_for(sharp_dir) as test_client:
        yield test_client


def reference(folder: Path, beta: float) -> list[str]:
    """The target pieces the Translator gives in-process with ``beta``."""
    loaded = load_model_folder(folder)
    (out,) = Translator(loaded).translate([TEXT], beam_size=3, max_length=8, coverage_penalty=beta)
    return loaded.tokenizer.pieces(out.target_ids)


def post(client: TestClient, **body: Any) -> dict[str, Any]:
    r = client.post("/api/translate", json={"model": MODEL, "text": TEXT, "beam_size": 3, "max_length": 8, **body})
    assert r.status_code == 200, r.text
    return dict(r.json())


def test_the_request_option_reaches_beam_search(cov_client: TestClient, sharp_dir: Path) -> None:
    with_beta, without = reference(sharp_dir / MODEL, BETA), reference(sharp_dir / MODEL, 0.0)
    assert with_beta != without  # so the test can tell whether the option was used
    assert post(cov_client, coverage_penalty=BETA)["target_tokens"] == with_beta
    assert post(cov_client, coverage_penalty=0.0)["target_tokens"] == without
    assert post(cov_client)["target_tokens"] == without  # this model's default is off
    r = cov_client.post(
        "/api/translate/batch",
        json={"model": MODEL, "texts": [TEXT, TEXT], "beam_size": 3, "max_length": 8, "coverage_penalty": BETA},
    )
    assert [a["target_tokens"] for a in r.json()] == [with_beta, with_beta]


def test_the_card_default_is_used_and_shown(cov_client: TestClient, sharp_dir: Path) -> None:
    covering = "en-de-transformer-covering"
    with_beta = reference(sharp_dir / MODEL, BETA)
    assert post(cov_client, model=covering)["target_tokens"] == with_beta
    assert post(cov_client, model=covering, coverage_penalty=0.0)["target_tokens"] == reference(sharp_dir / MODEL, 0.0)
    models = {m["id"]: m for m in cov_client.get("/api/models").json()["models"]}
    assert models[covering]["decoding"] == {"length_penalty": 0.6, "coverage_penalty": BETA}
    assert models[MODEL]["decoding"]["coverage_penalty"] == 0.0


@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        ({"coverage_penalty": -0.1}, "coverage_penalty", "greater than or equal to 0"),
        ({"coverage_penalty": 5.5}, "coverage_penalty", "less than or equal to 5"),
        ({"coverage_penalty": "0.2"}, "coverage_penalty", "valid number"),
        ({"model": "en-de-rnn-none", "coverage_penalty": 0.2}, "coverage_penalty", "no cross-attention"),
    ],
)
def test_bad_coverage_penalties_are_clear_422s(
    cov_client: TestClient, body: dict[str, Any], field: str, message: str
) -> None:
    r = cov_client.post("/api/translate", json={"model": MODEL, "text": TEXT, **body})
    assert r.status_code == 422, r.text
    answer = r.json()
    assert answer["errors"][0]["field"] == field and message in answer["detail"], json.dumps(answer)


def test_nan_and_infinity_are_refused_as_not_finite(cov_client: TestClient) -> None:
    """Python's json module (and so many clients) writes NaN and Infinity; they are not numbers
    the penalty can take, and the message says so (not a misleading "at most 5")."""
    for value in ("NaN", "Infinity"):
        body = f'{{"model": "{MODEL}", "text": "{TEXT}", "coverage_penalty": {value}}}'
        r = cov_client.post("/api/translate", content=body, headers={"content-type": "application/json"})
        assert r.status_code == 422, r.text
        answer = r.json()
        assert answer["errors"][0]["field"] == "coverage_penalty", answer
        assert "finite number" in answer["detail"], answer


def test_a_model_without_cross_attention_takes_zero(cov_client: TestClient) -> None:
    assert post(cov_client, model="en-de-rnn-none", coverage_penalty=0.0)["attention"] == {}


def test_the_openapi_schema_documents_the_option(cov_client: TestClient) -> None:
    schemas = cov_client.get("/openapi.json").json()["components"]["schemas"]
    for name in ("TranslateRequest", "BatchTranslateRequest"):
        field = schemas[name]["properties"]["coverage_penalty"]
        assert "GNMT" in field["description"]
        assert {"type": "number", "minimum": 0.0, "maximum": 5.0} in field["anyOf"]
    assert "coverage_penalty" in schemas["ModelInfo"]["properties"]["decoding"]["description"]
