"""Source words that should come back as written but are not in the output.

A translation changes most words, so "is every source word in the output" cannot be asked of
all of them. It can of the words a translation keeps as they are: numbers (anything with a
digit), the spans ``protect`` copies through (names, links, prices), and capitalised words inside
a sentence (names: "Berlin"). Such a word missing from the output is reported, so a dropped name
or number is never silent ("... flew from Berlin to São Paulo" -> no "Berlin"). A capitalised
word that is translated rather than copied ("Friday" -> "Freitag") is reported too: the check is
"not there as written", which the page says in those words.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

__all__ = ["missing_words"]

_WORD = re.compile(r"\S+")
_EDGE = re.compile(r"^[^\w€$£¥]+|[^\w%]+$")
_SENTENCE_END = re.compile(r"[.!?]$")
_ABBREVIATION = re.compile(r"^[A-Z][a-z]{0,3}\.$")  # "Dr.", "Mr.", "St.": no sentence ends there


def _kept_as_written(word: str, initial: bool) -> bool:
    """Whether ``word`` is one a translation should keep as written: it has a digit, or it is
    capitalised and does not start a sentence (a name)."""
    if any(ch.isdigit() for ch in word):
        return True
    return not initial and word[:1].isupper() and len(word) > 1


def missing_words(source: str, translation: str, protected: Sequence[tuple[int, int]] = ()) -> list[dict[str, object]]:
    """Each word of ``source`` that should be in ``translation`` as written and is not:
    ``{"text", "source_start", "source_end", "protected"}`` in source order. ``protected``: the
    (start, end) character spans copied through placeholders; each is checked whole, and the
    words inside it are not checked one by one."""
    found: list[dict[str, object]] = []
    for start, end in protected:
        text = source[start:end]
        if text.strip() and text not in translation:
            found.append({"text": text, "source_start": start, "source_end": end, "protected": True})
    initial = True
    for match in _WORD.finditer(source):
        raw = match.group()
        stripped = _EDGE.sub("", raw)
        ends = bool(_SENTENCE_END.search(raw)) and not _ABBREVIATION.match(raw)
        was_initial, initial = initial, ends
        if not stripped:
            continue
        offset = match.start() + raw.index(stripped)
        span = (offset, offset + len(stripped))
        if any(s < span[1] and span[0] < e for s, e in protected):
            continue
        if _kept_as_written(stripped, was_initial) and not re.search(rf"(?<!\w){re.escape(stripped)}(?!\w)", translation):
            found.append({"text": stripped, "source_start": span[0], "source_end": span[1], "protected": False})
    found.sort(key=lambda w: int(w["source_start"]))  # type: ignore[call-overload]
    return found
