"""Which parts of a source sentence to copy through verbatim rather than translate: numbers,
runs of emoji, links (URLs and e-mail addresses), words the vocabulary can spell only byte by byte,
and names the models do not know.

The Multi30k models were trained on image captions, so they know few digits, no emoji and few
names; a name they have not seen is split into many subword pieces and comes back as a plausible
word of the target language ("Jürgen" -> "Juner"). The tokenizer tells us which words those are:
a capitalised word split into short pieces (``_unknown``: "Jürgen" ▁J ü r gen, "Anna" ▁an n a) is
taken for a name; "Japanese" (▁Japan ese) and "Family" (▁family) are not. Neighbouring
capitalised words go together ("São Paulo", "Dr. Zbigniew Brzęczyszczykiewicz") so that a name is
one span, and a leading common word stays with the model ("The Beatles" -> "The" is translated).

Functions here work on text only; the tokenizer is passed in as two callbacks."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from typing import Literal

Kind = Literal["number", "emoji", "word"]
FoundSpan = tuple[int, int, Kind]

# A number: digits with inner separators (12/03/2024, 1,234.56, 7:15, 3-2), with a currency sign
# before or after and a percent sign, not glued to letters (3pm and H2O stay with the model).
_NUMBER = re.compile(r"(?<![^\W\d_])[$€£¥]?\d+(?:[.,:/\-]\d+)*(?:%|[$€£¥])?(?![^\W\d_])")
# Combining marks belong to their letter ("Adébáyọ̀" ends in U+0300, which is not a \w).
_MARKS = "\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f"
_LETTER = rf"(?:[^\W\d_]|[{_MARKS}])"
_LETTERS = re.compile(rf"[^\W\d_]{_LETTER}*(?:['’-]{_LETTER}+)*")
# Links: URLs (with a scheme or www.) and e-mail addresses, without a final full stop or bracket.
_LINK = re.compile(
    r"(?:https?://|www\.)[^\s<>\"]*[^\s<>\".,;:!?)\]'’]"
    r"|[\w.+-]+@[\w-]+(?:\.[\w-]+)*\.[^\W\d_]{2,}"
)
# Titles that go with the name after them ("Dr. Zbigniew ..." is one span).
TITLES = frozenset({"Dr", "Mr", "Mrs", "Ms", "Prof", "St"})
# Fewest subword pieces that make a capitalised word a name: in mid-sentence (its own spelling),
# at the start of a sentence (its lowercase form, so that "Three" and "People" stay words).
NAME_PIECES_INSIDE = 2
NAME_PIECES_INITIAL = 3
NAME_CHARS_PER_PIECE = 3.0
# English words that start sentences (or are days and months), never names however the
# vocabulary splits them: the shared 8,000-piece vocabularies split "These" into three pieces.
NOT_NAMES = frozenset(
    "These Those This That There Their They Them Then Some Several Many Most Much Each Every Both Either "
    "Neither Other Others Another Here While When Where Whilst After Before During Near Inside Outside Under "
    "Over Above Below Behind Beside Between Through Across Along Around Against Without Within Although "
    "Because Since Until Unlike Like Onto Into Upon From With What Which Who Whose Why How Also "
    "Only Just Still Even Yet Once Twice Please Thanks Hello Everyone Everybody Someone Somebody Nobody "
    "Monday Tuesday Wednesday Thursday Friday Saturday Sunday January February March April May June July "
    "August September October November December".split()
)


def is_emoji(ch: str) -> bool:
    """Pictographs and the marks that join or modify them (ZWJ, variation selector 16, skin tones,
    keycap); "So" is Unicode's "other symbol" category, which holds every emoji."""
    o = ord(ch)
    return unicodedata.category(ch) == "So" or 0x1F000 <= o <= 0x1FAFF or o in (0x200D, 0xFE0F, 0x20E3)


def _emoji_runs(text: str) -> list[FoundSpan]:
    found: list[FoundSpan] = []
    i = 0
    while i < len(text):
        if is_emoji(text[i]) and text[i] not in "\u200d\ufe0f\u20e3":
            j = i + 1
            while j < len(text) and is_emoji(text[j]):  # skin tones lie in 0x1F000-0x1FAFF
                j += 1
            found.append((i, j, "emoji"))
            i = j
        else:
            i += 1
    return found


