"""An imported Marian served over HTTP (``attnscope serve --models-dir``, a real server process):
the same tokens as the original's ``generate``, and every feature answering."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import pytest
import torch

from app.hf.checks import SAMPLES, generation_config

MODEL = "en-de-marian"


def _post(url: str, path: str, body: dict[str, Any]) -> Any:
    request = urllib.request.Request(
        url + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read())


def _original_pieces(marian_original: tuple[Any, Any], text: str, **settings: Any) -> list[str]:
    """The pieces of the original's output (EOS included where it ended), as the API names them."""
    hf_model, hf_tok = marian_original
    generation_config(hf_model, **settings)
    with torch.no_grad():
        out = hf_model.generate(torch.tensor([hf_tok(text).input_ids]))[0, 1:].tolist()
    pad = hf_model.config.pad_token_id
    return [str(p) for p in hf_tok.convert_ids_to_tokens([i for i in out if i != pad])]


def _served_pieces(answer: dict[str, Any]) -> list[str]:
    return list(answer["target_tokens"]) + ([answer["eos_token"]] if answer["finished"] else [])


@pytest.mark.parametrize("beam_size", [1, 4])
def test_served_translation_equals_generate(marian_server: str, marian_original: tuple[Any, Any], beam_size: int) -> None:
    for text in SAMPLES[:3]:
        answer = _post(marian_server, "/api/translate", {"model": MODEL, "text": text, "beam_size": beam_size, "max_length": 12})
        assert _served_pieces(answer) == _original_pieces(
            marian_original, text, num_beams=beam_size, max_new_tokens=12
        )


def test_served_batch_equals_generate(marian_server: str, marian_original: tuple[Any, Any]) -> None:
    texts = list(SAMPLES)
    answer = _post(marian_server, "/api/translate/batch", {"model": MODEL, "texts": texts, "beam_size": 1, "max_length": 10})
    for text, one in zip(texts, answer, strict=True):
        assert _served_pieces(one) == _original_pieces(marian_original, text, num_beams=1, max_new_tokens=10)


def test_every_feature_answers_on_the_imported_model(marian_server: str) -> None:
    """Beam tree, prefix, alternatives, scores, a switched-off head, alignment, attribution."""
    text = SAMPLES[2]
    full = _post(marian_server, "/api/translate", {
        "model": MODEL, "text": text, "beam_size": 3, "max_length": 8, "return_beam": True,
        "return_scores": True, "alternatives": 2,
    })  # fmt: skip
    layers, heads = 2, 3
    assert len(full["attention"]["cross"]) == layers and len(full["attention"]["cross"][0]) == heads
    assert len(full["attention"]["encoder_self"]) == 3  # the encoder's own depth
    assert full["beam"]["nodes"] and full["attention_scores"] and len(full["alternatives"][0]) == 2
    forced = _post(marian_server, "/api/translate", {"model": MODEL, "text": text, "beam_size": 1, "max_length": 6, "prefix": "Ein Mann"})
    assert forced["forced_tokens"] >= 1 and forced["translation"].startswith("Ein Mann")
    plain = _post(marian_server, "/api/translate", {"model": MODEL, "text": text, "beam_size": 1, "max_length": 6})
    off = _post(marian_server, "/api/translate", {
        "model": MODEL, "text": text, "beam_size": 1, "max_length": 6,
        "disable_heads": [{"kind": "encoder_self", "layer": 0, "head": 1}],
    })  # fmt: skip
    assert off["disabled_heads"] and off["attention"]["encoder_self"][0] == plain["attention"]["encoder_self"][0]
    assert off["attention"]["encoder_self"][1] != plain["attention"]["encoder_self"][1]
    aligned = _post(marian_server, "/api/align", {"model": MODEL, "text": text, "target": "Ein Mann fährt Fahrrad."})
    assert aligned["target_tokens"] and aligned["attention"]["cross"]
    attribution = _post(marian_server, "/api/attribution", {"model": MODEL, "text": "A dog runs.", "target": "Ein Hund rennt.", "steps": 4})
    assert attribution
