"""Copying through placeholders: numbers, emoji and words the vocabulary can only spell byte by
byte are taken out of the source before translation and put back into the output where the
model's cross-attention says they belong.

The models are trained on Multi30k image captions, which have few digits, no emoji and few
names, and they translate such strings badly even though byte fallback lets them spell anything
("bus number 42" -> "Nummer 2"). Here each span is replaced by a word the model translates
reliably (a number by ``two``, a byte-spelled word by ``John``; emoji runs are removed), the
masked sentence is translated, and each span replaces the target word that translates its
placeholder, found by attention: of the output words that equal the model's own translation of
the placeholder word, the one that puts most attention on the placeholder. When the model drops
a placeholder, the span goes beside the output word that attends most to it. An emoji run goes
beside the output word that attends most to the source word it followed (at the end, or the
start, when it was there in the source).

Functions here work on text and on one (target words, source words) attention matrix; the
translator (``app.translator``) runs the model."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from torch import Tensor

Kind = Literal["number", "emoji", "word"]
Span = tuple[int, int]

# What stands in for each kind in the masked source: words the Multi30k models know and keep.
PLACEHOLDERS: dict[str, str] = {"number": "two", "word": "John"}

# A number: digits with inner separators (12/03/2024, 1,234.56, 7:15, 3-2), with a currency sign
# before or after and a percent sign, not glued to letters (3pm and H2O stay with the model).
# Short sentences in which a model shows what it translates each placeholder to.
PLACEHOLDER_CONTEXTS: dict[str, tuple[str, ...]] = {
    "number": ("{} dogs are running.", "A man with {} children.", "The bus number {} is red.", "It is {} o'clock."),
    "word": ("{} is running.", "A man named {} is sitting.", "{} and a dog."),
}

_NUMBER = re.compile(r"(?<![^\W\d_])[$€£¥]?\d+(?:[.,:/\-]\d+)*(?:%|[$€£¥])?(?![^\W\d_])")
_LETTERS = re.compile(r"[^\W\d_]+(?:['’-][^\W\d_]+)*")
_PUNCTUATION = re.compile(r"^[^\w]+$")


def _is_emoji(ch: str) -> bool:
    """Pictographs and the marks that join or modify them (ZWJ, variation selector 16, skin tones,
    keycap); "So" is Unicode's "other symbol" category, which holds every emoji."""
    o = ord(ch)
    return (
        unicodedata.category(ch) == "So"
        or 0x1F000 <= o <= 0x1FAFF
        or o in (0x200D, 0xFE0F, 0x20E3)
    )


@dataclass(frozen=True)
class Protected:
    """One span of the source taken out before translation: ``start``/``end`` in the source
    text, its ``text``, its ``kind`` and where it stands in the masked text: the placeholder's
    span, or for an emoji run (removed) the position it was removed from."""

    start: int
    end: int
    text: str
    kind: Kind
    masked_start: int = 0
    masked_end: int = 0


@dataclass
class Masked:
    """A source with its spans replaced: ``text`` is what the model translates."""

    source: str
    text: str
    spans: list[Protected] = field(default_factory=list)


def find_spans(text: str, spelled_in_bytes: Callable[[str], bool]) -> list[tuple[int, int, Kind]]:
    """Spans worth protecting in ``text``, left to right, not overlapping: numbers, runs of
    emoji, and words for which ``spelled_in_bytes(word)`` is true (the tokenizer has no piece
    for one of their characters)."""
    found: list[tuple[int, int, Kind]] = [(m.start(), m.end(), "number") for m in _NUMBER.finditer(text)]
    i = 0
    while i < len(text):
        if _is_emoji(text[i]) and text[i] not in "\u200d\ufe0f\u20e3":
            j = i + 1
            while j < len(text) and _is_emoji(text[j]):  # skin tones lie in 0x1F000-0x1FAFF
                j += 1
            found.append((i, j, "emoji"))
            i = j
        else:
            i += 1
    found += [(m.start(), m.end(), "word") for m in _LETTERS.finditer(text) if spelled_in_bytes(m.group())]
    found.sort()
    kept: list[tuple[int, int, Kind]] = []
    for span in found:
        if not kept or span[0] >= kept[-1][1]:
            kept.append(span)
    return kept


def mask(text: str, spans: Sequence[tuple[int, int, Kind]]) -> Masked:
    """Replace ``spans`` (from :func:`find_spans`) by their placeholders; emoji runs are removed
    with one space beside them, so no double space is left. Without spans the text is unchanged."""
    if not spans:
        return Masked(source=text, text=text)
    out = ""
    cursor = 0
    protected: list[Protected] = []
    for start, end, kind in spans:
        out += text[cursor:start]
        cursor = end
        if kind == "emoji":
            if (not out or out.endswith(" ")) and text[end : end + 1] == " ":
                cursor += 1  # "pizzas 🍕 at" -> "pizzas at"; "😀 A man" -> "A man"
            position = len(out.rstrip()) if cursor >= len(text.rstrip()) else len(out)
            protected.append(Protected(start, end, text[start:end], kind, position, position))
            continue
        placeholder = PLACEHOLDERS[kind]
        protected.append(Protected(start, end, text[start:end], kind, len(out), len(out) + len(placeholder)))
        out += placeholder
    out += text[cursor:]
    stripped = out.rstrip()
    spans_out = [
        p if p.masked_start <= len(stripped) else Protected(p.start, p.end, p.text, p.kind, len(stripped), len(stripped))
        for p in protected
    ]
    return Masked(source=text, text=stripped, spans=spans_out)


