"""sacreBLEU evaluation: our two conventions equal sacreBLEU called directly and cases worked out
by hand; BLEU by source length puts each sentence in the right bucket; corpus translation keeps
the input order; ``evaluate`` reads each test split in the model's direction."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
import sacrebleu
import torch

from attnscope.training.data import load_parallel
from attnscope.training.evaluate import (
    bleu_by_length,
    bleu_scores,
    chrf_scores,
    coverage_comparison,
    evaluate,
    translate_corpus,
    tune_coverage_penalty,
    tune_length_penalty,
)
from attnscope.translator import Translator

HYPS = [
    "A man is riding a bike.",
    "Two dogs are playing in snow.",
    "a woman reads a book",
    "Children play soccer in the park.",
]
REFS = [
    "A man is riding a bicycle.",
    "Two dogs play in the snow.",
    "A woman is reading a book.",
    "Children are playing football in the park.",
]


def test_both_conventions_equal_sacrebleu_called_directly() -> None:
    scores = bleu_scores(HYPS, REFS)
    assert scores["cased"] == round(sacrebleu.corpus_bleu(HYPS, [REFS]).score, 2)
    assert scores["lowercase_13a"] == round(
        sacrebleu.corpus_bleu(HYPS, [REFS], lowercase=True).score, 2
    )
    assert 0 < scores["cased"] < scores["lowercase_13a"] < 100  # "a woman" matches only lowercased


def test_chrf_equals_sacrebleu_called_directly() -> None:
    scores = chrf_scores(HYPS, REFS)
    assert scores["score"] == round(sacrebleu.corpus_chrf(HYPS, [REFS]).score, 2)
    # chrF credits the partly right words BLEU counts as wrong ("riding"/"reading" vs "reads")
    assert bleu_scores(HYPS, REFS)["cased"] < scores["score"] < 100
    with pytest.raises(ValueError, match="2 hypotheses but 4 references"):
        chrf_scores(HYPS[:2], REFS)


def test_signatures_name_the_convention() -> None:
    scores = bleu_scores(HYPS, REFS)
    assert "case:mixed" in scores["signature_cased"] and "case:lc" in scores["signature_lowercase"]
    for key in ("signature_cased", "signature_lowercase"):
        assert "tok:13a" in scores[key] and "nrefs:1" in scores[key] and "version:" in scores[key]


@pytest.mark.parametrize(
    ("hyp", "ref", "cased", "lowercase"),
    [
        # Identical: every precision 1, no brevity penalty.
        ("Ein Mann fährt Fahrrad.", "Ein Mann fährt Fahrrad.", 100.0, 100.0),
        # No unigram in common: 0, whatever the smoothing.
        ("Zwei Hunde.", "Eine Katze schläft", 0.0, 0.0),
        # One wrong last word of six: precisions 5/6, 4/5, 3/4, 2/3, whose product is 1/3.
        ("a b c d e f", "a b c d e g", 100 * 3**-0.25, 100 * 3**-0.25),
        # All four words right but one short: brevity penalty exp(1 - 5/4).
        ("a b c d", "a b c d e", 100 * math.exp(-0.25), 100 * math.exp(-0.25)),
        # "The" != "the" when cased: 3/4, 2/3, 1/2 and no 4-gram, which 'exp' smoothing counts
        # as 1/2; the product is 1/8. Lowercased it is a perfect match.
        ("The dog runs.", "the dog runs.", 100 * 8**-0.25, 100.0),
    ],
)
def test_cases_worked_out_by_hand(hyp: str, ref: str, cased: float, lowercase: float) -> None:
    scores = bleu_scores([hyp], [ref])
    assert scores["cased"] == round(cased, 2)
    assert scores["lowercase_13a"] == round(lowercase, 2)


def test_bleu_needs_one_reference_per_hypothesis() -> None:
    with pytest.raises(ValueError, match="2 hypotheses but 1 references"):
        bleu_scores(["a", "b"], ["a"])


def words(n: int) -> str:
    return " ".join(f"w{i}" for i in range(n))


def test_bleu_by_length_buckets_sentences_by_source_words() -> None:
    lengths = [1, 8, 9, 12, 13, 16, 17, 20, 21, 35, 5]
    sources = [words(n) for n in lengths]
    references = [f"reference number {i} is here" for i in range(len(lengths))]
    # Right in the buckets 1-8 and 13-16, wrong (no word in common) everywhere else.
    right = {0, 1, 4, 5, 10}
    hypotheses = [ref if i in right else "nothing matches" for i, ref in enumerate(references)]

    rows = bleu_by_length(sources, hypotheses, references)

    assert rows == [
        {"bucket": "1-8", "sentences": 3, "bleu": 100.0},
        {"bucket": "9-12", "sentences": 2, "bleu": 0.0},
        {"bucket": "13-16", "sentences": 2, "bleu": 100.0},
        {"bucket": "17-20", "sentences": 2, "bleu": 0.0},
        {"bucket": "21+", "sentences": 2, "bleu": 0.0},
    ]


def test_bleu_by_length_counts_whitespace_words_and_leaves_empty_buckets_unscored() -> None:
    sources = ["A man , a plan .", "  Two   dogs  ", words(9)]  # 6, 2 and 9 words
    hyps = refs = ["one two three four", "five six seven eight", "nine ten eleven twelve"]
    rows = {r["bucket"]: r for r in bleu_by_length(sources, hyps, refs)}
    assert rows["1-8"] == {"bucket": "1-8", "sentences": 2, "bleu": 100.0}
    assert rows["9-12"]["sentences"] == 1
    assert rows["13-16"] == {"bucket": "13-16", "sentences": 0, "bleu": None}
    assert rows["21+"] == {"bucket": "21+", "sentences": 0, "bleu": None}


class ScriptedTranslator:
    """Stands in for a Translator: looks each source up in a table and records its batches."""

    def __init__(
        self, table: dict[str, str], source_lang: str = "en", target_lang: str = "de"
    ) -> None:
        self.table = table
        self.length_penalty = 0.6
        self.coverage_penalty = 0.0
        self.batches: list[list[str]] = []
        self.loaded = SimpleNamespace(
            id="scripted",
            source_lang=source_lang,
            target_lang=target_lang,
            config=SimpleNamespace(attention_kinds=("cross",)),
        )

    def translate(self, texts: Sequence[str], *, beam_size: int, need_weights: bool) -> list[Any]:
        assert not need_weights
        self.batches.append(list(texts))
        return [SimpleNamespace(text=self.table[t]) for t in texts]

    def align(self, texts: Sequence[str], targets: Sequence[str]) -> list[Any]:
        """Teacher-forced: uniform cross-attention (1 layer, 1 head) over each source's words."""
        rows = [torch.full((1, 1, len(t.split()), len(s.split())), 1 / len(s.split())) for s, t in zip(texts, targets, strict=True)]
        return [SimpleNamespace(hypothesis=SimpleNamespace(cross=r)) for r in rows]


