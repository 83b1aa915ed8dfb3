"""Copy augmentation: the same number, name or emoji put in on both sides at linked words; the
copy rate of translations; training and ``attnscope evaluate --copies`` with it."""

from __future__ import annotations

import dataclasses
import json
import random
import shutil
from pathlib import Path

import pytest

from attnscope.alignment.corpus import AlignedPair
from attnscope.alignment.words import word_spans
from attnscope.cli import main
from attnscope.repository import read_config
from attnscope.testing import TINY_PAIRS, build_tiny_models, tiny_tokenizer
from attnscope.training.copies import (
    Augmented,
    augment_corpus,
    augment_pair,
    copy_rate,
    kind_of,
    random_emoji,
    random_name,
    random_number,
)
from attnscope.training.data import DataError
from attnscope.training.presets import TrainConfig
from attnscope.training.train import TrainRun, train

from .conftest import diagonal_references

SOURCE, TARGET = "Two dogs play in the snow.", "Zwei Hunde spielen im Schnee."
# Two dogs play in the snow .  ->  Zwei Hunde spielen im Schnee .  ("in the" -> "im": not one to one)
LINKS = {(0, 0), (1, 1), (2, 2), (3, 3), (4, 3), (5, 4), (6, 5)}


def reference(links: set[tuple[int, int]], source: str = SOURCE, target: str = TARGET) -> AlignedPair:
    return AlignedPair(links, word_spans(source, "en"), word_spans(target, "de"))


def test_linked_words_are_replaced_by_the_same_string_on_both_sides() -> None:
    numbers = 0
    for seed in range(300):
        out = augment_pair(SOURCE, TARGET, reference(LINKS), random.Random(seed))
        assert out is not None
        assert 1 <= len(out.strings) <= 2
        for string in out.strings:
            assert string in out.source and string in out.target, (seed, out)
        # "in the" / "im" are not linked one to one: never replaced
        assert " in the " in out.source and " im " in out.target, (seed, out)
        if out.source == f"{SOURCE} {out.strings[0]}":  # the emoji appended to both sides
            assert out.target == f"{TARGET} {out.strings[0]}" and kind_of(out.strings[0]) == "emoji"
            continue
        if not out.source.startswith("Two "):  # a number word is always replaced by a number
            head = out.source.split(" ")[0]
            assert kind_of(head) == "number" and out.target.startswith(head + " "), (seed, out)
            numbers += 1
    assert numbers > 150  # the number word is preferred when there is one


def test_a_pair_without_one_to_one_words_gets_an_emoji_or_nothing() -> None:
    many_to_one = {(i, 0) for i in range(7)}  # every source word linked to "Zwei"
    results = [augment_pair(SOURCE, TARGET, reference(many_to_one), random.Random(s)) for s in range(100)]
    assert None in results
    for out in results:
        if out is not None:
            (tail,) = out.strings
            assert out == Augmented(f"{SOURCE} {tail}", f"{TARGET} {tail}", (tail,))


def test_augment_corpus_is_reproducible_and_checks_its_input() -> None:
    pairs = [(SOURCE, TARGET)] * 200
    refs = [reference(LINKS)] * 200
    first = augment_corpus(pairs, refs, 0.5, seed=3)
    assert first == augment_corpus(pairs, refs, 0.5, seed=3)
    assert first != augment_corpus(pairs, refs, 0.5, seed=4)
    assert 60 < len(first) < 140  # about half of the pairs
    assert len(augment_corpus(pairs, refs, 1.0)) == 200 and augment_corpus(pairs, refs, 0.0) == []
    with pytest.raises(ValueError, match="200 pairs but 199 alignments"):
        augment_corpus(pairs, refs[:-1], 0.5)
    with pytest.raises(ValueError, match="between 0 and 1"):
        augment_corpus(pairs, refs, 1.5)


