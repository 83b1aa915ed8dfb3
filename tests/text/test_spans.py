"""Which spans are copied through (attnscope.text.spans): links, and names told by how a tokenizer
splits them, here a hand-made one: "known" words are one piece, anything else a piece per two
letters (the shape of an 8,000-piece Multi30k vocabulary: ▁J ü r gen)."""

from __future__ import annotations

from attnscope.text.spans import find_spans

KNOWN = {"a", "the", "two", "family", "japanese", "three", "people", "man", "dog", "visit", "write"}


def pieces(word: str) -> int:
    if word.lower() == word and word in KNOWN:
        return 1
    if word in {"Japanese", "Family"}:
        return 2  # ▁Japan ese: long pieces
    return max(1, (len(word) + 1) // 2)


def no_bytes(word: str) -> bool:
    return False


def spans_of(text: str) -> list[tuple[str, str]]:
    return [(text[a:b], kind) for a, b, kind in find_spans(text, no_bytes, pieces)]


def test_urls_and_email_addresses_are_one_span_without_the_final_full_stop() -> None:
    text = "Visit https://example.org/shop?id=7 or www.attnscope.dev, write to anna.schmidt@example.com."
    assert spans_of(text) == [("https://example.org/shop?id=7", "word"), ("www.attnscope.dev", "word"),
                              ("anna.schmidt@example.com", "word")]  # fmt: skip


def test_unknown_capitalised_words_are_names_and_neighbours_with_a_title_go_together() -> None:
    text = "On 12/03/2024 Dr. Zbigniew Brzeczyszczykiewicz met Anna in Sao Paulo."
    assert spans_of(text) == [("12/03/2024", "number"), ("Dr. Zbigniew Brzeczyszczykiewicz", "word"),
                              ("Anna", "word"), ("Sao Paulo", "word")]  # fmt: skip


def test_known_words_long_pieces_and_sentence_starts_stay_with_the_model() -> None:
    assert spans_of("The Japanese Family walks. Three people and a dog.") == []
    assert spans_of("Jurgen walks.") == [("Jurgen", "word")]  # a sentence-initial name


def test_without_the_tokenizer_only_numbers_emoji_links_and_byte_words_count() -> None:
    text = "Anna pays $3 at www.shop.de 🍕"
    found = [(text[a:b], k) for a, b, k in find_spans(text, no_bytes)]
    assert found == [("$3", "number"), ("www.shop.de", "word"), ("🍕", "emoji")]


def test_sentence_starters_days_and_months_are_never_names() -> None:
    assert spans_of("These kids play on Saturday in May.") == []
