"""Fixtures for the API tests: the app under TestClient, the real server over HTTP, and tiny
models with a word-level tokenizer (whose outputs survive detokenise -> tokenise, so a model's
own translation can be fed back to /api/align)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch
from fastapi.testclient import TestClient

from attnscope.config import Settings
from attnscope.nn.config import EOS_ID
from attnscope.nn.factory import build_model
from attnscope.repository import LoadedModel, load_model_folder, save_model_folder
from attnscope.serving.main import create_app
from attnscope.testing import TINY_KINDS, TINY_PAIRS, running_server, tiny_config
from attnscope.text.tokenizer import Tokenizer
from attnscope.translator import Translator


class ReadyClient(TestClient):
    """A TestClient whose ``with`` block starts once the models are loaded (``/api/ready``)."""

    def __enter__(self) -> ReadyClient:
        super().__enter__()
        deadline = time.monotonic() + 60
        while self.get("/api/ready").json()["status"] not in ("ready", "no_models"):  # done loading
            assert time.monotonic() < deadline, "the models did not load in 60 s"
            time.sleep(0.02)
        return self


def make_client(models_dir: Path, **overrides: Any) -> TestClient:
    """A TestClient for an app over ``models_dir``; use it as a context manager (lifespan)."""
    settings = Settings(models_dir=models_dir, device="cpu", **overrides)
    return ReadyClient(create_app(settings), raise_server_exceptions=False, base_url="http://localhost")


@pytest.fixture(scope="session")
def client(tiny_models_dir: Path) -> Iterator[TestClient]:
    with make_client(tiny_models_dir) as test_client:
        yield test_client


def speaks_in_words(loaded: LoadedModel) -> bool:
    """Whether the model's first output pieces (greedy and beam) are words: random weights can
    put <s>, <pad> or <unk> on top, and nothing stops the decoders from emitting them."""
    translator = Translator(loaded)
    for beam_size in (1, 5):
        (out,) = translator.translate([TINY_PAIRS[0][0]], beam_size=beam_size, max_length=4)
        if len(out.target_ids) < 4 or min(out.target_ids) <= EOS_ID:
            return False
    return True


@pytest.fixture(scope="session")
def word_models_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """en-de-{transformer, rnn-additive, rnn-none, self-attentive} with a word-level tokenizer,
    each from the first seed whose outputs are plain words."""
    root = tmp_path_factory.mktemp("word-models")
    tokenizer = Tokenizer.train([s for pair in TINY_PAIRS for s in pair] * 3, 80, model_type="word")
    for suffix, architecture, score in TINY_KINDS:
        for seed in range(20):
            torch.manual_seed(seed)
            model = build_model(tiny_config(architecture, score, tokenizer.vocab_size)).eval()
            folder = save_model_folder(
                root / f"en-de-{suffix}", model, tokenizer, source_lang="en", target_lang="de", dtype=torch.float32
            )
            if speaks_in_words(load_model_folder(folder)):
                break
        else:
            raise RuntimeError(f"no seed gives a {suffix} model that outputs plain words")
    return root


@pytest.fixture(scope="session")
def word_client(word_models_dir: Path) -> Iterator[TestClient]:
    with make_client(word_models_dir) as test_client:
        yield test_client


@pytest.fixture(scope="session")
def server(tiny_models_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`attnscope serve` in its own process on a free localhost port; its base URL."""
    with running_server(tiny_models_dir, tmp_path_factory.mktemp("api-server") / "server.log") as url:
        yield url


@pytest.fixture(scope="session")
def http(server: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server, timeout=30) as session:
        yield session


def check_answer(answer: dict[str, Any], info: dict[str, Any]) -> None:
    """The invariants every translate/align answer keeps, for a model described by ``info``."""
    src, tgt, dec_in = answer["source_tokens"], answer["target_tokens"], answer["decoder_input_tokens"]
    eos = answer["eos_token"]
    assert eos == "</s>" and src[-1] == eos
    assert answer["finished"] == (tgt[-1] == eos)
    assert dec_in == ["<s>", *tgt[:-1]]
    assert set(answer["attention"]) == set(info["attention"])
    assert answer["score"] == info["score"]
    assert len(answer["target_logprobs"]) == len(tgt)
    assert sum(answer["target_logprobs"]) == pytest.approx(answer["logprob"], abs=1e-3)
    for words, tokens in ((answer["source_words"], src), (answer["target_words"], tgt)):
        assert [i for w in words for i in w["tokens"]] == list(range(len(tokens)))
        for w in words:  # <unk> and byte pieces are rendered readably: see test_words.py
            if all(tokens[i] != "<unk>" for i in w["tokens"]):
                assert w["text"] == "".join(tokens[i] for i in w["tokens"]).replace("\u2581", "")
    shapes = {
        "cross": (info["layers"], info["heads"], len(tgt), len(src)),
        "encoder_self": (info["encoder_layers"], info["heads"], len(src), len(src)),
        "decoder_self": (info["layers"], info["heads"], len(tgt), len(dec_in)),
    }
    for kind, weights in answer["attention"].items():
        t = torch.tensor(weights, dtype=torch.float64)
        assert tuple(t.shape) == shapes[kind], kind
        assert float((t.sum(-1) - 1).abs().max()) < 1e-4, kind
        assert bool((t >= 0).all())


def assert_same_answer(got: dict[str, Any], expected: dict[str, Any]) -> None:
    """``got`` answers as ``expected`` does: the same tokens, words and text exactly, and every
    number equal up to float32 noise. (A micro-batched decode pads its sources and multiplies
    larger matrices, which moves weights by ~1e-7: after rounding to 6 decimals, at most one unit
    of the last decimal.)"""
    for key in ("translation", "source_tokens", "target_tokens", "decoder_input_tokens", "finished",
                "source_words", "target_words", "score"):  # fmt: skip
        assert got[key] == expected[key], key
    assert got["logprob"] == pytest.approx(expected["logprob"], abs=2e-5)
    assert got["target_logprobs"] == pytest.approx(expected["target_logprobs"], abs=2e-5)
    assert set(got["attention"]) == set(expected["attention"])
    for kind, weights in got["attention"].items():
        torch.testing.assert_close(
            torch.tensor(weights, dtype=torch.float64),
            torch.tensor(expected["attention"][kind], dtype=torch.float64),
            atol=2.5e-6,
            rtol=0,
        )


@pytest.fixture(scope="session")
def same_answer() -> Any:
    """``same_answer(got, expected)``: :func:`assert_same_answer`."""
    return assert_same_answer


@pytest.fixture(scope="session")
def model_info(client: TestClient) -> dict[str, dict[str, Any]]:
    return {m["id"]: m for m in client.get("/api/models").json()["models"]}


@pytest.fixture(scope="session")
def check() -> Any:
    """``check(answer, info)``: assert the invariants of one translate/align answer."""
    return check_answer


@pytest.fixture(scope="session")
def client_for() -> Any:
    """``client_for(models_dir, **settings)``: a TestClient (use ``with``) for another models dir."""
    return make_client
