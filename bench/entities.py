"""Numbers, names, emoji and links through the shipped Transformers: how many sentences of
``bench/data/entities.tsv`` come back with every listed string intact, and how many placeholder
words leak into the output, translated plainly and through placeholders (``protect``).

The models are trained on Multi30k image captions, which hold few digits, no emoji and few
names; this set is what a user types instead. A sentence is *intact* when each string listed
after it appears in the translation verbatim (as often as listed, not glued to letters or digits).
A *leak* is an output word beginning like a placeholder word or one of the model's learnt
translations of it ("John", "zwei", "deux") beyond the number of times the source has it.

    .venv/bin/python bench/entities.py [--models en-de-transformer ...] [--beam 5] [--show]
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from attnscope.repository import load_model_folder  # noqa: E402
from attnscope.text import protect  # noqa: E402
from attnscope.translator import Translator  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "bench" / "data" / "entities.tsv"
MODELS = ["en-de-transformer", "en-de-transformer-aligned", "en-fr-transformer", "en-fr-transformer-aligned"]


def load_set(path: Path = DATA) -> list[tuple[str, list[str]]]:
    """(sentence, the strings that must survive) per line; ``#`` lines are comments."""
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            sentence, *keep = line.split("\t")
            rows.append((sentence, keep))
    return rows


def occurrences(text: str, item: str) -> int:
    """How often ``item`` stands in ``text`` not glued to a letter or digit on either side."""
    return len(re.findall(rf"(?<![^\W_]){re.escape(item)}(?![^\W_])", text))


def intact(translation: str, keep: list[str]) -> bool:
    return all(occurrences(translation, item) >= n for item, n in Counter(keep).items())


# Placeholder words and their translations counted even where a model did not learn them.
KNOWN = {"number": {"two", "zwei", "deux"}, "word": {"obama", "john"}}


def placeholder_words(translator: Translator) -> dict[str, set[str]]:
    """Per kind, its placeholder word, the model's learnt translations of it and ``KNOWN``'s."""
    learnt = translator.placeholder_translations() if "cross" in translator.loaded.config.attention_kinds else {}
    return {kind: {word.lower()} | learnt.get(kind, set()) | KNOWN.get(kind, set())
            for kind, word in protect.PLACEHOLDERS.items()}


def leaks(source: str, translation: str, words: dict[str, set[str]], kinds: set[str] | None = None) -> int:
    """Output words beginning with a placeholder word or its translation (a long one anywhere, as
    in "namensObama"), beyond the source's own ("Two children" -> "Zwei Kinder" is no leak),
    counted per kind (only ``kinds``, those a placeholder stood in for, when given: an RNN that
    learnt "infirmières" for "Obama" may write it in a sentence without a name)."""
    total = 0
    for kind, spellings in words.items():
        if kinds is not None and kind not in kinds:
            continue
        starts = "|".join(re.escape(s) for s in sorted(spellings) if len(s) < protect.GLUED)
        anywhere = "|".join(re.escape(s) for s in sorted(spellings) if len(s) >= protect.GLUED)
        pattern = "(?i)" + "|".join(p for p in (starts and rf"(?<![^\W\d_])(?:{starts})", anywhere) if p)
        total += max(0, len(re.findall(pattern, translation)) - len(re.findall(pattern, source)))
    return total


def measure(translator: Translator, rows: list[tuple[str, list[str]]], *, protected: bool, beam: int,
            show: bool) -> dict[str, float]:
    """Translate every sentence alone (as the API does) and count intact sentences and leaks."""
    words = placeholder_words(translator)
    kept = leaked = sentences_leaking = 0
    started = time.perf_counter()
    for sentence, keep in rows:
        if protected:
            out = translator.translate_protected([sentence], beam_size=beam)[0].translation.text
        else:
            out = translator.translate([sentence], beam_size=beam)[0].text
        ok = intact(out, keep)
        n = leaks(sentence, out, words, {k for _, _, k in translator.spans(sentence)}) if protected else 0
        kept += ok
        leaked += n
        sentences_leaking += n > 0
        if show:
            print(f"  {'ok ' if ok else 'BAD'} {'LEAK ' if n else ''}{sentence!r} -> {out!r}")
    ms = (time.perf_counter() - started) * 1000 / len(rows)
    return {"intact": kept, "leaks": leaked, "leaking": sentences_leaking, "ms": ms}


def corpus_cost(translator: Translator, data: Path, split: str, *, beam: int) -> str:
    """BLEU on a Multi30k split translated plainly and through placeholders: only sentences with a
    span to protect are translated twice (the others are the same text either way)."""
    import gzip

    from attnscope.training.evaluate import bleu_scores

    lang = translator.loaded.target_lang
    with gzip.open(data / f"{split}.en.gz", "rt", encoding="utf-8") as f:
        sources = [line.strip() for line in f]
    with gzip.open(data / f"{split}.{lang}.gz", "rt", encoding="utf-8") as f:
        references = [line.strip() for line in f]
    chunks = [sources[i : i + 50] for i in range(0, len(sources), 50)]
    plain = [r.text for chunk in chunks for r in translator.translate(chunk, beam_size=beam, need_weights=False)]
    touched = [i for i, text in enumerate(sources) if translator.spans(text)]
    protected = list(plain)
    for i in touched:
        protected[i] = translator.translate_protected([sources[i]], beam_size=beam)[0].translation.text
    before, after = bleu_scores(plain, references)["cased"], bleu_scores(protected, references)["cased"]
    return f"{split}: {len(touched)}/{len(sources)} sentences with spans; BLEU {before:.2f} plain, {after:.2f} protect"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=MODELS)
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--show", action="store_true", help="print every translation")
    parser.add_argument("--bleu", metavar="DIR", type=Path,
                        help="also BLEU on Multi30k (DIR holds test_2016_flickr.en.gz ...) plain vs protect")
    parser.add_argument("--split", default="test_2016_flickr")
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = load_set()
    print(f"{len(rows)} sentences, beam {args.beam}; intact = every listed string verbatim")
    print(f"{'model':28} {'mode':8} {'intact':>8} {'leaks':>6} {'leaking':>8} {'ms/sent':>8}")
    for model_id in args.models:
        translator = Translator(load_model_folder(ROOT / "models" / model_id, "cpu"))
        cross = "cross" in translator.loaded.config.attention_kinds
        for protected in (False, True) if cross else (False,):  # without it protect changes nothing
            mode = "protect" if protected else "plain"
            if args.show:
                print(f"{model_id} {mode}:")
            r = measure(translator, rows, protected=protected, beam=args.beam, show=args.show)
            leak_cols = f"{r['leaks']:6d} {r['leaking']:8d}" if protected else f"{'-':>6} {'-':>8}"
            print(f"{model_id:28} {mode:8} {r['intact']:4d}/{len(rows):<3d} {leak_cols} {r['ms']:8.0f}")
        if args.bleu:
            print(f"{model_id:28} {corpus_cost(translator, args.bleu, args.split, beam=args.beam)}")


if __name__ == "__main__":
    main()
