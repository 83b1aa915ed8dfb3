"""Gold sure/possible alignment scores (Och & Ney 2003) against hand-computed cases, the RWTH-style
reader in both directions, head scoring on hand-made attention, and ``attnscope evaluate
--alignment-gold`` on a tiny model and a tiny gold folder."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from attnscope.alignment.gold import GoldCounts, GoldPair, parse_talp, read_gold, score_links
from attnscope.alignment.heads import WordMap
from attnscope.cli import main
from attnscope.explain.gold import GoldHeadScores, diagonal_baseline
from attnscope.text.corpus import DataError

torch.set_num_threads(1)


def scores(hyp: set[tuple[int, int]], sure: set[tuple[int, int]], possible: set[tuple[int, int]]) -> dict[str, float]:
    counts = GoldCounts()
    counts.add(hyp, sure, possible)
    return counts.scores()


def test_sure_inside_possible_hand_computed() -> None:
    sure, possible = {(0, 0)}, {(0, 0), (1, 1)}
    # A = 3 links: one sure, one only possible, one wrong. P = 2/3, R = 1/1, AER = 1 - (1+2)/(3+1)
    assert scores({(0, 0), (1, 1), (2, 2)}, sure, possible) == {"precision": 0.6667, "recall": 1.0, "aer": 0.25}
    # a possible-only link raises precision, never recall
    assert scores({(1, 1)}, sure, possible) == {"precision": 1.0, "recall": 0.0, "aer": 0.5}
    # predicting exactly the sure links, or exactly the possible ones, is a perfect AER
    assert scores(sure, sure, possible)["aer"] == 0.0 == scores(possible, sure, possible)["aer"]


def test_empty_predictions_and_empty_gold() -> None:
    assert scores(set(), {(0, 0), (1, 2)}, {(0, 0), (1, 2)}) == {"precision": 0.0, "recall": 0.0, "aer": 1.0}
    # no sure links, a possible one predicted: nothing missed, AER = 1 - (0 + 1)/(1 + 0)
    assert scores({(0, 1)}, set(), {(0, 1)}) == {"precision": 1.0, "recall": 0.0, "aer": 0.0}
    assert GoldCounts().scores() == {"precision": 0.0, "recall": 0.0, "aer": 1.0}


def test_possible_is_widened_to_contain_sure() -> None:
    # P given without the sure link: A∩P still counts it (S ⊆ P by definition)
    assert scores({(0, 0)}, {(0, 0)}, set())["aer"] == 0.0


def test_corpus_scores_sum_counts_not_sentence_averages() -> None:
    gold = [GoldPair("a", "b", [(0, 1)], [(0, 1)], {(0, 0)}, {(0, 0)}),
            GoldPair("a b c", "d e f", [(0, 1), (2, 3), (4, 5)], [(0, 1), (2, 3), (4, 5)],
                     {(0, 0), (1, 1), (2, 2)}, {(0, 0), (1, 1), (2, 2)})]
    # sentence 1 right (1 link), sentence 2 one of three: P = R = 2/4, AER = 1 - 4/8
    got = score_links([{(0, 0)}, {(0, 0), (2, 1), (1, 2)}], gold)
    assert got == {"precision": 0.5, "recall": 0.5, "aer": 0.5}


def test_parse_talp() -> None:
    assert parse_talp("1-2 3p1") == ({(0, 1)}, {(0, 1), (2, 0)})
    for bad in ("1x2", "0-1", "1-", "ap2"):
        with pytest.raises(DataError, match="not a gold link"):
            parse_talp(bad, "f:1")


def write_gold(folder: Path, de: list[str], en: list[str], links: list[str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "test.uc.de").write_text("".join(s + "\n" for s in de), encoding="utf-8")
    (folder / "test.uc.en").write_text("".join(s + "\n" for s in en), encoding="utf-8")
    (folder / "alignment.talp").write_text("".join(s + "\n" for s in links), encoding="utf-8")
    return folder


def test_reader_in_both_directions(tmp_path: Path) -> None:
    folder = write_gold(tmp_path / "g", ["Das stimmt nicht !"], ["That is not true !"], ["1-1 2-2 2p4 3-3 4-5"])
    (de_en,) = read_gold(folder, "de", "en")
    assert (de_en.source, de_en.target) == ("Das stimmt nicht !", "That is not true !")
    assert de_en.sure == {(0, 0), (1, 1), (2, 2), (3, 4)}
    assert de_en.possible == de_en.sure | {(1, 3)}
    assert de_en.source_words == [(0, 3), (4, 10), (11, 16), (17, 18)]
    (en_de,) = read_gold(folder, "en", "de")
    assert (en_de.source, en_de.target) == ("That is not true !", "Das stimmt nicht !")
    assert en_de.sure == {(j, i) for i, j in de_en.sure}
    assert en_de.possible == {(j, i) for i, j in de_en.possible}
    assert en_de.source_words == de_en.target_words
    # the same prediction transposed scores the same in either direction
    hyp = {(0, 0), (1, 3), (2, 1)}
    assert score_links([hyp], [de_en]) == score_links([{(j, i) for i, j in hyp}], [en_de])


def test_reader_errors(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="disagree|alignment lines"):
        read_gold(write_gold(tmp_path / "a", ["a b", "c"], ["x y"], ["1-1"]), "de", "en")
    with pytest.raises(DataError, match="points past"):
        read_gold(write_gold(tmp_path / "b", ["a b"], ["x y"], ["3-1"]), "de", "en")
    with pytest.raises(DataError, match="the model is en-fr"):
        read_gold(write_gold(tmp_path / "c", ["a"], ["x"], ["1-1"]), "en", "fr")


def one_hot(rows: list[int], width: int) -> torch.Tensor:
    out = torch.zeros(len(rows), width)
    for r, c in enumerate(rows):
        out[r, c] = 1.0
    return out


def test_head_scores_on_hand_made_attention() -> None:
    # three words, one piece each; T = S = 4 with </s>. Head 0 points step t at word t (diagonal),
    # head 1 at word 2 - t. At the reading row, word t is aligned by step t + 1.
    pair = GoldPair("a b c", "x y z", [(0, 1), (2, 3), (4, 5)], [(0, 1), (2, 3), (4, 5)],
                    {(0, 0), (1, 1), (2, 2)}, {(0, 0), (1, 1), (2, 2)})
    words = WordMap([0, 1, 2], [0, 1, 2], 3, 3)
    cross = torch.stack([one_hot([0, 1, 2, 3], 4), one_hot([2, 1, 0, 3], 4)])[None]  # (1, 2, 4, 4)
    produces, reads = GoldHeadScores(1, 2, "produces"), GoldHeadScores(1, 2, "reads")
    produces.add(cross, words, pair)
    reads.add(cross, words, pair)
    p, r = produces.report(), reads.report()
    assert p["aer"] == [[0.0, 0.6667]]  # anti-diagonal: only the middle word right, AER = 1 - 2/6
    assert p["best_head"] == {"layer": 0, "head": 0, "precision": 1.0, "recall": 1.0, "aer": 0.0}
    # reading rows: head 0 gives 1, 2, then (row 3 is </s>' own column, dropped) argmax of zeros -> 0
    assert r["aer"][0][0] == pytest.approx(1 - 0 / 6)
    assert r["rows"] == "reads" and p["sentences"] == 1


def test_diagonal_baseline_hand_computed() -> None:
    pair = GoldPair("a b c", "x y", [(0, 1), (2, 3), (4, 5)], [(0, 1), (2, 3)], {(0, 0), (2, 1)}, {(0, 0), (2, 1), (1, 1)})
    assert diagonal_baseline([pair]) == {"precision": 1.0, "recall": 1.0, "aer": 0.0}


def test_cli_scores_a_tiny_model_on_a_tiny_gold_file(
    tiny_models_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = shutil.copytree(tiny_models_dir / "en-de-transformer", tmp_path / "model")
    gold = write_gold(
        tmp_path / "gold",
        ["Ein Mann fährt Fahrrad .", "Zwei Hunde spielen im Schnee ."],
        ["A man rides a bicycle .", "Two dogs play in the snow ."],
        ["1-1 2-2 3-3 4-5 4p4 5-6", "1-1 2-2 3-3 4-4 4p5 5-6 6-7"],
    )
    assert main(["evaluate", str(folder), "--alignment-gold", str(gold), "--update-card"]) == 0
    printed = json.loads(capsys.readouterr().out)
    card = json.loads((folder / "card.json").read_text())["alignment_gold"]
    assert printed == card
    assert card["direction"] == "en-de" and card["sentences"] == 2
    assert {"weights", "norm", "rollout"} <= set(card["methods"])
    layers, heads = 2, 2  # the tiny config
    for method, by_rows in card["methods"].items():
        assert set(by_rows) == {"produces", "reads"}
        for report in by_rows.values():
            per = heads if method in ("weights", "norm") else 1
            assert len(report["aer"]) == layers and all(len(row) == per for row in report["aer"])
            assert all(0.0 <= v <= 1.0 for row in report["aer"] for v in row)
            assert report["best_head"]["aer"] == min(v for row in report["aer"] for v in row)
    # the diagonal on the transposed links, computed by hand: en 6/7 words -> de 5/6 words
    assert card["baselines"]["diagonal"] == diagonal_baseline(read_gold(gold, "en", "de"))
    assert [line["system"] for line in card["published"]][:3] == ["fast_align", "eflomal", "GIZA++ (Mgiza)"]


def test_cli_gold_errors_are_one_line(tiny_models_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = str(tiny_models_dir / "en-de-transformer")
    assert main(["evaluate", model, "--alignment-gold", str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err
    assert "attnscope evaluate: error: gold alignments" in err and "Traceback" not in err
    gold = write_gold(tmp_path / "bad", ["a b"], ["x"], ["1-1 2-2"])
    assert main(["evaluate", model, "--alignment-gold", str(gold)]) == 2
    err = capsys.readouterr().err
    assert "points past the sentence" in err and "Traceback" not in err
