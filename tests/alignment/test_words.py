"""Moses words with character offsets and subword pieces mapped onto them."""

from __future__ import annotations

from attnscope.alignment.words import locate, moses_words, pieces_to_words, word_spans


def test_moses_words_split_punctuation_and_clitics() -> None:
    assert moses_words("A man's dog, isn't it?", "en") == ["A", "man", "'s", "dog", ",", "isn", "'t", "it", "?"]
    assert moses_words("L'homme est là.", "fr") == ["L'", "homme", "est", "là", "."]


def test_spans_point_at_the_words() -> None:
    text = 'Ein Mann,  der "Straßen" hält.'
    spans = word_spans(text, "de")
    assert [text[a:b] for a, b in spans] == ["Ein", "Mann", ",", "der", '"', "Straßen", '"', "hält", "."]


def test_locate_survives_a_token_not_in_the_text() -> None:
    assert locate("ab  cd", ["ab", "XY"]) == [(0, 2), (4, 6)]


def test_pieces_map_by_offsets_on_punctuation_and_apostrophes() -> None:
    text = "A man's dog, isn't it?"
    words = word_spans(text, "en")  # A man 's dog , isn 't it ?
    # "▁man" "'s" : the tokenizer's own grouping would glue "'s" to "man"; by offsets it is its own
    # word. "s" alone (from "isn't" split as "▁is" "n" "'" "t") follows the span overlap.
    pieces = ["▁A", "▁man", "'", "s", "▁dog", ",", "▁is", "n", "'", "t", "▁it", "?"]
    assert pieces_to_words(text, pieces, words) == [0, 1, 2, 2, 3, 4, 5, 5, 6, 6, 7, 8]


def test_a_piece_spanning_two_words_goes_to_the_larger_overlap_and_lone_spaces_to_the_next() -> None:
    text = "go, now"
    words = word_spans(text, "en")  # go , now
    assert pieces_to_words(text, ["▁g", "o,", "▁", "now"], words) == [0, 0, 2, 2]
    # non-ASCII: offsets are characters, not bytes
    text = "Männer ßen."
    assert pieces_to_words(text, ["▁Mä", "nner", "▁ß", "en", "."], word_spans(text, "de")) == [0, 0, 1, 1, 2]


def test_byte_fallback_pieces_take_one_character_per_utf8_sequence() -> None:
    text = "ok 日本 !"
    words = word_spans(text, "fr")  # ok 日 本 !
    assert [text[a:b] for a, b in words] == ["ok", "日", "本", "!"]
    pieces = ["▁ok", "▁", "<0xE6>", "<0x97>", "<0xA5>", "<0xE6>", "<0x9C>", "<0xAC>", "▁!"]
    assert pieces_to_words(text, pieces, words) == [0, 1, 1, 1, 1, 2, 2, 2, 3]
