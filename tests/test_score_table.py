"""The score-function table's rows: built from cards alone, the plain RNNs only, in the classic
table's order with the floor last, differences to the floor, the score module's own parameter
count, the alignment F1 where a card has one; and every shipped RNN card has what the rows read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from attnscope.nn.config import SCORES
from attnscope.nn.scores import build_score
from attnscope.repository import discover, read_card
from attnscope.score_table import SCORE_FUNCTIONS, score_parameter_count, score_rows

MODELS_DIR = Path(__file__).resolve().parents[1] / "models"


def card(model_id: str, score: str | None, bleu: float | None, *, architecture: str = "rnn", **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": model_id, "architecture": architecture, "score": score, "source_lang": "en", "target_lang": "de",
        "hyperparameters": {"model": {"hidden_dim": 8, "max_source_positions": 16}},
        "training": {"time_s": 60.0, "epochs": 3},
    }  # fmt: skip
    if bleu is not None:
        out["bleu"] = {"test2016": {"lowercase_13a": bleu, "cased": bleu - 1}}
        out["chrf"] = {"test2016": {"score": bleu + 25, "signature": "nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no"}}
        out["bleu_by_length"] = {"test2016": [{"bucket": "1-8", "sentences": 5, "bleu": bleu + 5}, {"bucket": "21+", "sentences": 2, "bleu": bleu - 10}]}
        out["attention_entropy"] = {"test2016": {"mean": 1.5, "normalized": 0.5, "rows": 10}}
    return {**out, **extra}


def test_rows_are_the_plain_rnns_in_table_order_with_the_floor_last() -> None:
    cards = [
        card("en-de-rnn-none", "none", 20.0),
        card("en-de-transformer", None, 40.0, architecture="transformer"),
        card("en-de-self-attentive", "additive", 32.0, architecture="self_attentive_rnn"),
        card("en-de-rnn-general", "general", 35.0, alignment={"best_head": {"layer": 0, "head": 0, "f1": 0.42}}),
        card("en-de-rnn-additive", "additive", 34.5, note="short run"),
        card("en-de-rnn-broken", "dot", 30.0, error="cannot load"),
        card("en-fr-rnn-query_key", "query_key", 50.0, source_lang="en", target_lang="fr"),
    ]
    rows = score_rows(cards)
    assert [(r["pair"], r["score"]) for r in rows] == [
        ("en-de", "additive"), ("en-de", "general"), ("en-de", "none"), ("en-fr", "query_key")
    ]
    additive, general, floor, fr = rows
    assert floor["floor"] and not additive["floor"]
    assert (additive["delta_bleu"], additive["delta_long"]) == (14.5, 14.5)
    assert (additive["chrf"], additive["delta_chrf"], floor["chrf"]) == (59.5, 14.5, 45.0)
    assert fr["delta_bleu"] is None  # no en-fr floor
    assert general["alignment_f1"] == 0.42 and additive["alignment_f1"] is None
    assert additive["note"] == "short run" and additive["bleu_long"] == 24.5 and additive["long_sentences"] == 2
    assert additive["entropy"] == 1.5 and additive["formula"] == SCORE_FUNCTIONS["additive"].formula
    assert additive["train_time_s"] == 60.0 and additive["bleu_by_length"][0]["bucket"] == "1-8"


def test_a_partial_card_gives_empty_cells_not_errors() -> None:
    (row,) = score_rows([{"id": "m", "architecture": "rnn", "score": "cosine"}])
    assert row["bleu"] is row["bleu_long"] is row["entropy"] is row["score_parameters"] is row["delta_bleu"] is None
    assert row["chrf"] is row["delta_chrf"] is None


@pytest.mark.parametrize("score", SCORES)
def test_score_parameters_are_the_score_modules_own(score: str) -> None:
    expected = 0 if score == "none" else sum(p.numel() for p in build_score(score, 8, max_positions=16).parameters())
    assert score_parameter_count(card("m", score, None)) == expected
    by_hand = {"additive": 2 * 64 + 2 * 8, "dot": 0, "scaled_dot": 0, "general": 64, "query_key": 128,
               "concat": 16, "cosine": 1, "location": 8 * 16 + 16, "none": 0}  # fmt: skip
    assert expected == by_hand[score]


RNN_FOLDERS = [f for f in discover(MODELS_DIR) if read_card(f)[0].get("architecture") == "rnn"]


def test_every_score_function_is_shipped_for_en_de() -> None:
    shipped = {read_card(f)[0]["score"] for f in RNN_FOLDERS if f.name.startswith("en-de-")}
    assert shipped == set(SCORES)


@pytest.mark.parametrize("folder", RNN_FOLDERS, ids=lambda p: p.name)
def test_each_shipped_rnn_card_has_what_the_table_reads(folder: Path) -> None:
    (row,) = score_rows([read_card(folder)[0]])
    for key in ("bleu", "chrf", "bleu_long", "score_parameters", "train_time_s", "bleu_by_length"):
        assert row[key] is not None, key
    assert 0 < row["bleu"] < row["chrf"] < 100 and row["long_sentences"] > 0
    if row["score"] == "none":
        assert row["entropy"] is None  # nothing to measure
    else:
        assert 0 < row["entropy"] and 0 < row["entropy_normalized"] < 1
