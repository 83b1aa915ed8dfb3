"""Copy augmentation: training pairs that teach a model to carry numbers, names and emoji over.

Multi30k describes photographs: few sentences hold a digit, almost none a name from outside its
vocabulary, none an emoji. With byte fallback every input survives tokenisation, yet a model that
never saw such strings carried over invents its own ("bus number 42" came out as "Nummer 2").
This module writes extra pairs from the training corpus and its word alignments (``attnscope
align-corpus``): in each, one or two words that eflomal links one-to-one across the pair are
replaced, on both sides, by the *same* string (a number in a common format, a made-up name in
Latin or another script, an emoji run), or the same emoji run is appended to both sides. The
model then sees the target copy the source's string at the aligned place, which is what a user
expects for strings that have no translation (the placeholder-free counterpart of the entity
placeholders of production systems, e.g. Crego et al. 2016, "SYSTRAN's Pure NMT").

Numbers are copied verbatim, not localised (``1,234.56`` stays so in German), and English
number words aligned one-to-one (``two`` / ``zwei``) are among the words replaced by digits.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnscope.alignment.corpus import AlignedPair, default_align_dir, load_references
from attnscope.training.data import load_parallel
from attnscope.training.evaluate import translate_corpus
from attnscope.translator import Translator

_NUMBER_WORDS = {
    "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
    "twelve", "twenty", "hundred",
}
_LATIN = "abcdefghijklmnopqrstuvwxyz"
_ACCENTED = "áàâäãåąćčçďéèêëęěğíìîïłńñňóòôöõøřśšşťúùûüůýÿźżžß"
_ONSETS = ("b", "br", "ch", "d", "dr", "f", "g", "gr", "h", "j", "k", "kr", "l", "m", "n", "p", "r", "s",
           "sch", "sh", "st", "sz", "t", "th", "tr", "v", "w", "z", "ł", "ż", "rz", "cz", "ñ", "")
_VOWELS = ("a", "e", "i", "o", "u", "y", "ie", "ou", "ä", "é", "ö", "ü", "ę", "ó", "an", "el", "in", "or")
_SCRIPTS = (
    "абвгдежзийклмнопрстуфхцчшщыэюя",  # Cyrillic
    "αβγδεζηθικλμνξοπρστυφχψω",  # Greek
    "אבגדהוזחטיכלמנסעפצקרשת",  # Hebrew (right to left)
    "ابتثجحخدذرزسشصضطظعغفقكلمنهوي",  # Arabic (right to left)
    "山川田中日本東京大小人口花鳥風月",  # CJK
)
_EMOJI = "😀😂🙂😍😎🤔👍👏🙏🎉🍕🍺☕🐶🐱🌞🌳🚗🚲⚽🎸📷❤🔥⭐"
_WORD = re.compile(r"^[^\W\d_]{3,}$")  # letters only, three or more: a word worth replacing


def random_number(rng: random.Random) -> str:
    """A number in one of the forms people write: 7, 42, 1999, 1,234, 3.5, $20, 12/03/2024,
    7:15, 555-0123, 25%, #3."""
    n = rng.randint
    forms = [
        lambda: str(n(0, 9)),
        lambda: str(n(10, 99)),
        lambda: str(n(100, 999)),
        lambda: str(n(1900, 2030)),
        lambda: f"{n(1, 99)},{n(0, 999):03d}",
        lambda: f"{n(0, 99)}.{n(0, 99):02d}",
        lambda: f"${n(1, 999)}",
        lambda: f"${n(1, 9)},{n(0, 999):03d}.{n(0, 99):02d}",
        lambda: f"{n(1, 28):02d}/{n(1, 12):02d}/{n(1950, 2030)}",
        lambda: f"{n(0, 23)}:{n(0, 59):02d}",
        lambda: f"{n(100, 999)}-{n(0, 9999):04d}",
        lambda: f"{n(1, 100)}%",
        lambda: f"#{n(1, 99)}",
    ]
    return rng.choice(forms)()


def random_name(rng: random.Random) -> str:
    """A made-up proper name: capitalised Latin letters with some accents, sometimes two words,
    now and then a word in another script."""
    def word() -> str:
        if rng.random() < 0.15:
            letters = rng.choice(_SCRIPTS)
            return "".join(rng.choice(letters) for _ in range(rng.randint(2, 8)))
        if rng.random() < 0.5:  # syllables, like most names: "Brzęczyszczykiewicz", "Okonkwo"
            text = "".join(rng.choice(_ONSETS) + rng.choice(_VOWELS) for _ in range(rng.randint(1, 4)))
        else:  # any letters: a brand, an abbreviation, a typo
            text = "".join(rng.choice(_LATIN * 4 + _ACCENTED) for _ in range(rng.randint(3, 12)))
        return text[0].upper() + text[1:]

    return " ".join(word() for _ in range(rng.choice((1, 1, 1, 2))))


def random_emoji(rng: random.Random) -> str:
    return rng.choice(_EMOJI) * rng.choice((1, 1, 2, 3))


def _one_to_one(ref: AlignedPair) -> list[tuple[int, int]]:
    """Links (i, j) where source word i links only to j and target word j only to i."""
    src_count: dict[int, int] = {}
    tgt_count: dict[int, int] = {}
    for i, j in ref.links:
        src_count[i] = src_count.get(i, 0) + 1
        tgt_count[j] = tgt_count.get(j, 0) + 1
    return sorted((i, j) for i, j in ref.links if src_count[i] == 1 and tgt_count[j] == 1)


