"""The SentencePiece wrapper: fixed special ids, lossless text round trips, and subword -> word
grouping for the word-level view."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import sentencepiece as spm
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attnscope.nn.config import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from attnscope.testing import TINY_PAIRS, tiny_tokenizer
from attnscope.text import EOS_PIECE, Tokenizer, group_words

SENTENCES = [s for pair in TINY_PAIRS for s in pair]


@pytest.fixture(scope="module")
def tokenizer(tiny_models_dir: Path) -> Tokenizer:
    return Tokenizer.load(tiny_models_dir / "en-de-transformer" / "tokenizer.model")


def test_special_ids_are_pad_unk_bos_eos(tokenizer: Tokenizer) -> None:
    sp = tokenizer.sp
    assert (PAD_ID, UNK_ID, BOS_ID, EOS_ID) == (0, 1, 2, 3)
    assert (sp.pad_id(), sp.unk_id(), sp.bos_id(), sp.eos_id()) == (0, 1, 2, 3)
    assert tokenizer.pieces([BOS_ID, EOS_ID]) == ["<s>", EOS_PIECE]
    assert EOS_PIECE == "</s>"


@pytest.mark.parametrize("text", SENTENCES[:6] + ["Zwei Mädchen spielen Fußball im Wasser."])
def test_encode_decode_round_trip(tokenizer: Tokenizer, text: str) -> None:
    ids = tokenizer.encode(text)
    assert ids and all(EOS_ID < i < tokenizer.vocab_size for i in ids if i != UNK_ID)
    assert tokenizer.decode(ids) == text
    # special ids are dropped on the way back
    assert tokenizer.decode([BOS_ID, *ids, EOS_ID, PAD_ID, PAD_ID]) == text


def test_pieces_match_ids_and_mark_word_starts(tokenizer: Tokenizer) -> None:
    ids = tokenizer.encode("A man is riding a bicycle.")
    pieces = tokenizer.pieces(ids + [EOS_ID])
    assert len(pieces) == len(ids) + 1 and pieces[-1] == EOS_PIECE
    assert "".join(pieces[:-1]).replace("\u2581", " ").strip() == "A man is riding a bicycle."


def test_save_and_load(tmp_path: Path, tokenizer: Tokenizer) -> None:
    (tmp_path / "t.model").write_bytes(b"an older file, a reader may hold it open")
    held = (tmp_path / "t.model").open("rb")
    tokenizer.save(tmp_path / "t.model")  # replaces the file whole: the reader keeps the old one
    assert held.read() == b"an older file, a reader may hold it open"
    held.close()
    assert [p.name for p in tmp_path.iterdir()] == ["t.model"]  # no partial file left beside it
    again = Tokenizer.load(tmp_path / "t.model")
    assert again.vocab_size == tokenizer.vocab_size
    assert all(again.encode(s) == tokenizer.encode(s) for s in SENTENCES)


def test_other_special_ids_are_refused() -> None:
    buffer = io.BytesIO()
    spm.SentencePieceTrainer.train(  # SentencePiece's defaults: unk 0, bos 1, eos 2, no pad
        sentence_iterator=iter(SENTENCES * 3),
        model_writer=buffer,
        vocab_size=60,
        hard_vocab_limit=False,
        minloglevel=2,
    )
    with pytest.raises(ValueError, match="expected pad/unk/bos/eos = 0/1/2/3"):
        Tokenizer(buffer.getvalue())


@pytest.mark.parametrize(
    ("pieces", "words"),
    [
        (
            ["\u2581A", "\u2581man", "\u2581rid", "ing", "\u2581a", "\u2581bi", "cy", "cle", "."],
            [[0], [1], [2, 3], [4], [5, 6, 7, 8]],
        ),
        (["\u2581Ein", "\u2581Hund", "</s>"], [[0], [1], [2]]),
        (
            ["<s>", "ing", "s", "\u2581x"],
            [[0], [1, 2], [3]],
        ),  # a piece after a special opens a word
        (["ab", "c", "\u2581d"], [[0, 1], [2]]),  # a leading continuation still makes a word
        (["\u2581a", "</s>", "</s>"], [[0], [1], [2]]),
        ([], []),
    ],
)
def test_group_words(pieces: list[str], words: list[list[int]]) -> None:
    assert group_words(pieces) == words


@pytest.mark.parametrize(
    "text",
    [
        "On 12/03/2024 Dr. Zbigniew Brzęczyszczykiewicz paid $1,234.56 for 3 pizzas 🍕🍕 at Café Müller — wow!!! 😀",
        "  two  spaces, a tab\tand ＦＵＬＬＷＩＤＴＨ",
        "שלום עולם مرحبا 你好",
    ],
)
def test_byte_fallback_tokenizer_is_lossless_and_splits_digits(text: str) -> None:
    tok = Tokenizer.train(SENTENCES * 3, 400, byte_fallback=True)
    ids = tok.encode(text)
    assert UNK_ID not in ids
    assert tok.decode(ids) == text
    digit_ids = tok.encode("12233")
    assert "".join(tok.decode([i]) for i in digit_ids) == "12233"
    assert all(len(tok.decode([i]).strip()) <= 1 for i in digit_ids)  # one digit per piece


# -- lossless round trip (byte fallback) and visible <unk> (older models) -------------------------

EMOJI = "🍕😀👍🏽👨‍👩‍👧🇩🇪❤️"
RTL = "שלום עולם مرحبا بالعالم"
SPECIAL = " \t\n\r\u00a0\u2581\u200b\u0301\u3000ﬁＡ"  # whitespace, ▁ itself, zero-width, combining, NFKC-changed
ANY_TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=60)  # any valid Unicode
MIXED = st.lists(
    st.sampled_from(SENTENCES[:4]) | st.text(EMOJI + RTL + SPECIAL + "0123456789$€.,-/", min_size=1, max_size=8),
    max_size=6,
).map("".join)


@pytest.fixture(scope="module")
def lossless() -> Tokenizer:
    return tiny_tokenizer(byte_fallback=True)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=ANY_TEXT | MIXED)
def test_byte_fallback_round_trips_any_text(lossless: Tokenizer, text: str) -> None:
    ids = lossless.encode(text)
    assert UNK_ID not in ids and all(EOS_ID < i < lossless.vocab_size for i in ids)
    assert lossless.decode(ids) == text


def test_the_word_marker_character_itself_round_trips(lossless: Tokenizer) -> None:
    for text in ["\u2581", "a\u2581b", "\u2581 a", " \u2581", "x\u2581\u2581 \u2581y "]:
        assert lossless.decode(lossless.encode(text)) == text
    assert lossless.pieces(lossless.encode("\u2581")) == ["<0xE2>", "<0x96>", "<0x81>"]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_decode_agrees_with_sentencepiece_except_for_unk(
    lossless: Tokenizer, tokenizer: Tokenizer, data: st.DataObject
) -> None:
    """Any id sequence a model can emit (broken UTF-8 included) renders as SentencePiece would,
    with pad/<s>/</s> dropped; only <unk> differs (shown as ⁇ rather than SentencePiece's " ⁇ ")."""
    tok = data.draw(st.sampled_from([lossless, tokenizer]))
    ids = data.draw(st.lists(st.integers(EOS_ID + 1, tok.vocab_size - 1), max_size=12))
    assert tok.decode(ids) == tok.sp.decode(ids)
    assert tok.decode([BOS_ID, *ids, EOS_ID, PAD_ID]) == tok.decode(ids)


def test_broken_utf8_from_a_model_shows_a_mark_per_byte(lossless: Tokenizer) -> None:
    f0, hund = lossless.sp.piece_to_id("<0xF0>"), lossless.encode("Hund")
    assert lossless.decode([f0, f0, *hund]) == "\ufffd\ufffd Hund"


def test_unk_is_shown_never_dropped(tokenizer: Tokenizer) -> None:
    """A tokenizer without byte fallback maps unseen characters to <unk>: decoding shows ⁇ where
    they were, and unk_spans gives the original text behind each one."""
    assert not tokenizer.byte_fallback
    text = "Ein Hund 🍕 spielt ♥ im Schnee."
    ids = tokenizer.encode(text)
    assert ids.count(UNK_ID) == 2
    assert tokenizer.decode(ids) == "Ein Hund ⁇ spielt ⁇ im Schnee."
    assert tokenizer.decode([UNK_ID]) == "⁇"
    assert tokenizer.unk_spans(text) == ["🍕", "♥"]
    assert tokenizer.unk_spans("Ein Hund") == []
