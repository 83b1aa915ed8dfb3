"""Imported models served over HTTP (``attnscope serve --models-dir``, a real server process):
the same tokens as the original's ``generate``, and every feature answering."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import torch
from builders import KINDS, language_id, language_piece  # tests/hf (on sys.path: conftest)

from attnscope.hf.checks import SAMPLES, generation_config

DEPTHS = {"marian": (3, 2), "m2m100": (2, 3), "nllb": (3, 2), "mbart50": (2, 3), "t5": (3, 2), "t5gated": (3, 2)}  # encoder, decoder layers of the tiny models


@pytest.fixture(params=sorted(KINDS))
def family(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def original(originals: dict[str, tuple[Any, Any]], family: str) -> tuple[Any, Any]:
    return originals[family]


def _post(url: str, path: str, body: dict[str, Any]) -> Any:
    request = urllib.request.Request(
        url + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read())


def _original_pieces(original: tuple[Any, Any], family: str, text: str, **settings: Any) -> list[str]:
    """The pieces of the original's output (EOS included where it ended), as the API names them
    (a multilingual model's first: the target's code, forced)."""
    hf_model, hf_tok = original
    pair = KINDS[family].pair
    forced = None if pair is None else language_id(hf_tok, pair[1])
    generation_config(hf_model, forced_bos_token_id=forced, **settings)
    with torch.no_grad():
        out = hf_model.generate(torch.tensor([hf_tok(text).input_ids]))[0, 1:].tolist()
    pad = hf_model.config.pad_token_id
    ids = [i for i in out if i != pad]  # rows no piece names (T5's past its tokenizer) as the import names them
    return [f"<unused_{i}>" if p is None else str(p) for i, p in zip(ids, hf_tok.convert_ids_to_tokens(ids), strict=True)]


def _served_pieces(answer: dict[str, Any]) -> list[str]:
    return list(answer["target_tokens"]) + ([answer["eos_token"]] if answer["finished"] else [])


@pytest.mark.parametrize("beam_size", [1, 4])
def test_served_translation_equals_generate(hf_server: str, original: tuple[Any, Any], family: str, beam_size: int) -> None:
    model = KINDS[family].model_id
    for text in SAMPLES[:3]:
        answer = _post(hf_server, "/api/translate", {"model": model, "text": text, "beam_size": beam_size, "max_length": 12})
        assert _served_pieces(answer) == _original_pieces(original, family, text, num_beams=beam_size, max_new_tokens=12)


def test_served_batch_equals_generate(hf_server: str, original: tuple[Any, Any], family: str) -> None:
    texts = list(SAMPLES)
    body = {"model": KINDS[family].model_id, "texts": texts, "beam_size": 1, "max_length": 10}
    for text, one in zip(texts, _post(hf_server, "/api/translate/batch", body), strict=True):
        assert _served_pieces(one) == _original_pieces(original, family, text, num_beams=1, max_new_tokens=10)


def test_models_list_shows_where_it_came_from(hf_server: str, hf_sources: dict[str, Path]) -> None:
    with urllib.request.urlopen(hf_server + "/api/models", timeout=60) as response:
        models = {m["id"]: m for m in json.loads(response.read())["models"]}
    for name, kind in KINDS.items():
        assert models[kind.model_id]["card"]["imported_from"] == str(hf_sources[name])
    assert models["en-de-marian"]["heads"] == 3 and models["en-de-m2m100"]["encoder_layers"] == 2


def test_every_feature_answers_on_the_imported_model(hf_server: str, family: str) -> None:
    """Beam tree, prefix, alternatives, scores, a switched-off head, alignment, attribution."""
    text, url, model = SAMPLES[2], hf_server, KINDS[family].model_id
    encoder_layers, layers = DEPTHS[family]
    full = _post(url, "/api/translate", {
        "model": model, "text": text, "beam_size": 3, "max_length": 8, "return_beam": True,
        "return_scores": True, "alternatives": 2,
    })  # fmt: skip
    assert len(full["attention"]["cross"]) == layers and len(full["attention"]["cross"][0]) == 3
    assert len(full["attention"]["encoder_self"]) == encoder_layers
    assert full["beam"]["nodes"] and full["attention_scores"] and len(full["alternatives"][0]) == 2
    pair = KINDS[family].pair
    if pair is not None:  # the language codes: the source's first, the target's forced first
        source, target = (language_piece(family, code) for code in pair)
        assert full["source_tokens"][0] == source and full["target_tokens"][0] == target
        assert full["forced_tokens"] == 1 and target not in full["translation"]
    forced = _post(url, "/api/translate", {"model": model, "text": text, "beam_size": 1, "max_length": 6, "prefix": "Ein Mann"})
    assert forced["forced_tokens"] >= 1 and forced["translation"].startswith("Ein Mann")
    plain = _post(url, "/api/translate", {"model": model, "text": text, "beam_size": 1, "max_length": 6})
    off = _post(url, "/api/translate", {
        "model": model, "text": text, "beam_size": 1, "max_length": 6,
        "disable_heads": [{"kind": "encoder_self", "layer": 0, "head": 1}],
    })  # fmt: skip
    assert off["disabled_heads"] and off["attention"]["encoder_self"][0] == plain["attention"]["encoder_self"][0]
    assert off["attention"]["encoder_self"][1] != plain["attention"]["encoder_self"][1]
    aligned = _post(url, "/api/align", {"model": model, "text": text, "target": "Ein Mann fährt Fahrrad."})
    assert aligned["target_tokens"] and aligned["attention"]["cross"]
    attribution = _post(url, "/api/attribution", {"model": model, "text": "A dog runs.", "target": "Ein Hund rennt.", "steps": 4})
    assert attribution


def _post_error(url: str, path: str, body: dict[str, Any]) -> tuple[int, Any]:
    try:
        _post(url, path, body)
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())
    raise AssertionError("expected an error answer")


def test_languages_chosen_per_request(hf_server: str, originals: dict[str, tuple[Any, Any]]) -> None:
    """``source_lang``/``target_lang`` replace the card's pair for one request (the source's code
    first, the target's forced first, as ``generate(forced_bos_token_id=...)``), in translate and
    batch; an unknown code, or any code for a model without codes, is a 422 listing the valid ones."""
    hf_model, hf_tok = originals["m2m100"]
    text, model = SAMPLES[1], KINDS["m2m100"].model_id
    body = {"model": model, "text": text, "beam_size": 1, "max_length": 8, "source_lang": "fr", "target_lang": "es"}
    answer = _post(hf_server, "/api/translate", body)
    assert answer["source_tokens"][0] == "__fr__" and answer["target_tokens"][0] == "__es__"
    hf_tok.src_lang = "fr"
    try:
        source = hf_tok(text).input_ids
    finally:
        hf_tok.src_lang = "en"
    generation_config(hf_model, forced_bos_token_id=int(hf_tok.get_lang_id("es")), max_new_tokens=8)
    with torch.no_grad():
        out = hf_model.generate(torch.tensor([source]))[0, 1:].tolist()
    assert _served_pieces(answer) == [str(p) for p in hf_tok.convert_ids_to_tokens([i for i in out if i != 1])]
    batch = _post(hf_server, "/api/translate/batch", {"model": model, "texts": [text], "beam_size": 1, "max_length": 8, "target_lang": "es"})
    assert batch[0]["source_tokens"][0] == "__en__" and batch[0]["target_tokens"][0] == "__es__"
    stream = urllib.request.Request(
        hf_server + "/api/translate/stream", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(stream, timeout=60) as response:  # the answer event ends the stream
        events = [json.loads(line[5:]) for line in response.read().decode().splitlines() if line.startswith("data:")]
    assert events[-1]["source_tokens"][0] == "__fr__" and events[-1]["target_tokens"] == answer["target_tokens"]
    status, error = _post_error(hf_server, "/api/translate", {**body, "target_lang": "xx"})
    assert status == 422 and "target_lang" in json.dumps(error) and "'xx'" in json.dumps(error) and "de, " in json.dumps(error)
    status, error = _post_error(hf_server, "/api/translate", {"model": KINDS["marian"].model_id, "text": text, "source_lang": "en"})
    assert status == 422 and "source_lang" in json.dumps(error) and "no language codes" in json.dumps(error)
