"""Copying through placeholders (attnscope.text.protect): which spans are protected, the masked text,
and where attention puts each span back, on hand-built attention matrices."""

from __future__ import annotations

import torch

from attnscope.text.protect import PLACEHOLDERS, find_spans, mask, restore


def no_bytes(word: str) -> bool:
    return False


def spans_of(text: str, spelled_in_bytes=no_bytes) -> list[tuple[str, str]]:  # type: ignore[no-untyped-def]
    return [(text[a:b], kind) for a, b, kind in find_spans(text, spelled_in_bytes)]


def words(text: str) -> list[tuple[int, int]]:
    """Whitespace words with a final full stop split off (enough for these hand-built cases)."""
    out = []
    cursor = 0
    for token in text.split():
        start = text.index(token, cursor)
        if token.endswith(".") and len(token) > 1:
            out += [(start, start + len(token) - 1), (start + len(token) - 1, start + len(token))]
        else:
            out.append((start, start + len(token)))
        cursor = start + len(token)
    return out


def test_numbers_with_separators_currency_and_percent_are_one_span_each() -> None:
    text = "On 12/03/2024 he paid $1,234.56 for 3 pizzas at 7:15, 20% off."
    assert spans_of(text) == [("12/03/2024", "number"), ("$1,234.56", "number"), ("3", "number"),
                              ("7:15", "number"), ("20%", "number")]


def test_digits_glued_to_letters_stay_with_the_model() -> None:
    assert spans_of("Meet at 3pm with H2O and R2D2.") == []


def test_emoji_runs_with_joiners_and_skin_tones_are_one_span() -> None:
    family = "👨\u200d👩\u200d👧"
    text = f"A family {family} waves 👋🏽 and laughs 😂😂!"
    assert spans_of(text) == [(family, "emoji"), ("👋🏽", "emoji"), ("😂😂", "emoji")]


def test_words_are_protected_only_when_spelled_in_bytes() -> None:
    text = "Dr. Brzęczyszczykiewicz meets Пётр and Anna."
    assert spans_of(text, lambda w: any(ord(c) > 0x17F or c == "ę" for c in w)) == [
        ("Brzęczyszczykiewicz", "word"), ("Пётр", "word")]


def test_mask_puts_placeholders_where_the_spans_were_and_removes_emoji_cleanly() -> None:
    text = "😀 A man sells 12 pizzas 🍕 at 7:15 🎉"
    masked = mask(text, find_spans(text, no_bytes))
    assert masked.text == "A man sells two pizzas at two"
    number = PLACEHOLDERS["number"]
    for span in masked.spans:
        assert text[span.start : span.end] == span.text
        if span.kind == "number":
            assert masked.text[span.masked_start : span.masked_end] == number
    assert [s.masked_start for s in masked.spans if s.kind == "emoji"] == [0, len("A man sells two pizzas "), len(masked.text)]


def test_a_text_without_spans_is_unchanged() -> None:
    text = "A dog runs on the grass.  "
    masked = mask(text, find_spans(text, no_bytes))
    assert masked.text == text and masked.spans == []


def attention_to(pairs: dict[int, int], n_target: int, n_source: int) -> torch.Tensor:
    """(target words, source words) attention: target j attends 0.9 to ``pairs[j]``."""
    a = torch.full((n_target, n_source), 0.1 / max(n_source - 1, 1))
    for j, i in pairs.items():
        a[j, i] = 0.9
    return a


def test_a_source_word_spelled_like_the_placeholder_keeps_its_translation() -> None:
    source = "Two men and 2 women play 1 game."
    masked = mask(source, find_spans(source, no_bytes))
    assert masked.text == "Two men and two women play two game."
    out = "Zwei Männer und zwei Frauen spielen ein Spiel."  # the second placeholder became "ein"
    # target: Zwei Männer und zwei Frauen spielen ein Spiel . ; source: Two men and two women play two game .
    attention = attention_to({0: 0, 1: 1, 2: 2, 3: 3, 4: 4, 5: 5, 6: 6, 7: 7, 8: 8}, 9, 9)
    text, placements = restore(masked, out, source_words=words(masked.text), target_words=words(out),
                               word_attention=attention, placeholder_translations={"number": {"zwei", "two"}})
    # "Zwei" translates the real "Two": only the first placeholder's "zwei" is replaced, and the
    # second span goes beside "ein", the word attending to its placeholder.
    assert text == "Zwei Männer und 2 Frauen spielen ein 1 Spiel."
    assert [(p.how, text[p.target_start : p.target_end]) for p in placements] == [("replaced", "2"), ("beside", "1")]


