"""The role rules, one at a time, and the per-head summary they are applied to."""

from __future__ import annotations

import numpy as np
import pytest

from attnscope.analysis.roles import ALIGNMENT, POSITIONAL, RARE, SINK, assign_role, summarize
from attnscope.analysis.rows import COLUMNS

QUIET = {"eos_share": 0.1, "prev_share": 0.1, "same_share": 0.1, "next_share": 0.1, "rare_share": 0.1, "alignment_f1": None}


@pytest.mark.parametrize(
    ("changes", "role"),
    [
        ({}, "mixed"),
        ({"eos_share": SINK}, "sink"),
        ({"eos_share": SINK, "prev_share": 0.9}, "sink"),  # a sink first: it is what it does most
        ({"prev_share": POSITIONAL}, "positional-previous"),
        ({"next_share": 0.8, "prev_share": 0.6}, "positional-next"),  # the largest positional share
        ({"same_share": 0.7}, "positional-same"),
        ({"alignment_f1": ALIGNMENT}, "alignment"),
        ({"alignment_f1": ALIGNMENT, "rare_share": 0.9}, "alignment"),
        ({"rare_share": RARE}, "rare-word"),
        ({"rare_share": RARE - 0.01}, "mixed"),
        ({"prev_share": None, "same_share": float("nan"), "next_share": None}, "mixed"),  # cross: no positions
    ],
)
def test_role_rules(changes: dict[str, float | None], role: str) -> None:
    assert assign_role({**QUIET, **changes})[0] == role


def test_role_score_is_the_deciding_statistic() -> None:
    assert assign_role({**QUIET, "prev_share": 0.93}) == ("positional-previous", pytest.approx(0.93))
    assert assign_role(QUIET) == ("mixed", None)


def _rows(values: dict[str, list[float]], sentences: int) -> dict[str, np.ndarray]:
    """Columns for one encoder head over ``sentences`` sentences, statistics as given (NaN else)."""
    columns = {name: np.full(sentences, np.nan) for name in COLUMNS}
    columns.update(sentence=np.arange(sentences), kind=np.array(["encoder_self"] * sentences, dtype=object),
                   layer=np.zeros(sentences, dtype=np.int64), head=np.zeros(sentences, dtype=np.int64))
    for name in ("align_correct", "align_hypothesis", "align_reference"):
        columns[name] = np.full(sentences, -1)
    for name, vals in values.items():
        columns[name] = np.array(vals, dtype=np.float64)
    return columns


def test_summary_means_quantiles_and_role() -> None:
    (head,) = summarize(_rows({"prev_share": [1.0, 1.0, 0.7, 0.9], "eos_share": [0.0, 0.1, 0.1, 0.0]}, 4))
    assert head["kind"] == "encoder_self" and head["sentences"] == 4
    assert head["prev_share_mean"] == pytest.approx(0.9)
    assert head["prev_share_q50"] == pytest.approx(0.95)
    assert head["prev_share_q10"] <= head["prev_share_q50"] <= head["prev_share_q90"]
    assert head["entropy_mean"] is None and head["alignment_f1"] is None
    assert head["role"] == "positional-previous"


def test_summary_alignment_f1_is_over_the_corpus_counts() -> None:
    columns = _rows({}, 2)
    columns.update(align_correct=np.array([2, 0]), align_hypothesis=np.array([2, 2]), align_reference=np.array([2, 4]))
    (head,) = summarize(columns)
    assert head["alignment_f1"] == pytest.approx(2 * 2 / (4 + 6), abs=1e-4)  # not the mean of 1.0 and 0.0
