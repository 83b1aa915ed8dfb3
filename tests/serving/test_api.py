"""Every endpoint with a tiny model of each architecture, through the TestClient: the shapes and
sums of the matrices, beam 1 = greedy, align reproduces a translation's attention, batch = one
by one."""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from fastapi.testclient import TestClient

from attnscope.decoding import greedy_decode
from attnscope.repository import load_model_folder
from attnscope.testing import TINY_PAIRS
from attnscope.text.tokenizer import Tokenizer

MODELS = ["en-de-transformer", "en-de-rnn-additive", "en-de-rnn-none", "en-de-self-attentive"]
TEXTS = ["A man is riding a bicycle.", "Two dogs play.", "The man in the red shirt is cooking dinner."]
Check = Callable[[dict[str, Any], dict[str, Any]], None]


def tensor(weights: list[Any]) -> torch.Tensor:
    return torch.tensor(weights, dtype=torch.float64)


def test_health(client: TestClient) -> None:
    assert client.get("/api/health").json() == {"status": "ok", "device": "cpu", "models": 4}


def test_models_describes_each_architecture(model_info: dict[str, dict[str, Any]]) -> None:
    assert sorted(model_info) == sorted(MODELS)
    t = model_info["en-de-transformer"]
    assert (t["architecture"], t["score"], t["layers"], t["encoder_layers"], t["heads"]) == ("transformer", None, 2, 2, 2)
    assert t["attention"] == ["cross", "encoder_self", "decoder_self"]
    rnn = model_info["en-de-rnn-additive"]
    assert (rnn["architecture"], rnn["score"], rnn["layers"], rnn["heads"], rnn["attention"]) == ("rnn", "additive", 1, 1, ["cross"])
    assert model_info["en-de-rnn-none"]["score"] == "none" and model_info["en-de-rnn-none"]["attention"] == []
    assert model_info["en-de-self-attentive"]["attention"] == ["cross", "encoder_self"]
    for info in model_info.values():
        assert (info["source_lang"], info["target_lang"], info["device"], info["bleu"]) == ("en", "de", "cpu", None)
        assert info["parameters"] > 0 and info["card"]["id"] == info["id"]


def test_models_reports_bleu_from_the_card(tmp_path: Path, tiny_models_dir: Path, client_for: Any) -> None:
    folder = tmp_path / "en-de-rnn-additive"
    shutil.copytree(tiny_models_dir / folder.name, folder)
    bleu = {"test2016": {"cased": 35.2, "lowercase_13a": 36.01, "signature_cased": "nrefs:1|case:mixed"}}
    card = json.loads((folder / "card.json").read_text())
    chrf = {"test2016": {"score": 61.3, "signature": "nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no"}}
    (folder / "card.json").write_text(json.dumps({**card, "bleu": bleu, "chrf": chrf, "curve": [{"epoch": 1}]}))
    with client_for(tmp_path) as c:
        (info,) = c.get("/api/models").json()["models"]
    assert info["bleu"] == bleu and info["chrf"] == chrf
    assert "curve" not in info["card"] and info["card"]["note"] == card["note"]


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("beam_size", [1, 4])
def test_translate(client: TestClient, model_info: dict[str, Any], check: Check, model: str, beam_size: int) -> None:
    r = client.post("/api/translate", json={"model": model, "text": TEXTS[0], "beam_size": beam_size})
    assert r.status_code == 200, r.text
    answer = r.json()
    check(answer, model_info[model])
    assert answer["model"] == model and answer["timing_ms"] > 0
    assert answer["source_tokens"][:2] == ["\u2581", "A"] or answer["source_tokens"][0].startswith("\u2581")


def test_max_length_cuts_the_output(client: TestClient, model_info: dict[str, Any], check: Check) -> None:
    body = {"model": "en-de-transformer", "text": TEXTS[0], "beam_size": 3, "max_length": 4}
    answer = client.post("/api/translate", json=body).json()
    check(answer, model_info["en-de-transformer"])
    assert len(answer["target_tokens"]) <= 4