def test_attention_decides_between_two_placeholders_in_reversed_order() -> None:
    source = "Room 42 has 7 beds."
    masked = mask(source, find_spans(source, no_bytes))
    out = "Zwei Betten hat Zimmer zwei."  # the model reordered: "zwei" (beds) comes first
    # target: Zwei Betten hat Zimmer zwei . ; source: Room two has two beds .
    attention = attention_to({0: 3, 1: 4, 2: 2, 3: 0, 4: 1, 5: 5}, 6, 6)
    text, placements = restore(masked, out, source_words=words(masked.text), target_words=words(out),
                               word_attention=attention, placeholder_translations={"number": {"zwei"}})
    assert text == "7 Betten hat Zimmer 42."
    assert [(p.text, text[p.target_start : p.target_end]) for p in placements] == [("42", "42"), ("7", "7")]


def test_a_dropped_placeholder_goes_beside_the_word_attending_most_to_it() -> None:
    source = "A man sells 12 pizzas."
    masked = mask(source, find_spans(source, no_bytes))
    out = "Ein Mann verkauft Pizza."
    # target: Ein Mann verkauft Pizza . ; source: A man sells two pizzas .
    # "Pizza" translates "pizzas" (after the placeholder) and attends most to it: go before.
    attention = attention_to({0: 0, 1: 1, 2: 2, 3: 4, 4: 5}, 5, 6)
    attention[3, 3] = 0.5
    text, placements = restore(masked, out, source_words=words(masked.text), target_words=words(out),
                               word_attention=attention, placeholder_translations={"number": {"zwei"}})
    assert text == "Ein Mann verkauft 12 Pizza."
    assert placements[0].how == "beside"
    assert text[placements[0].target_start : placements[0].target_end] == "12"


def test_emoji_keep_their_place_at_the_start_the_end_and_after_their_word() -> None:
    source = "😀 A dog 🐶 runs. 🎉"
    masked = mask(source, find_spans(source, no_bytes))
    assert masked.text == "A dog runs."
    out = "Ein Hund rennt."
    attention = attention_to({0: 0, 1: 1, 2: 2, 3: 3}, 4, 4)
    text, placements = restore(masked, out, source_words=words(masked.text), target_words=words(out),
                               word_attention=attention, placeholder_translations={})
    assert text == "😀 Ein Hund 🐶 rennt. 🎉"
    assert [p.how for p in placements] == ["start", "beside", "end"]
    for p in placements:
        assert text[p.target_start : p.target_end] == p.text
        assert source[p.source_start : p.source_end] == p.text


def test_a_placeholder_written_twice_or_glued_leaves_no_trace() -> None:
    source = "Anna meets 3 dogs."
    masked = mask(source, [(0, 4, "word"), (11, 12, "number")])
    assert masked.text == f"{PLACEHOLDERS['word']} meets two dogs."
    out = "ObamaObama trifft zwei Hunde und zwei Hunde."
    # target: ObamaObama trifft zwei Hunde und zwei Hunde . ; source: Obama meets two dogs .
    attention = attention_to({0: 0, 1: 1, 2: 2, 3: 3, 4: 3, 5: 2, 6: 3, 7: 4}, 8, 5)
    text, placements = restore(masked, out, source_words=words(masked.text), target_words=words(out),
                               word_attention=attention, placeholder_translations={"number": {"zwei"}, "word": {"obama"}})
    assert text == "Anna trifft 3 Hunde und Hunde."
    assert "obama" not in text.lower() and "zwei" not in text
    assert [(p.how, text[p.target_start : p.target_end]) for p in placements] == [("replaced", "Anna"), ("replaced", "3")]


def test_glued_inside_a_word_only_the_placeholder_part_goes() -> None:
    source = "A woman named Zoe Liu sits."
    masked = mask(source, [(14, 21, "word")])
    out = "Eine Frau namensObama sitzt."
    attention = attention_to({0: 0, 1: 1, 2: 3, 3: 4, 4: 5}, 5, 6)
    text, placements = restore(masked, out, source_words=words(masked.text), target_words=words(out),
                               word_attention=attention, placeholder_translations={"word": {"obama"}})
    assert text == "Eine Frau namens Zoe Liu sitzt."
    assert text[placements[0].target_start : placements[0].target_end] == "Zoe Liu"


def test_a_text_of_spans_alone_is_copied_through() -> None:
    from attnscope.text.protect import copy_through, nothing_to_translate

    for text in ("🍕🍕🍕", " 42 ", "www.example.org", "😀 😀!"):
        masked = mask(text, find_spans(text, no_bytes))
        assert nothing_to_translate(masked)
        out, placements = copy_through(masked)
        assert out == text.strip() and {p.how for p in placements} == {"copied"}
        for p in placements:
            assert out[p.target_start : p.target_end] == p.text
    assert not nothing_to_translate(mask("A dog and 2 cats.", find_spans("A dog and 2 cats.", no_bytes)))
