"""Copying through placeholders: numbers, emoji, links, unknown names and words the vocabulary
can only spell byte by byte (found by ``attnscope.text.spans``) are taken out of the source before
translation and put back into the output where the model's cross-attention says they belong.

The models are trained on Multi30k image captions, which have few digits, no emoji and few
names, and they translate such strings badly even though byte fallback lets them spell anything
("bus number 42" -> "Nummer 2"). Here each span is replaced by a word the model translates
reliably (a number by ``two``, a name, link or byte-spelled word by ``Obama``; emoji runs are
removed), the masked sentence is translated, and each span replaces the target word that
translates its placeholder, found by attention: of the output words spelled like the model's own
translation of the placeholder word, the one that puts most attention on the placeholder. What
is left of the placeholders (the model wrote one twice, or glued it to a word) is removed, so no
placeholder word reaches the user. When the model drops a placeholder, the span goes beside the
output word that attends most to it. An emoji run goes beside the output word that attends most
to the source word it followed (at the end, or the start, when it was there in the source). A
text of nothing but spans is copied through.

Functions here work on text and on one (target words, source words) attention matrix; the
translator (``attnscope.translator``) runs the model."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from torch import Tensor

from attnscope.text.spans import FoundSpan, Kind, find_spans

__all__ = ["PLACEHOLDERS", "FoundSpan", "Kind", "Masked", "Placement", "Protected", "find_spans", "copy_through", "mask",
           "nothing_to_translate", "restore"]

# What stands in for each kind in the masked source: words the Multi30k models know and keep.
# "Obama" is copied once, as itself, in 14-17 of 17 test sentences by each shipped Transformer
# (names in captions of news photos); "John", used before, in 2-5 ("John John Deere-Manne").
PLACEHOLDERS: dict[str, str] = {"number": "two", "word": "Obama"}

# Other words of each kind: what the model writes around them is not a placeholder's translation.
CONTROLS: dict[str, str] = {"number": "five", "word": "Maria"}

# Short sentences in which a model shows what it translates each placeholder to.
PLACEHOLDER_CONTEXTS: dict[str, tuple[str, ...]] = {
    "number": ("{} dogs are running.", "A man with {} children.", "The bus number {} is red.", "It is {} o'clock."),
    "word": ("{} is running.", "A man named {} is sitting.", "{} and a dog."),
}

Span = tuple[int, int]
_PUNCTUATION = re.compile(r"^[^\w]+$")
_LETTER = re.compile(r"[^\W\d_]")


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
    placeholder; the span went beside the word that attends most to it), ``end``/``start``, or
    ``copied`` (nothing was left to translate: the whole source was copied)."""

    text: str
    kind: Kind
    how: str
    source_start: int
    source_end: int
    target_start: int
    target_end: int


def nothing_to_translate(masked: Masked) -> bool:
    """True when the spans are all there is: the masked text has no letter outside its
    placeholders ("🍕🍕🍕", "42", "Brzęczyszczykiewicz", a bare URL)."""
    if not masked.spans:
        return False
    rest, cursor = "", 0
    for span in masked.spans:
        rest += masked.text[cursor : span.masked_start]
        cursor = span.masked_end
    rest += masked.text[cursor:]
    return not _LETTER.search(rest)


def copy_through(masked: Masked) -> tuple[str, list[Placement]]:
    """The source itself as the output (stripped), each span ``copied`` where it stands."""
    text = masked.source.strip()
    shift = len(masked.source) - len(masked.source.lstrip())
    return text, [
        Placement(s.text, s.kind, "copied", s.start, s.end, s.start - shift, s.end - shift) for s in masked.spans
    ]


def _word_at(spans: Sequence[Span], start: int, end: int) -> int | None:
    """The index of the word whose span overlaps ``[start, end)`` most, None if none does."""
    best, best_overlap = None, 0
    for k, (a, b) in enumerate(spans):
        overlap = min(b, end) - max(a, start)
        if overlap > best_overlap:
            best, best_overlap = k, overlap
    return best


