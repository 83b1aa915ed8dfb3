"""The score functions compared: one row per RNN alignment score function of a language pair,
built from the model cards of whatever models are present (the Models page and docs/findings.md).

Only the plain RNN encoder-decoders (``architecture == "rnn"``) enter: they share the preset,
data and tokenizer, so the score function is the one thing that differs. The self-attentive RNN
and the Transformer change more than the score and stay out. The no-attention baseline
(``score == "none"``) is the floor every other row is measured against.

Numbers come from the cards: BLEU (test2016, beam 5, lowercased 13a, and on sources of 21+ words),
chrF (sacreBLEU's chrF2, cased, on the same translations),
the mean cross-attention entropy (teacher-forced on test2016), training time, and, where the card
has one, the word-alignment F1 of the model's one head (card key ``alignment``). The number of
parameters the score function itself adds is counted on the real score module built from the
card's hyperparameters, so it needs no weights. Each score function's formula, parameters and
reading come from the one registry of them, :data:`attnscope.nn.scores.SCORE_FUNCTIONS`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from attnscope.nn.config import SCORES
from attnscope.nn.scores import SCORE_FUNCTIONS, build_score

SPLIT = "test2016"
LONG_BUCKET = "21+"


def score_parameter_count(card: dict[str, Any]) -> int | None:
    """Parameters of the card's score module (0 for dot, scaled_dot and none), counted on the real
    module built from the card's hyperparameters; None when the card lacks them."""
    score = card.get("score")
    model = (card.get("hyperparameters") or {}).get("model") or {}
    if score == "none":
        return 0
    if score not in SCORES or not isinstance(model.get("hidden_dim"), int):
        return None
    module = build_score(score, model["hidden_dim"], max_positions=int(model.get("max_source_positions", 256)))
    return sum(p.numel() for p in module.parameters())


def _bleu(card: dict[str, Any]) -> float | None:
    value = ((card.get("bleu") or {}).get(SPLIT) or {}).get("lowercase_13a")
    return float(value) if isinstance(value, int | float) else None


def _chrf(card: dict[str, Any]) -> float | None:
    value = ((card.get("chrf") or {}).get(SPLIT) or {}).get("score")
    return float(value) if isinstance(value, int | float) else None


def _long_bleu(card: dict[str, Any]) -> tuple[float | None, int | None]:
    for row in (card.get("bleu_by_length") or {}).get(SPLIT) or []:
        if row.get("bucket") == LONG_BUCKET:
            return row.get("bleu"), row.get("sentences")
    return None, None


def _entropy(card: dict[str, Any]) -> dict[str, Any]:
    value = (card.get("attention_entropy") or {}).get(SPLIT)
    return value if isinstance(value, dict) else {}


def _alignment_f1(card: dict[str, Any]) -> float | None:
    """The word-alignment F1 of the model's head (an RNN has one) from the card's ``alignment``."""
    alignment = card.get("alignment")
    if not isinstance(alignment, dict):
        return None
    for candidate in ((alignment.get("best_head") or {}).get("f1"), alignment.get("f1")):
        if isinstance(candidate, int | float):
            return float(candidate)
    return None


def _pair(card: dict[str, Any]) -> str:
    return f"{card.get('source_lang')}-{card.get('target_lang')}"


def score_rows(cards: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (language pair, score function) of the plain RNN models in ``cards``, in the
    classic table's order with the floor (no attention) last. A pair with two models of one score
    keeps the first by id. ``delta_bleu``/``delta_chrf``/``delta_long`` are against the pair's floor, when present."""
    chosen: dict[tuple[str, str], dict[str, Any]] = {}
    for card in sorted(cards, key=lambda c: str(c.get("id"))):
        if card.get("architecture") == "rnn" and card.get("score") in SCORES and not card.get("error"):
            chosen.setdefault((_pair(card), card["score"]), card)
    rows = []
    for (pair, score), card in sorted(chosen.items(), key=lambda kv: (kv[0][0], SCORES.index(kv[0][1]))):
        info = SCORE_FUNCTIONS[score]
        long_bleu, long_sentences = _long_bleu(card)
        entropy = _entropy(card)
        rows.append({
            "pair": pair, "source_lang": card.get("source_lang"), "target_lang": card.get("target_lang"),
            "model": card["id"], "score": score, "floor": score == "none",
            "formula": info.formula, "parameters_formula": info.parameters, "reading": info.reading,
            "score_parameters": score_parameter_count(card), "parameters": card.get("parameters"),
            "bleu": _bleu(card), "chrf": _chrf(card), "bleu_long": long_bleu, "long_sentences": long_sentences,
            "entropy": entropy.get("mean"), "entropy_normalized": entropy.get("normalized"),
            "train_time_s": (card.get("training") or {}).get("time_s"),
            "epochs": (card.get("training") or {}).get("epochs"),
            "alignment_f1": _alignment_f1(card), "note": card.get("note"),
            "bleu_by_length": (card.get("bleu_by_length") or {}).get(SPLIT),
        })  # fmt: skip
    floors = {r["pair"]: r for r in rows if r["floor"]}
    for row in rows:
        floor = floors.get(row["pair"]) or {}
        row["delta_bleu"] = _difference(row["bleu"], floor.get("bleu"))
        row["delta_chrf"] = _difference(row["chrf"], floor.get("chrf"))
        row["delta_long"] = _difference(row["bleu_long"], floor.get("bleu_long"))
    return rows


def _difference(value: float | None, floor: float | None) -> float | None:
    return None if value is None or floor is None else round(value - floor, 2)
