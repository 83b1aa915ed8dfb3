"""Models whose positions run out before the server's limits: the location score (it predicts a
position among ``max_source_positions``) and a Transformer with 16 positions, served through the
API. Their limits come from the model's config, and a request past them is a clear 422."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import torch

from attnscope.nn.factory import build_model
from attnscope.repository import save_model_folder
from attnscope.testing import tiny_config, tiny_tokenizer


@pytest.fixture(scope="module")
def short_models_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("short-models")
    tokenizer = tiny_tokenizer()
    configs = {
        "en-de-rnn-location": dataclasses.replace(
            tiny_config("rnn", "location", tokenizer.vocab_size), max_source_positions=8
        ),
        "en-de-transformer-16": dataclasses.replace(
            tiny_config("transformer", None, tokenizer.vocab_size), max_positions=16
        ),
    }
    for name, config in configs.items():
        torch.manual_seed(0)
        save_model_folder(
            root / name, build_model(config).eval(), tokenizer, source_lang="en", target_lang="de", dtype=torch.float32
        )
    return root


def _text_of(client: Any, model: str, tokens: int) -> str:
    """A text of exactly ``tokens`` source tokens: words the tiny tokenizer keeps whole (checked
    against the server's own token list)."""
    text = " ".join((["a", "play", "in"] * tokens)[:tokens])
    r = client.post("/api/align", json={"model": model, "text": text, "target": ""})
    assert r.status_code == 200 and len(r.json()["source_tokens"]) == tokens + 1, r.text
    return text


def test_limits_come_from_the_models_positions(short_models_dir: Path, client_for: Any, check: Any) -> None:
    with client_for(short_models_dir, max_tokens=200) as c:
        info = {m["id"]: m for m in c.get("/api/models").json()["models"]}
        location, transformer = info["en-de-rnn-location"], info["en-de-transformer-16"]
        assert (location["max_source_tokens"], location["max_length"]) == (7, None)
        assert (transformer["max_source_tokens"], transformer["max_length"]) == (15, 16)

        for model, limit in (("en-de-rnn-location", 7), ("en-de-transformer-16", 15)):
            at_limit = _text_of(c, model, limit)
            max_length = 512 if model == "en-de-transformer-16" else 30  # the Transformer caps it at 16
            for beam in (1, 3):
                body = {"model": model, "text": at_limit, "beam_size": beam, "max_length": max_length}
                r = c.post("/api/translate", json=body)
                assert r.status_code == 200, r.text
                check(r.json(), info[model])
                assert len(r.json()["target_tokens"]) <= min(max_length, 16 if "16" in model else 30)
            over = at_limit + " play"
            r = c.post("/api/translate", json={"model": model, "text": over})
            assert r.status_code == 422
            assert r.json()["detail"] == f"text: has {limit + 1} tokens; the limit is {limit}"

        # the default output budget (1.5 x source + 10) is capped at the 16 positions too
        r = c.post("/api/translate", json={"model": "en-de-transformer-16", "text": _text_of(c, "en-de-transformer-16", 12)})
        assert r.status_code == 200 and len(r.json()["target_tokens"]) <= 16