GLUED = 5  # a placeholder spelling this long is found glued inside a word too ("namensObama")


def _spelled_as(word: str, spellings: set[str]) -> tuple[int, int] | None:
    """Where, in an output word, a placeholder or its translation is: the whole word when it
    begins with one ("Obamas", "zwei"), from a long one glued inside it to the word's end
    ("namensObama", "Pizza-Obamae", with the hyphen); None when it has none."""
    lower = word.lower()
    if any(lower.startswith(s) for s in spellings):
        return 0, len(word)
    glued = [lower.find(s) for s in spellings if len(s) >= GLUED and lower.find(s) > 0]
    if not glued:
        return None
    start = min(glued)
    return (start - 1 if word[start - 1] in "-‐" else start), len(word)


@dataclass
class _Output:
    """The translation's words while spans are placed: edits ``(start, end, new text, span index
    or None for a removal)`` in ``translation``'s coordinates, and how each span was placed."""

    translation: str
    target_words: Sequence[Span]
    attention: Tensor
    edits: list[tuple[int, int, str, int | None]] = field(default_factory=list)
    hows: dict[int, str] = field(default_factory=dict)
    used: set[int] = field(default_factory=set)  # words replaced by a span or removed

    def most_attending(self, k: int) -> int | None:
        """The word (not punctuation when there is another, not used) attending most to ``k``."""
        words = [self.translation[a:b] for a, b in self.target_words]
        free = [j for j in range(len(words)) if j not in self.used]
        pool = [j for j in free if not _PUNCTUATION.match(words[j])] or free
        return max(pool, key=lambda j: float(self.attention[j, k])) if pool else None

    def at_end(self, index: int, text: str) -> None:
        end = len(self.translation)
        self.edits.append((end, end, (" " if self.translation else "") + text, index))
        self.hows[index] = "end"

    def beside(self, index: int, k: int, text: str) -> None:
        """Next to the word attending most to source word ``k``: before it when that word
        translates something after ``k``, else after it."""
        j = self.most_attending(k)
        if j is None:
            self.at_end(index, text)
            return
        a, b = self.target_words[j]
        if int(self.attention[j].argmax()) > k:
            self.edits.append((a, a, text + " ", index))
        else:
            self.edits.append((b, b, " " + text, index))
        self.hows[index] = "beside"

    def remove(self, j: int, inside: tuple[int, int]) -> None:
        """Drop word ``j``'s characters ``inside`` (offsets in the word); a whole word goes with
        the space before it (after it, at the start)."""
        a, b = self.target_words[j]
        if inside[0] > 0:
            self.edits.append((a + inside[0], b, "", None))
            self.used.add(j)
            return
        if a > 0 and self.translation[a - 1] == " ":
            a -= 1
        elif self.translation[b : b + 1] == " ":
            b += 1
        self.edits.append((a, b, "", None))
        self.used.add(j)


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
    placeholder to. Each span replaces an output word spelled like its placeholder's translation
    (the one attending most to its placeholder); output words spelled so that are left over (the
    model wrote a placeholder twice) are removed, except as many as the source has real words
    spelled like the placeholder ("Two men and 2 women"); a span whose placeholder the model
    dropped goes beside the word attending most to it. So no placeholder word survives. Returns
    the text and one placement per span, in the source's order."""
    out = _Output(translation, target_words, word_attention)
    words = [translation[a:b] for a, b in target_words]
    own_source = word_attention.argmax(-1).tolist() if target_words else []
    slot = {  # the source word each placeholder became (emoji have none)
        i: _word_at(source_words, s.masked_start, s.masked_end) for i, s in enumerate(masked.spans) if s.kind != "emoji"
    }
    placeholders = {k for k in slot.values() if k is not None}
    spellings: dict[str, set[str]] = {
        kind: {PLACEHOLDERS[kind].lower()} | placeholder_translations.get(kind, set())
        for kind in {s.kind for s in masked.spans if s.kind != "emoji"}
    }
    real = {  # source words spelled like a placeholder that are not one ("Two men and 2 women")
        kind: {
            i for i, (a, b) in enumerate(source_words)
            if i not in placeholders and masked.text[a:b].lower() == PLACEHOLDERS[kind].lower()
        }
        for kind in spellings
    }  # fmt: skip
    pending: list[int] = []
    for index, span in enumerate(masked.spans):  # 1. replace the placeholders' translations
        k = slot.get(index)
        if span.kind == "emoji":
            continue
        if k is None or not target_words:
            out.at_end(index, span.text)
            continue
        candidates = [
            j for j in range(len(words))
            if j not in out.used and _spelled_as(words[j], spellings[span.kind]) is not None and own_source[j] not in real[span.kind]
        ]  # fmt: skip
        if not candidates:
            pending.append(index)
            continue
        j = max(candidates, key=lambda j: (own_source[j] == k, words[j].lower() in spellings[span.kind],
                                           float(word_attention[j, k])))  # fmt: skip
        out.used.add(j)
        a, b = target_words[j]
        inside = _spelled_as(words[j], spellings[span.kind])
        assert inside is not None
        gap = " " if inside[0] > 0 else ""  # "namensObama" -> "namens Zbigniew"
        out.edits.append((a + inside[0], b, gap + span.text, index))
        out.hows[index] = "replaced"
    for kind, spelled in spellings.items():  # 2. remove what is left of the placeholders
        left = [j for j in range(len(words)) if j not in out.used and _spelled_as(words[j], spelled) is not None]
        keep = len(real[kind])  # the source's own "two"s keep a translation each: the most attentive
        left.sort(key=lambda j: -max((float(word_attention[j, i]) for i in real[kind]), default=0.0))
        for j in left[keep:]:
            out.remove(j, _spelled_as(words[j], spelled) or (0, len(words[j])))
    for index in pending:  # 3. a dropped placeholder: beside the word attending most to it
        out.beside(index, slot[index] or 0, masked.spans[index].text)
    _place_emoji(masked, out, source_words)
    return _apply(masked, out)