def _sentence_initial(text: str, start: int) -> bool:
    """Whether the word at ``start`` begins a sentence: nothing but symbols before it, or a full
    stop, question or exclamation mark (not a title's full stop, checked by the caller)."""
    before = text[:start].rstrip()
    return not any(c.isalnum() for c in before) or before[-1] in ".!?:\"“«"


def _unknown(word: str, pieces: Callable[[str], int], *, initial: bool) -> bool:
    """Whether a capitalised word looks like a name the model has not seen: split into short
    pieces (at most ``NAME_CHARS_PER_PIECE`` characters each on average: "Jürgen" ▁J ü r gen, not
    "Japanese" ▁Japan ese), in mid-sentence in two or more whose lowercase form is no single
    known word ("Family"), at the start of a sentence its lowercase form in three or more; never
    one of ``NOT_NAMES``."""
    if word in NOT_NAMES:
        return False
    lower = pieces(word.lower())
    if initial:
        return lower >= NAME_PIECES_INITIAL and len(word) / lower <= NAME_CHARS_PER_PIECE
    n = pieces(word)
    return n >= NAME_PIECES_INSIDE and lower > 1 and len(word) / n <= NAME_CHARS_PER_PIECE


def _names(text: str, pieces: Callable[[str], int]) -> list[FoundSpan]:
    """Runs of capitalised words (one space apart, a title's full stop allowed) that hold a name
    (see the module's docstring), each from its first name-like word or title to its end."""
    words = [m for m in _LETTERS.finditer(text) if m.group()[0].isupper() and len(m.group()) > 1]
    runs: list[list[re.Match[str]]] = []
    for m in words:
        if runs:
            prev = runs[-1][-1]
            gap = text[prev.end() : m.start()]
            if gap == " " or (gap == ". " and prev.group() in TITLES):
                runs[-1].append(m)
                continue
        runs.append([m])
    found: list[FoundSpan] = []
    for run in runs:
        named = []
        for m in run:
            word = m.group()
            titled = text[: m.start()].rstrip().split(" ")[-1].rstrip(".") in TITLES
            if word in TITLES and text[m.end() : m.end() + 1] == ".":
                named.append(False)
            else:
                named.append(_unknown(word, pieces, initial=_sentence_initial(text, m.start()) and not titled))
        if not any(named):
            continue
        first = named.index(True)
        # A title right before the first name goes with it; a leading common word does not.
        if first > 0 and run[first - 1].group() in TITLES:
            first -= 1
        found.append((run[first].start(), run[-1].end(), "word"))
    return found


def find_spans(
    text: str, spelled_in_bytes: Callable[[str], bool], pieces: Callable[[str], int] | None = None
) -> list[FoundSpan]:
    """Spans worth protecting in ``text``, left to right, not overlapping: links (as ``word``),
    numbers, runs of emoji, words for which ``spelled_in_bytes(word)`` is true (the tokenizer
    has no piece for one of their characters) and, with ``pieces`` (how many subword pieces a word
    takes), names. Where spans overlap the earliest, then longest, wins; neighbouring ``word``
    spans one space apart become one."""
    found: list[FoundSpan] = [(m.start(), m.end(), "word") for m in _LINK.finditer(text)]
    found += [(m.start(), m.end(), "number") for m in _NUMBER.finditer(text)]
    found += _emoji_runs(text)
    found += [(m.start(), m.end(), "word") for m in _LETTERS.finditer(text) if spelled_in_bytes(m.group())]
    if pieces is not None:
        found += _names(text, pieces)
    found.sort(key=lambda s: (s[0], -s[1]))
    kept: list[FoundSpan] = []
    for span in found:
        if kept and span[0] < kept[-1][1]:
            if span[2] == "word" and kept[-1][2] == "word" and span[1] > kept[-1][1]:
                kept[-1] = (kept[-1][0], span[1], "word")  # a name run ending in a byte-spelled word
            continue
        if pieces is not None and kept and span[2] == kept[-1][2] == "word" and text[kept[-1][1] : span[0]] == " ":
            kept[-1] = (kept[-1][0], span[1], "word")
            continue
        kept.append(span)
    return kept
