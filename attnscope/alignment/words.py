"""Words for alignment: Moses-style word tokenisation with character offsets, and the map from
subword pieces to those words by character offsets.

The tokenizer's own word grouping (``attnscope.text.tokenizer.group_words``: a new word at each "▁")
glues punctuation to words ("Mann," is one group), which a word aligner never does; so alignment
is scored over Moses words (sacremoses, ``escape=False``), and each piece belongs to the word its
characters overlap most.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from attnscope.text.tokenizer import WORD_START

Span = tuple[int, int]  # [start, end) character offsets into the sentence


@lru_cache(maxsize=8)
def _moses(lang: str) -> Any:
    from sacremoses import MosesTokenizer  # imported here: only alignment needs it

    return MosesTokenizer(lang=lang)


def moses_words(text: str, lang: str) -> list[str]:
    """Moses tokens of ``text`` (no HTML escaping, so every token is text from the sentence)."""
    return [str(t) for t in _moses(lang).tokenize(text, escape=False)]


def locate(text: str, tokens: list[str]) -> list[Span]:
    """Character spans of ``tokens`` found left to right in ``text``. A token the tokenizer
    altered (never with ``escape=False`` on ordinary text) takes the next ``len(token)`` characters."""
    spans: list[Span] = []
    cursor = 0
    for token in tokens:
        start = text.find(token, cursor)
        if start < 0:
            while cursor < len(text) and text[cursor].isspace():
                cursor += 1
            start = cursor
        end = min(start + len(token), len(text))
        spans.append((start, end))
        cursor = end
    return spans


def word_spans(text: str, lang: str) -> list[Span]:
    """Spans of the Moses words of ``text``."""
    return locate(text, moses_words(text, lang))


def _byte(piece: str) -> int | None:
    """The byte of a byte-fallback piece such as ``<0xE6>``, else None."""
    if len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
        try:
            return int(piece[3:5], 16)
        except ValueError:
            return None
    return None


def piece_spans(text: str, pieces: list[str]) -> list[Span | None]:
    """Character span of each SentencePiece piece of ``text`` (None for a lone "▁", which covers
    only whitespace). Pieces are matched left to right after skipping whitespace. Byte-fallback
    pieces (``<0xE6>``) spell a character's UTF-8 bytes: the lead byte takes the character, the
    continuation bytes share its span. A piece that does not match (the tokenizer normalised the
    text, or ``<unk>``) takes one character."""
    spans: list[Span | None] = []
    cursor = 0
    for piece in pieces:
        byte = _byte(piece)
        if byte is not None and 0x80 <= byte < 0xC0 and spans and spans[-1] is not None:
            spans.append(spans[-1])  # a continuation byte of the character before
            continue
        surface = piece.replace(WORD_START, " ").strip() if byte is None else "?"
        while cursor < len(text) and text[cursor].isspace():
            cursor += 1
        if not surface:
            spans.append(None)
            continue
        if text.startswith(surface, cursor):
            spans.append((cursor, cursor + len(surface)))
            cursor += len(surface)
        else:
            end = min(cursor + 1, len(text))
            spans.append((cursor, end))
            cursor = end
    return spans


def pieces_to_words(text: str, pieces: list[str], words: list[Span]) -> list[int]:
    """For each piece of ``text``, the index of the word (``words``: spans) it overlaps most
    (ties: the first). A piece overlapping none (whitespace) joins the next piece's word.
    Special pieces (``</s>``) must not be passed. Returns one word index per piece."""
    return spans_to_words(piece_spans(text, pieces), words)


def spans_to_words(spans: list[Span | None], words: list[Span]) -> list[int]:
    """For each piece's character span (None: whitespace only), the index of the word it
    overlaps most (ties: the first); a piece overlapping none joins the next piece's word (the
    rule of :func:`pieces_to_words`, for tokenizers that give offsets themselves)."""
    if not words:
        raise ValueError("a sentence without words cannot be aligned")
    result: list[int | None] = []
    for span in spans:
        if span is None:
            result.append(None)
            continue
        start, end = span
        overlaps = [max(0, min(end, w_end) - max(start, w_start)) for w_start, w_end in words]
        best = max(range(len(words)), key=lambda k: (overlaps[k], -k))
        if overlaps[best] == 0:  # between words: the first word that ends after the piece
            best = next((k for k, (_, w_end) in enumerate(words) if w_end > start), len(words) - 1)
        result.append(best)
    filled: list[int] = []
    following = len(words) - 1
    for value in reversed(result):  # whitespace pieces take the next piece's word
        following = following if value is None else value
        filled.append(following)
    return filled[::-1]