def _place_emoji(masked: Masked, out: _Output, source_words: Sequence[Span]) -> None:
    """An emoji run goes after the word attending most to the source word before it, or at the
    start or end where it stood so in the source."""
    translation = out.translation
    for index, span in enumerate(masked.spans):
        if span.kind != "emoji":
            continue
        before = [k for k, (a, b) in enumerate(source_words) if b <= span.masked_start]
        after_text = masked.text[span.masked_start :].strip()
        if not after_text or _PUNCTUATION.match(after_text) or not before:
            at_end = bool(before) or not masked.text
            position = len(translation) if at_end else 0
            gap = " " if (at_end and span.start > 0 and masked.source[span.start - 1] == " ") or not at_end else ""
            out.edits.append((position, position, gap + span.text if at_end else span.text + gap, index))
            out.hows[index] = "end" if at_end else "start"
        else:
            out.beside(index, before[-1], span.text)


def _apply(masked: Masked, out: _Output) -> tuple[str, list[Placement]]:
    """Apply the edits left to right, tracking where each span lands in the new text."""
    text, shift = out.translation, 0
    landed: dict[int, tuple[int, int]] = {}
    order = sorted(out.edits, key=lambda e: (e[0], e[1], -1 if e[3] is None else e[3]))
    for start, end, new, index in order:
        start, end = start + shift, end + shift
        text = text[:start] + new + text[end:]
        if index is not None:
            offset = new.index(masked.spans[index].text)
            landed[index] = (start + offset, start + offset + len(masked.spans[index].text))
        shift += len(new) - (end - start)
    placements = [
        Placement(span.text, span.kind, out.hows[i], span.start, span.end, landed[i][0], landed[i][1])
        for i, span in enumerate(masked.spans)
    ]
    return text, placements
