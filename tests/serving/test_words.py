"""Words in the API's answers for a byte-fallback model: a character spelled in byte pieces
(🍕 = <0xF0><0x9F><0x8D><0x95>) is never split between words, and each word's text shows the
characters, not the pieces. And for a model without byte fallback, <unk> words show what the
model could not see."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attnscope.engine.limits import visible
from attnscope.text.pieces import WORD_START, piece_byte

TEXT = st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=40).filter(visible) | st.sampled_from(
    [
        "On 12/03/2024 Dr. Zbigniew Brzęczyszczykiewicz paid $1,234.56 for 3 pizzas 🍕🍕 at Café Müller — wow!!! 😀",
        "A man 👨‍👩‍👧 is riding a bicycle. שלום עולם مرحبا",
        "ﬁ ＦＵＬＬ  tab\there \u2581 marker",
    ]
)


@pytest.fixture(scope="module")
def byte_client(byte_models_dir: Path, client_for: Any) -> Iterator[TestClient]:
    with client_for(byte_models_dir) as test_client:
        yield test_client


def byte_runs(tokens: list[str]) -> list[list[int]]:
    """Maximal runs of consecutive byte pieces, as token indices."""
    runs: list[list[int]] = []
    for i, token in enumerate(tokens):
        if piece_byte(token) is None:
            continue
        if runs and runs[-1][-1] == i - 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    return runs


def expected_text(tokens: list[str]) -> str:
    """A word's text worked out independently: its bytes (byte pieces as they are, other pieces
    UTF-8 encoded without the ▁ marker), decoded with one U+FFFD per broken byte."""
    raw = b"".join(
        bytes([b]) if (b := piece_byte(t)) is not None else t.replace(WORD_START, "").encode() for t in tokens
    )
    out, i = [], 0
    while i < len(raw):
        for width in (4, 3, 2, 1):  # the longest valid character starting here
            try:
                out.append(raw[i : i + width].decode())
                i += width
                break
            except UnicodeDecodeError:
                continue
        else:
            out.append("\ufffd")
            i += 1
    return "".join(out)


def check_words(tokens: list[str], words: list[dict[str, Any]]) -> None:
    owner = {i: n for n, w in enumerate(words) for i in w["tokens"]}
    assert sorted(owner) == list(range(len(tokens)))
    for run in byte_runs(tokens):
        assert len({owner[i] for i in run}) == 1, f"byte run {[tokens[i] for i in run]} split between words"
    for w in words:
        assert w["text"] == expected_text([tokens[i] for i in w["tokens"]])
        assert "<0x" not in w["text"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=TEXT, model=st.sampled_from(["en-de-transformer", "en-de-rnn-additive"]))
def test_byte_pieces_never_split_a_character_between_words(byte_client: TestClient, text: str, model: str) -> None:
    r = byte_client.post("/api/translate", json={"model": model, "text": text, "beam_size": 2, "max_length": 12})
    assert r.status_code == 200, r.text
    answer = r.json()
    assert "<unk>" not in answer["source_tokens"]
    check_words(answer["source_tokens"], answer["source_words"])
    check_words(answer["target_tokens"], answer["target_words"])  # random weights: any bytes at all
    # the source words spell the text back, less the spaces that separate them
    assert "".join(w["text"] for w in answer["source_words"][:-1]) == text.replace(" ", "")


def test_emoji_word_reads_as_the_emoji(byte_client: TestClient) -> None:
    r = byte_client.post("/api/translate", json={"model": "en-de-transformer", "text": "A 🍕 and 12 dogs.", "beam_size": 1})
    answer = r.json()
    assert [w["text"] for w in answer["source_words"]] == ["A", "🍕", "and", "12", "dogs.", "</s>"]
    pizza = answer["source_words"][1]["tokens"]
    assert [answer["source_tokens"][i] for i in pizza][-4:] == ["<0xF0>", "<0x9F>", "<0x8D>", "<0x95>"]


def test_unk_words_show_the_original_text(client: TestClient) -> None:
    """The tiny models' tokenizer has no byte fallback: 🍕 and ♥ become <unk> pieces, and their
    words show the characters behind them; the translation shows ⁇, never drops them."""
    r = client.post("/api/translate", json={"model": "en-de-transformer", "text": "A 🍕 and a ♥.", "beam_size": 1})
    answer = r.json()
    assert answer["source_tokens"].count("<unk>") == 2
    texts = [w["text"] for w in answer["source_words"]]
    assert "🍕" in texts and "♥." in texts


@pytest.mark.parametrize("text", ["\u200b", "\u200b\u200d\ufeff", "\x01\x02\x7f", "\u202e\u200f", "\x00"])
@pytest.mark.parametrize("model", ["en-de-transformer", "en-de-rnn-additive"])
def test_text_with_nothing_visible_is_a_422_also_with_byte_fallback(byte_client: TestClient, text: str, model: str) -> None:
    """Byte fallback would spell zero-width and control characters in byte pieces and translate
    them into a hallucination; docs/api.md promises a 422 for text with nothing visible (issue 35)."""
    r = byte_client.post("/api/translate", json={"model": model, "text": text})
    assert r.status_code == 422, r.text
    assert "no tokens" in r.json()["detail"] and r.json()["errors"][0]["field"] == "text"
    r = byte_client.post("/api/translate", json={"model": model, "text": f"A man{text} rides."})
    assert r.status_code == 200, r.text  # beside visible text they are welcome
