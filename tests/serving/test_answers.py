"""Answers' JSON: the server writes the attention straight from float64 arrays, and the bytes are
exactly what pydantic writes for the same answer (every field, every option: beam tree, scores,
alternatives, word alignment, precision, kinds, batches, align); an answer that holds arrays
still serialises through pydantic, as the nested lists of the schema."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient
from pydantic import TypeAdapter

from attnscope.engine.answers import answer_json, matrix, to_response
from attnscope.engine.schemas import TranslationResponse
from attnscope.repository import load_model_folder
from attnscope.testing import TINY_PAIRS
from attnscope.translator import Translator

ONE = TypeAdapter(TranslationResponse)
MANY = TypeAdapter(list[TranslationResponse])
SOURCE = TINY_PAIRS[3][0]


def pydantic_bytes(body: bytes) -> bytes:
    """What pydantic writes for the answer(s) that ``body`` holds."""
    value = json.loads(body)
    if isinstance(value, list):
        return MANY.dump_json(MANY.validate_python(value))
    return ONE.dump_json(ONE.validate_python(value))


def test_matrix_rounds_in_float64_into_an_array_written_like_pydantic_writes_floats() -> None:
    weights = torch.tensor([[[[1e-6, 5e-5, 0.0, 1.0], [0.1234567, 2.5e-5, 0.5, 0.3765433]]]])  # (1, 1, 2, 4)
    rounded = matrix(weights, 6)
    assert rounded.dtype == np.float64 and rounded.flags.c_contiguous and rounded.shape == (1, 1, 2, 4)
    assert rounded.tolist() == weights.double().round(decimals=6).tolist()
    assert matrix(weights.transpose(2, 3), 3).flags.c_contiguous, "a transposed view is copied into C order"
    answer = TranslationResponse.model_construct(
        **{**ONE.validate_python(EXAMPLE).__dict__, "attention": {"cross": rounded}}
    )
    assert answer_json(answer) == ONE.dump_json(answer) == pydantic_bytes(answer_json(answer))
    assert b"[1e-6,0.00005,0.0,1.0]" in answer_json(answer)


@pytest.mark.parametrize("decimals", [0, 3, 6])
def test_answers_built_from_a_decode_hold_arrays_and_serialise_either_way(tiny_models_dir: Path, decimals: int) -> None:
    for folder in sorted(tiny_models_dir.iterdir()):
        loaded = load_model_folder(folder)
        translator = Translator(loaded)
        results = translator.translate([SOURCE, TINY_PAIRS[0][0]], beam_size=2) + translator.align([SOURCE], [TINY_PAIRS[3][1]])
        answers = [to_response(loaded, result, decimals=decimals) for result in results]
        for answer, result in zip(answers, results, strict=True):
            assert set(answer.attention) == {k for k in loaded.config.attention_kinds if getattr(result.hypothesis, k) is not None}
            for kind, weights in answer.attention.items():
                assert isinstance(weights, np.ndarray)
                expected = getattr(result.hypothesis, kind).double().round(decimals=decimals).tolist()
                assert json.loads(answer_json(answer))["attention"][kind] == expected
            assert answer_json(answer) == ONE.dump_json(answer) == pydantic_bytes(answer_json(answer))
        assert answer_json(answers) == MANY.dump_json(answers)


REQUESTS: list[tuple[str, dict[str, Any]]] = [
    ("/api/translate", {"text": SOURCE}),
    ("/api/translate", {"text": SOURCE, "beam_size": 3, "return_beam": True, "return_scores": True, "alternatives": 2}),
    ("/api/translate", {"text": SOURCE, "precision": 2, "attention": ["cross"], "alignment": "average"}),
    ("/api/translate", {"text": SOURCE, "attention": []}),
    ("/api/translate/batch", {"texts": [SOURCE, TINY_PAIRS[1][0]], "beam_size": 2, "precision": 4}),
    ("/api/align", {"text": SOURCE, "target": TINY_PAIRS[3][1], "return_scores": True}),
]


@pytest.mark.parametrize(("path", "body"), REQUESTS)
def test_api_answers_are_the_bytes_pydantic_writes(client: TestClient, path: str, body: dict[str, Any]) -> None:
    for model in ("en-de-transformer", "en-de-rnn-additive"):
        if model != "en-de-transformer" and "alignment" in body:
            continue
        r = client.post(path, json={"model": model, **body}, headers={"Accept-Encoding": "identity"})
        assert r.status_code == 200, r.text
        assert r.content == pydantic_bytes(r.content)


EXAMPLE: dict[str, Any] = TranslationResponse.model_config["json_schema_extra"]["examples"][0]  # type: ignore[index]


def test_large_matrices_written_slab_by_slab_are_the_same_bytes(tiny_models_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Large attention is written one (layer, head) slab at a time (so no one orjson call holds
    the interpreter for a whole answer); the bytes are pydantic's all the same."""
    import attnscope.engine.answers as answers_module

    monkeypatch.setattr(answers_module, "_SLAB_FLOATS", 0)  # every matrix counts as large
    for folder in sorted(tiny_models_dir.iterdir()):
        loaded = load_model_folder(folder)
        results = Translator(loaded).translate([SOURCE, TINY_PAIRS[0][0]], beam_size=2)
        answers = [to_response(loaded, result) for result in results]
        for answer in answers:
            assert answer_json(answer) == ONE.dump_json(answer)
        assert answer_json(answers) == MANY.dump_json(answers)


@pytest.mark.parametrize(("path", "body"), [*REQUESTS[1:3], REQUESTS[5]])
def test_large_extras_written_in_blocks_are_the_bytes_pydantic_writes(
    client: TestClient, monkeypatch: pytest.MonkeyPatch, path: str, body: dict[str, Any]
) -> None:
    """Every field counted as large (scores, context vectors, alternatives, the beam tree, the
    explanations, the word alignment): each is written item by item, the bytes unchanged."""
    import attnscope.engine.answers as answers_module

    monkeypatch.setattr(answers_module, "_SLAB_FLOATS", 0)
    explain = {"explain": ["norm", "rollout", "alti", "value_zeroing"]}
    for model in ("en-de-transformer", "en-de-rnn-additive"):
        if model != "en-de-transformer" and "alignment" in body:
            continue
        r = client.post(path, json={"model": model, **body, **explain}, headers={"Accept-Encoding": "identity"})
        assert r.status_code == 200, r.text
        assert r.content == pydantic_bytes(r.content)