def _replace(text: str, edits: Sequence[tuple[tuple[int, int], str]]) -> str:
    for (start, end), new in sorted(edits, reverse=True):
        text = text[:start] + new + text[end:]
    return text


@dataclass(frozen=True)
class Augmented:
    source: str
    target: str
    strings: tuple[str, ...]  # what was put in, on both sides


def augment_pair(source: str, target: str, ref: AlignedPair, rng: random.Random) -> Augmented | None:
    """One augmented copy of a pair, or None when it has no word to replace. Replaces one or two
    one-to-one linked words (a number word always by a number; any other word by a number, a
    name or an emoji run) or appends the same emoji run to both sides."""
    candidates = []
    for i, j in _one_to_one(ref):
        (a, b), (c, d) = ref.source_words[i], ref.target_words[j]
        if _WORD.match(source[a:b]) and _WORD.match(target[c:d]):
            candidates.append((i, j))
    if not candidates or rng.random() < 0.15:  # the emoji run appended; without a word, half the time nothing
        if rng.random() < 0.5 and not candidates:
            return None
        tail = random_emoji(rng)
        return Augmented(f"{source} {tail}", f"{target} {tail}", (tail,))
    numbers = [(i, j) for i, j in candidates if source[slice(*ref.source_words[i])].lower() in _NUMBER_WORDS]
    picked = [rng.choice(numbers)] if numbers and rng.random() < 0.7 else []
    rest = [c for c in candidates if c not in picked]
    rng.shuffle(rest)
    picked += rest[: rng.choice((1, 1, 2)) - len(picked)]  # one or two words in all
    edits_src, edits_tgt = [], []
    for i, j in picked:
        word = source[slice(*ref.source_words[i])].lower()
        if word in _NUMBER_WORDS:
            new = random_number(rng)
        else:
            new = rng.choices((random_number, random_name, random_emoji), weights=(3, 5, 2))[0](rng)
        edits_src.append((ref.source_words[i], new))
        edits_tgt.append((ref.target_words[j], new))
    return Augmented(_replace(source, edits_src), _replace(target, edits_tgt), tuple(new for _, new in edits_src))


def augment_corpus(
    pairs: Sequence[tuple[str, str]], refs: Sequence[AlignedPair], fraction: float, seed: int = 1
) -> list[Augmented]:
    """Augmented copies of about ``fraction`` of ``pairs`` (each pair at most once), reproducible
    from ``seed``. ``refs`` are the pairs' word alignments, in the same order."""
    if len(pairs) != len(refs):
        raise ValueError(f"{len(pairs)} pairs but {len(refs)} alignments")
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"fraction must be between 0 and 1, got {fraction}")
    rng = random.Random(seed)
    out = []
    for (source, target), ref in zip(pairs, refs, strict=True):
        if rng.random() < fraction:
            new = augment_pair(source, target, ref, rng)
            if new is not None:
                out.append(new)
    return out


def kind_of(text: str) -> str:
    """``number``, ``emoji`` or ``name``: which kind of string ``random_*`` made."""
    if any(ch in _EMOJI for ch in text):
        return "emoji"
    return "number" if any(ch.isdigit() for ch in text) else "name"


def copy_rate(translations: Sequence[str], augmented: Sequence[Augmented]) -> dict[str, dict[str, float | int]]:
    """How many of the strings put into each source come out verbatim in its translation, per
    kind and over all: ``{kind: {"strings", "copied", "rate"}}``."""
    counts: dict[str, list[int]] = {}
    for text, item in zip(translations, augmented, strict=True):
        for string in item.strings:
            for key in (kind_of(string), "all"):
                row = counts.setdefault(key, [0, 0])
                row[0] += 1
                row[1] += string in text
    return {k: {"strings": n, "copied": c, "rate": round(c / n, 4)} for k, (n, c) in sorted(counts.items())}


COPY_TEST_SEED = 7  # the held-out split's strings; training uses the recipe's seed on train


def evaluate_copies(
    translator: Translator,
    data_dir: str | Path,
    *,
    split: str = "test2016",
    align_dir: str | Path | None = None,
    beam_size: int = 5,
    progress: bool = True,
    protect: bool = False,
) -> dict[str, Any]:
    """Every sentence of ``split`` with numbers, names or emoji put in (``augment_corpus`` with
    :data:`COPY_TEST_SEED`), translated: how many of those strings come out verbatim, per kind,
    and the first few translations to look at. Needs the split's word alignments. ``protect``
    translates through placeholders (``Translator.translate_protected``)."""
    loaded = translator.loaded
    pairs = load_parallel(data_dir, split, loaded.source_lang, loaded.target_lang)
    refs = load_references(align_dir or default_align_dir(data_dir), split, loaded.source_lang, loaded.target_lang, len(pairs))
    augmented = augment_corpus(pairs, refs, 1.0, seed=COPY_TEST_SEED)
    hyps = translate_corpus(
        translator, [a.source for a in augmented], beam_size=beam_size, progress=progress, protect=protect
    )
    return {
        "protect": protect,
        "what": f"numbers, names and emoji put into the {split} sources (and references) at words that "
                "eflomal links one to one, or appended; share of them in the translation verbatim",
        "split": split,
        "seed": COPY_TEST_SEED,
        "beam_size": beam_size,
        "sentences": len(augmented),
        "copied": copy_rate(hyps, augmented),
        "examples": [{"source": a.source, "translation": h} for a, h in list(zip(augmented, hyps, strict=True))[:5]],
    }