def test_translate_corpus_returns_translations_in_input_order() -> None:
    sources = ["a much longer sentence here", "b", "cc cc", "ddd ddd ddd", "e"]
    fake = ScriptedTranslator({s: s.upper() for s in sources})
    out = translate_corpus(
        cast(Translator, fake), sources, beam_size=1, batch_size=2, progress=False
    )
    assert out == [s.upper() for s in sources]
    assert [len(b) for b in fake.batches] == [2, 2, 1]
    assert fake.batches[0] == ["b", "e"]  # shortest first, so a batch pads little


def test_evaluate_scores_each_split_in_the_model_direction(tiny_corpus: Path) -> None:
    oracle = {
        s: t
        for split in ("test2016", "test2017")
        for s, t in load_parallel(tiny_corpus, split, "en", "de")
    }
    result = evaluate(
        cast(Translator, ScriptedTranslator(oracle)),
        tiny_corpus,
        splits=("test2016", "test2017"),
        beam_size=3,
        progress=False,
    )
    assert result["beam_size"] == 3
    assert set(result["bleu"]) == {"test2016", "test2017"} == set(result["bleu_by_length"])
    assert set(result["attention_entropy"]) == {"test2016", "test2017"}
    # Uniform attention: every row's entropy is log S, the normalised mean exactly 1.
    assert result["attention_entropy"]["test2016"]["normalized"] == 1.0
    for split in ("test2016", "test2017"):
        assert result["bleu"][split]["cased"] == result["bleu"][split]["lowercase_13a"] == 100.0
        assert result["chrf"][split]["score"] == 100.0 and "nc:6|nw:0" in result["chrf"][split]["signature"]
        assert sum(r["sentences"] for r in result["bleu_by_length"][split]) == len(
            load_parallel(tiny_corpus, split, "en", "de")
        )