@pytest.mark.parametrize("model", MODELS)
def test_beam_one_equals_greedy(client: TestClient, tiny_models_dir: Path, model: str) -> None:
    answer = client.post("/api/translate", json={"model": model, "text": TEXTS[2], "beam_size": 1}).json()
    loaded = load_model_folder(tiny_models_dir / model)
    src = torch.tensor([loaded.tokenizer.encode(TEXTS[2]) + [loaded.config.eos_id]])
    with torch.inference_mode():
        hyp = greedy_decode(loaded.model, src).hypotheses()[0]
    assert answer["target_tokens"] == loaded.tokenizer.pieces(hyp.tokens)
    for kind, weights in answer["attention"].items():
        assert torch.allclose(tensor(weights), getattr(hyp, kind).double(), atol=1e-6), kind
    assert answer["logprob"] == pytest.approx(hyp.score, abs=1e-4)


@pytest.mark.parametrize("max_length", [12, None])
@pytest.mark.parametrize("model", MODELS)
def test_batch_equals_one_by_one(client: TestClient, model: str, max_length: int | None) -> None:
    """Without max_length each text keeps its own default budget (1.5 × its tokens + 10), not the
    longest text's: the tiny random models never stop before it, so every output is cut there."""
    common = {"model": model, "beam_size": 3, "max_length": max_length}
    batch = client.post("/api/translate/batch", json={**common, "texts": TEXTS})
    assert batch.status_code == 200, batch.text
    assert len(batch.json()) == len(TEXTS)
    for text, together in zip(TEXTS, batch.json(), strict=True):
        alone = client.post("/api/translate", json={**common, "text": text}).json()
        if max_length is None:
            budget = math.ceil(1.5 * len(together["source_tokens"])) + 10
            assert len(together["target_tokens"]) == budget, "the text's own budget, not its batch's"
        assert together["target_tokens"] == alone["target_tokens"]
        assert together["source_tokens"] == alone["source_tokens"]
        assert together["logprob"] == pytest.approx(alone["logprob"], abs=1e-4)
        for kind, weights in alone["attention"].items():
            assert torch.allclose(tensor(together["attention"][kind]), tensor(weights), atol=1e-5), kind


@pytest.mark.parametrize("model", MODELS)
def test_align_returns_the_given_target(client: TestClient, model_info: dict[str, Any], check: Check, model: str) -> None:
    r = client.post("/api/align", json={"model": model, "text": TEXTS[0], "target": "Ein Mann fährt Fahrrad."})
    assert r.status_code == 200, r.text
    answer = r.json()
    check(answer, model_info[model])
    assert answer["translation"] == "Ein Mann fährt Fahrrad." and answer["finished"]
    assert all(lp <= 0 for lp in answer["target_logprobs"])


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("beam_size", [1, 5])
def test_align_on_own_translation_reproduces_its_attention(
    word_client: TestClient, word_models_dir: Path, model: str, beam_size: int
) -> None:
    """With a word-level tokenizer a translation tokenises back to the same ids, so teacher
    forcing on it must give the decoder's own attention and token log-probabilities."""
    tokenizer = Tokenizer.load(word_models_dir / model / "tokenizer.model")
    for text in TEXTS + [source for source, _ in TINY_PAIRS]:
        body = {"model": model, "text": text, "beam_size": beam_size, "max_length": 6}
        out = word_client.post("/api/translate", json=body).json()
        ids = tokenizer.encode(out["translation"])
        if len(ids) < 2 or tokenizer.pieces(ids) + ["</s>"] * out["finished"] != out["target_tokens"]:
            continue  # too short to tell, or a special piece (<s>, <unk>) in it: try another
        forced = word_client.post("/api/align", json={"model": model, "text": text, "target": out["translation"]}).json()
        n = len(out["target_tokens"])  # align adds </s> when the translation was cut off
        assert forced["target_tokens"][:n] == out["target_tokens"]
        assert forced["target_logprobs"][:n] == pytest.approx(out["target_logprobs"], abs=1e-4)
        for kind, weights in out["attention"].items():
            got = tensor(forced["attention"][kind])
            got = got[..., :n, :n] if kind == "decoder_self" else got if kind == "encoder_self" else got[..., :n, :]
            assert torch.allclose(got, tensor(weights), atol=1e-5), kind
        return
    pytest.fail(f"no translation of {model} survived detokenise -> tokenise")