def test_copy_rate_counts_each_kind() -> None:
    augmented = [
        Augmented("a 42 b", "x 42 y", ("42",)),
        Augmented("c 😀", "z 😀", ("😀",)),
        Augmented("Zyx q 55", "Zyx r 55", ("Zyx", "55")),
    ]
    rates = copy_rate(["x 42 y", "z", "Zyx r 5"], augmented)
    assert rates["number"] == {"strings": 2, "copied": 1, "rate": 0.5}
    assert rates["emoji"] == {"strings": 1, "copied": 0, "rate": 0.0}
    assert rates["name"] == {"strings": 1, "copied": 1, "rate": 1.0}
    assert rates["all"] == {"strings": 4, "copied": 2, "rate": 0.5}


def test_the_strings_survive_the_byte_fallback_tokenizer() -> None:
    tokenizer = tiny_tokenizer(byte_fallback=True)
    rng = random.Random(0)
    for _ in range(100):
        for make in (random_number, random_name, random_emoji):
            text = make(rng)
            assert tokenizer.decode(tokenizer.encode(text)) == text
    assert kind_of(random_number(rng)) == "number" and kind_of(random_emoji(rng)) == "emoji"


FAST = TrainConfig(vocab_size=120, batch_tokens=64, warmup_steps=2, max_epochs=1, average_last=0, lr=3e-3)


def test_training_adds_the_augmented_pairs(aligned_corpus: Path, tmp_path: Path) -> None:
    init = next(p for p in build_tiny_models(tmp_path / "init") if p.name.endswith("transformer"))
    common = dict(data_dir=aligned_corpus, tokenizer_path=init / "tokenizer.model", init_from=init,
                  evaluate_test=False, progress=False)
    config = dataclasses.replace(FAST, copy_augment=1.0)
    card = train(read_config(init)[0], config, TrainRun(out_dir=tmp_path / "copies", run_dir=tmp_path / "run", **common))  # type: ignore[arg-type]
    expected = len(augment_corpus(TINY_PAIRS, diagonal_references(TINY_PAIRS), 1.0, seed=config.seed))
    assert expected > 0
    assert card["training"]["copy_augmented_pairs"] == expected
    assert card["training"]["train_pairs"] == len(TINY_PAIRS) + expected
    with pytest.raises(DataError, match="align-corpus"):
        train(read_config(init)[0], config, TrainRun(out_dir=tmp_path / "none", run_dir=tmp_path / "run2",
              align_dir=tmp_path / "no-alignments", **common))  # type: ignore[arg-type]


def test_evaluate_copies_reports_and_updates_the_card(
    aligned_corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    built = next(p for p in build_tiny_models(tmp_path / "m") if p.name.endswith("transformer"))
    folder = shutil.copytree(built, tmp_path / "model")
    before = json.loads((folder / "card.json").read_text())
    args = ["evaluate", str(folder), "--data-dir", str(aligned_corpus), "--copies", "--beam", "1", "--update-card"]
    assert main(args) == 0
    result = json.loads(capsys.readouterr().out)
    test2016 = TINY_PAIRS[4:]  # the fixture's test2016 split
    assert result["split"] == "test2016" and result["sentences"] == len(test2016)
    copied = result["copied"]
    assert copied["all"]["strings"] == sum(v["strings"] for k, v in copied.items() if k != "all") > 0
    assert 0 <= copied["all"]["copied"] <= copied["all"]["strings"]
    after = json.loads((folder / "card.json").read_text())
    assert after["copies"] == result and {k: v for k, v in after.items() if k != "copies"} == before
    bare = shutil.copytree(aligned_corpus, tmp_path / "bare", ignore=shutil.ignore_patterns("alignments"))
    assert main(["evaluate", str(folder), "--data-dir", str(bare), "--copies"]) == 2
    err = capsys.readouterr().err
    assert "attnscope evaluate: error:" in err and "align-corpus" in err and "Traceback" not in err
