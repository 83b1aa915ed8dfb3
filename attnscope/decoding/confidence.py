"""A low-confidence / out-of-domain flag from the model's own numbers.

The shipped models learnt from Multi30k captions; news, technical or chatty sentences come back
as fluent nonsense. The model says so itself: it is far less sure of the tokens it writes. The
flag reads the **mean log-probability per output token** (``target_logprobs`` of the answer, the
end-of-sentence token included) and compares it with a threshold calibrated per model on
in-domain sentences (Multi30k val): the threshold is the value below which only ``quantile``
(default 5 %) of in-domain outputs fall, so an in-domain sentence is flagged about one time in
twenty and an out-of-domain one far more often (the rates are measured by
``bench/confidence.py``, written into the card's ``confidence`` section, and listed in
docs/decoding.md).

A model whose card has no ``confidence`` section is not flagged (``low`` false, ``threshold``
null, ``calibrated`` false): the scale of the mean differs between models (the shipped en-de
Transformer's threshold is -0.50, its RNN's -1.46), so another model's threshold would flag a
whole model or none of it. :data:`DEFAULT_THRESHOLD` is the en-de Transformer's, for reference.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["DEFAULT_QUANTILE", "DEFAULT_THRESHOLD", "calibrate", "confidence_of", "mean_logprob", "threshold_of"]

DEFAULT_QUANTILE = 0.05
# Calibrated for models/en-de-transformer on Multi30k val (beam 5): see its card's `confidence`.
DEFAULT_THRESHOLD = -0.5

EXPLANATION = (
    "the model was unsure of the words it wrote (mean log-probability per token {mean:.2f} < {threshold:.2f}, "
    "a level only {quantile:.0%} of its in-domain translations fall below): the sentence is probably unlike "
    "its training data, so the translation may be fluent but wrong"
)


def mean_logprob(token_logprobs: Sequence[float]) -> float:
    """The mean of ``token_logprobs`` ([target tokens]); 0.0 for an empty output."""
    return float(sum(token_logprobs) / len(token_logprobs)) if token_logprobs else 0.0


def calibrate(in_domain: Sequence[float], quantile: float = DEFAULT_QUANTILE) -> float:
    """The ``quantile`` of ``in_domain`` mean log-probabilities (nearest rank): outputs whose mean
    is below it are flagged. ValueError for an empty sample or a quantile outside (0, 1)."""
    if not in_domain:
        raise ValueError("no in-domain scores to calibrate on")
    if not 0.0 < quantile < 1.0:
        raise ValueError(f"quantile must be in (0, 1), got {quantile}")
    ordered = sorted(in_domain)
    rank = max(0, math.ceil(quantile * len(ordered)) - 1)
    return float(ordered[rank])


def threshold_of(card: Mapping[str, Any]) -> tuple[float, float, bool]:
    """(threshold, quantile, calibrated) from a model card's ``confidence`` section, else the
    defaults with ``calibrated`` False."""
    section = card.get("confidence") if isinstance(card, Mapping) else None
    if isinstance(section, Mapping):
        try:
            return float(section["threshold"]), float(section.get("quantile", DEFAULT_QUANTILE)), True
        except (KeyError, TypeError, ValueError):
            pass
    return DEFAULT_THRESHOLD, DEFAULT_QUANTILE, False


def confidence_of(token_logprobs: Sequence[float], card: Mapping[str, Any]) -> dict[str, Any]:
    """The answer's ``confidence`` field: the mean log-probability per token, the threshold (null
    for a model not calibrated), whether the output is flagged ``low`` (never without a
    calibration), whether the threshold was calibrated for this model, and a one-line
    ``explanation`` when it is flagged (else null)."""
    mean = mean_logprob(token_logprobs)
    threshold, quantile, calibrated = threshold_of(card)
    low = calibrated and bool(token_logprobs) and mean < threshold
    return {
        "mean_logprob": round(mean, 4),
        "threshold": round(threshold, 4) if calibrated else None,
        "low": low,
        "calibrated": calibrated,
        "explanation": EXPLANATION.format(mean=mean, threshold=threshold, quantile=quantile) if low else None,
    }