class PenaltySensitiveTranslator(ScriptedTranslator):
    """Translates correctly only with length penalty 1.4, word-for-word garbage otherwise."""

    def translate(self, texts: Sequence[str], *, beam_size: int, need_weights: bool) -> list[Any]:
        ok = self.length_penalty == 1.4
        return [SimpleNamespace(text=self.table[t] if ok else "xyz") for t in texts]


def test_length_penalty_is_tuned_on_the_given_pairs_and_kept(tiny_corpus: Path) -> None:
    val = load_parallel(tiny_corpus, "val", "en", "de")
    fake = PenaltySensitiveTranslator(dict(val))
    choice = tune_length_penalty(cast(Translator, fake), val, beam_size=4, progress=False)
    assert choice["length_penalty"] == 1.4 == fake.length_penalty
    assert choice["beam_size"] == 4 and choice["tuned_on"] == "val"
    assert choice["val_bleu_by_length_penalty"]["1.4"] == 100.0
    assert choice["val_bleu_by_length_penalty"]["0.6"] == 0.0
    result = evaluate(cast(Translator, fake), tiny_corpus, splits=("val",), beam_size=4, progress=False)
    assert result["length_penalty"] == 1.4 and result["bleu"]["val"]["cased"] == 100.0


class CoverageSensitiveTranslator(ScriptedTranslator):
    """Right with beta 0.1; with beta 0 it drops each sentence's last word (what a coverage
    penalty is for), and a larger beta gives garbage."""

    def translate(self, texts: Sequence[str], *, beam_size: int, need_weights: bool) -> list[Any]:
        def out(t: str) -> str:
            words = self.table[t].split()
            if self.coverage_penalty == 0.0:
                return " ".join(words[:-1])
            return " ".join(words) if self.coverage_penalty == 0.1 else "xyz"

        return [SimpleNamespace(text=out(t)) for t in texts]


def test_coverage_penalty_is_tuned_on_the_given_pairs_and_compared_with_none(tiny_corpus: Path) -> None:
    val = load_parallel(tiny_corpus, "val", "en", "de")
    fake = CoverageSensitiveTranslator(dict(val))
    choice = tune_coverage_penalty(cast(Translator, fake), val, beam_size=3, progress=False)
    assert choice["coverage_penalty"] == 0.1 == fake.coverage_penalty
    assert choice["tuned_on"] == "val" and choice["beam_size"] == 3
    scores = choice["val_bleu_by_coverage_penalty"]
    assert scores["0.1"] == 100.0 and scores["0.4"] == 0.0 and 0.0 < scores["0.0"] < 100.0
    with_beta = evaluate(cast(Translator, fake), tiny_corpus, splits=("val",), beam_size=3, progress=False)
    fake.coverage_penalty = 0.0
    without = evaluate(cast(Translator, fake), tiny_corpus, splits=("val",), beam_size=3, progress=False)
    table = coverage_comparison(with_beta, without)
    assert table["coverage_penalty"] == 0.1 and table["beam_size"] == 3
    assert table["bleu_lowercase"]["val"] == {"with": 100.0, "without": scores["0.0"]}
    assert set(table["bleu_lowercase_21+_words"]["val"]) == {"with", "without"}


def test_a_tie_keeps_the_coverage_penalty_off(tiny_corpus: Path) -> None:
    val = load_parallel(tiny_corpus, "val", "en", "de")
    fake = ScriptedTranslator(dict(val))  # the same output whatever beta is
    assert tune_coverage_penalty(cast(Translator, fake), val, progress=False)["coverage_penalty"] == 0.0


def test_coverage_penalty_needs_cross_attention(tiny_corpus: Path) -> None:
    val = load_parallel(tiny_corpus, "val", "en", "de")
    fake = ScriptedTranslator(dict(val))
    fake.loaded.config.attention_kinds = ()
    with pytest.raises(ValueError, match="no cross-attention"):
        tune_coverage_penalty(cast(Translator, fake), val, progress=False)
