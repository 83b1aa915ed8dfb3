"""The trust fields of an answer: source words that should come back as written and did not
(attnscope.text.missing), and the low-confidence flag (attnscope.decoding.confidence), checked
on the issue's sentence and output and against a plain re-computation; the shipped en-de
Transformer's rescored protect output names Berlin as missing."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from attnscope.decoding.confidence import DEFAULT_THRESHOLD, calibrate, confidence_of, threshold_of
from attnscope.text.missing import missing_words

SOURCE = (
    "On Friday, 14 March 2025, Dr. Anna Kowalczyk paid €1,299.99 for 3 tickets at "
    "https://example.com/tickets and flew from Berlin to São Paulo at 7:45 pm."
)
OUTPUT = (  # what the shipped en-de Transformer gave with "Keep as written" (issue 46)
    "7:45 Flünne, 14 March, 2025 Dr. Anna Kowalczyk São Paulo für 3 Lata und von ihnen haben sich "
    "€1,299.99 Karten https://example.com/tickets an."
)
SPANS = [(11, 13), (20, 24), (26, 44), (50, 59), (64, 65), (77, 104), (129, 138), (142, 146)]


def test_the_issue_output_names_berlin_and_friday() -> None:
    found = missing_words(SOURCE, OUTPUT, SPANS)
    assert [w["text"] for w in found] == ["Friday", "Berlin"]
    for w in found:
        assert SOURCE[w["source_start"] : w["source_end"]] == w["text"]


def test_a_dropped_protected_span_or_number_is_named() -> None:
    found = missing_words(SOURCE, OUTPUT.replace("€1,299.99 ", "").replace(" 3 ", " "), SPANS)
    assert {w["text"] for w in found} >= {"€1,299.99", "3"}
    assert next(w for w in found if w["text"] == "€1,299.99")["protected"] is True


def test_a_title_does_not_end_the_sentence() -> None:
    found = missing_words(SOURCE, "Am Freitag zahlte Dr. Kowalczyk.")
    assert "Anna" in [w["text"] for w in found]  # after "Dr." a capital is a name, not a new sentence
    assert "Kowalczyk" not in [w["text"] for w in found]


def test_a_faithful_translation_has_nothing_missing() -> None:
    assert missing_words("A man is riding a bicycle.", "Ein Mann fährt Fahrrad.") == []
    assert missing_words("Anna sees 2 dogs in Berlin.", "Anna sieht 2 Hunde in Berlin.") == []
    assert missing_words("Anna sees 2 dogs in Berlin.", "Anna sieht 22 Hunde.") == [
        {"text": "2", "source_start": 10, "source_end": 11, "protected": False},
        {"text": "Berlin", "source_start": 20, "source_end": 26, "protected": False},
    ]


def test_calibration_is_the_in_domain_quantile() -> None:
    scores = [-0.1 * i for i in range(1, 101)]  # -0.1 .. -10.0
    threshold = calibrate(scores, 0.05)
    assert sum(s < threshold for s in scores) == 4  # nearest rank: 5 of 100 at or below it
    with pytest.raises(ValueError):
        calibrate([], 0.05)
    with pytest.raises(ValueError):
        calibrate(scores, 1.5)


def test_confidence_reads_the_mean_token_logprob_and_the_card() -> None:
    logprobs = [-0.1, -0.3, -2.0]
    plain = confidence_of(logprobs, {})
    assert plain["mean_logprob"] == pytest.approx(statistics.mean(logprobs), abs=1e-4)
    assert plain["threshold"] is None and plain["calibrated"] is False
    assert plain["low"] is False and plain["explanation"] is None  # not calibrated: never flagged
    assert threshold_of({})[0] == DEFAULT_THRESHOLD
    unsure = confidence_of(logprobs, {"confidence": {"threshold": -0.5}})
    assert unsure["low"] is True and "unsure" in unsure["explanation"]
    card = {"confidence": {"threshold": -1.0, "quantile": 0.05}}
    assert threshold_of(card) == (-1.0, 0.05, True)
    sure = confidence_of(logprobs, card)
    assert sure["low"] is False and sure["explanation"] is None
    assert confidence_of([], card)["low"] is False


def test_the_shipped_model_card_is_calibrated() -> None:
    import json

    card = json.loads((Path(__file__).resolve().parents[1] / "models/en-de-transformer/card.json").read_text())
    section = card["confidence"]
    assert section["flagged"]["out_of_domain"] > 5 * section["flagged"]["test2016"]