@dataclass(frozen=True)
class Placement:
    """Where a protected span went in the output: ``how`` is ``replaced`` (it took the place of
    the output word that translated its placeholder), ``beside`` (the model dropped the
    placeholder; the span went beside the word that attends most to it) or ``end``/``start``."""

    text: str
    kind: Kind
    how: str
    source_start: int
    source_end: int
    target_start: int
    target_end: int


def _word_at(spans: Sequence[Span], start: int, end: int) -> int | None:
    """The index of the word whose span overlaps ``[start, end)`` most, None if none does."""
    best, best_overlap = None, 0
    for k, (a, b) in enumerate(spans):
        overlap = min(b, end) - max(a, start)
        if overlap > best_overlap:
            best, best_overlap = k, overlap
    return best


def restore(
    masked: Masked,
    translation: str,
    *,
    source_words: Sequence[Span],
    target_words: Sequence[Span],
    word_attention: Tensor,
    placeholder_translations: dict[str, set[str]],
) -> tuple[str, list[Placement]]:
    """Put ``masked``'s spans into ``translation`` (the model's output for ``masked.text``).

    source_words / target_words: character spans of the words of ``masked.text`` and of
    ``translation``; word_attention: (target words, source words) merged cross-attention of the
    output; placeholder_translations: per kind, the lowercased words the model translates its
    placeholder to. Returns the text and one placement per span, in the source's order."""
    n_target = len(target_words)
    words = [translation[a:b] for a, b in target_words]
    content = [j for j in range(n_target) if not _PUNCTUATION.match(words[j])]
    own_source = word_attention.argmax(-1).tolist() if n_target else []
    used: set[int] = set()
    edits: list[tuple[int, int, str, int]] = []  # (start, end, text, index of the span)
    hows: dict[int, str] = {}

    def most_attending(k: int) -> int | None:
        pool = content or list(range(n_target))
        return max(pool, key=lambda j: float(word_attention[j, k])) if pool else None

    def append_at_end(index: int, text: str) -> None:
        edits.append((len(translation), len(translation), (" " if translation else "") + text, index))
        hows[index] = "end"

    def beside(index: int, k: int, text: str) -> None:
        j = most_attending(k)
        if j is None:
            append_at_end(index, text)
            return
        a, b = target_words[j]
        if own_source[j] > k:  # that word translates something after the span: go before it
            edits.append((a, a, text + " ", index))
        else:
            edits.append((b, b, " " + text, index))
        hows[index] = "beside"

    # The source word each placeholder became (emoji have none).
    slot = {
        index: _word_at(source_words, span.masked_start, span.masked_end)
        for index, span in enumerate(masked.spans)
        if span.kind != "emoji"
    }
    placeholders = {k for k in slot.values() if k is not None}
    for index, span in enumerate(masked.spans):
        if span.kind == "emoji":
            before = [k for k, (a, b) in enumerate(source_words) if b <= span.masked_start]
            after_text = masked.text[span.masked_start :].strip()
            if not after_text or _PUNCTUATION.match(after_text) or not before:
                at_end = bool(before) or not masked.text
                position = len(translation) if at_end else 0
                gap = " " if (at_end and span.start > 0 and masked.source[span.start - 1] == " ") or not at_end else ""
                text = gap + span.text if at_end else span.text + gap
                edits.append((position, position, text, index))
                hows[index] = "end" if at_end else "start"
            else:
                beside(index, before[-1], span.text)
            continue
        k = slot[index]
        if k is None or not n_target:
            append_at_end(index, span.text)
            continue
        wanted = placeholder_translations.get(span.kind, set())
        # An output word translating this placeholder, not a source word of the same spelling
        # ("Two men and 2 women" -> "two men and two women"): it must not attend most to one.
        real = {
            i for i, (a, b) in enumerate(source_words)
            if i not in placeholders and masked.text[a:b].lower() == PLACEHOLDERS[span.kind].lower()
        }
        candidates = [
            j for j in range(n_target) if j not in used and words[j].lower() in wanted and own_source[j] not in real
        ]
        if candidates:
            j = max(candidates, key=lambda j: (own_source[j] == k, float(word_attention[j, k])))
            used.add(j)
            a, b = target_words[j]
            edits.append((a, b, span.text, index))
            hows[index] = "replaced"
        else:
            beside(index, k, span.text)

    # Apply left to right, tracking where each span lands in the new text.
    text, shift = translation, 0
    landed: dict[int, tuple[int, int]] = {}
    for start, end, new, index in sorted(edits, key=lambda e: (e[0], e[1], e[3])):
        start, end = start + shift, end + shift
        text = text[:start] + new + text[end:]
        offset = new.index(masked.spans[index].text)
        landed[index] = (start + offset, start + offset + len(masked.spans[index].text))
        shift += len(new) - (end - start)
    placements = [
        Placement(span.text, span.kind, hows[i], span.start, span.end, landed[i][0], landed[i][1])
        for i, span in enumerate(masked.spans)
    ]
    return text, placements
