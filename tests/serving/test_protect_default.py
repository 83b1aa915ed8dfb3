"""``protect`` by default, over real HTTP (``attnscope serve`` on the shipped Transformers and the
attention-less RNN): a request that does not mention it gets each model's default, numbers, names
and emoji of real sentences come back verbatim, and the default steps aside for ``prefix`` and,
where nothing needs protecting, for ``return_beam``."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from attnscope.testing import running_server

REPO = Path(__file__).resolve().parents[2]
MODELS = ["en-de-transformer", "en-fr-transformer", "en-de-rnn-none"]
SENTENCES = [  # from bench/data/entities.tsv, with what must survive
    ("On 12/03/2024 Dr. Zbigniew Brzęczyszczykiewicz paid $1,234.56 for 3 pizzas 🍕 at Café Müller.",
     ["12/03/2024", "Zbigniew", "Brzęczyszczykiewicz", "$1,234.56", "3", "🍕", "Müller"]),
    ("A man holds three red balloons and 12 apples in 2024.", ["12", "2024"]),
    ("Anna and Jürgen are dancing in the street.", ["Jürgen"]),
    ("A man with 2 dogs and 3 cats meets Łukasz at 9:00. 🐕", ["2", "3", "Łukasz", "9:00", "🐕"]),
    ("Visit https://example.org/shop for more pictures.", ["https://example.org/shop"]),
]  # fmt: skip


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("shipped")
    for name in MODELS:
        (root / name).symlink_to(REPO / "models" / name)
    with running_server(root, root / "server.log") as base:
        yield base


def post(url: str, path: str, body: dict[str, Any]) -> tuple[int, Any]:
    request = urllib.request.Request(
        url + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_models_say_which_protect_by_default(url: str) -> None:
    with urllib.request.urlopen(url + "/api/models", timeout=30) as response:
        models = {m["id"]: m for m in json.loads(response.read())["models"]}
    assert models["en-de-transformer"]["protect"] is True and models["en-fr-transformer"]["protect"] is True
    assert models["en-de-rnn-none"]["protect"] is False  # no cross-attention to place the spans by


@pytest.mark.parametrize("model", ["en-de-transformer", "en-fr-transformer"])
@pytest.mark.parametrize(("text", "keep"), SENTENCES)
def test_numbers_names_and_emoji_survive_by_default(url: str, model: str, text: str, keep: list[str]) -> None:
    status, body = post(url, "/api/translate", {"model": model, "text": text})
    assert status == 200, body
    for item in keep:
        assert item in body["translation"], (item, body["translation"])
    assert "Obama" not in body["translation"] and "John" not in body["translation"]
    assert {s["text"] for s in body["protected"]} >= {k for k in keep if k not in ("Zbigniew", "Brzęczyszczykiewicz")}
    cross = body["attention"]["cross"]
    assert len(cross[0][0]) == len(body["target_tokens"]) and len(cross[0][0][0]) == len(body["source_tokens"])


def test_emoji_alone_is_copied_not_hallucinated(url: str) -> None:
    status, body = post(url, "/api/translate", {"model": "en-de-transformer", "text": "🍕🍕🍕"})
    assert status == 200 and body["translation"] == "🍕🍕🍕"
    status, plain = post(url, "/api/translate", {"model": "en-de-transformer", "text": "🍕🍕🍕", "protect": False})
    assert status == 200 and plain["protected"] is None and "🍕" not in plain["translation"]


def test_the_default_gives_way_to_prefix_and_to_a_plain_beam_tree(url: str) -> None:
    model = "en-de-transformer"
    status, body = post(url, "/api/translate", {"model": model, "text": "A man with 2 dogs.", "prefix": "Ein"})
    assert status == 200 and body["protected"] is None and body["forced_tokens"] >= 1
    # Nothing to protect: the plain search (protect off: null) and its beam tree, as asked.
    status, body = post(url, "/api/translate", {"model": model, "text": "A dog runs.", "return_beam": True})
    assert status == 200 and body["beam"] is not None and body["protected"] is None
    # Something to protect: the protected output, and no tree (it searched the masked text).
    status, body = post(url, "/api/translate", {"model": model, "text": "A dog with 12 puppies.", "return_beam": True})
    assert status == 200 and body["beam"] is None and "12" in body["translation"]
    status, body = post(url, "/api/translate", {"model": model, "text": "A dog with 12 puppies.", "return_beam": True, "protect": True})
    assert status == 422 and "return_beam" in body["detail"]


def test_batches_and_models_without_cross_attention(url: str) -> None:
    texts = [SENTENCES[1][0], "A dog runs."]
    status, body = post(url, "/api/translate/batch", {"model": "en-fr-transformer", "texts": texts})
    assert status == 200 and "12" in body[0]["translation"] and body[1]["protected"] == []
    status, body = post(url, "/api/translate", {"model": "en-de-rnn-none", "text": texts[0]})
    assert status == 200 and body["protected"] is None
