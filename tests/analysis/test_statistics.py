"""Each statistic against hand-built attention patterns whose answer is known."""

from __future__ import annotations

import math

import pytest
import torch

from attnscope.analysis.statistics import (
    Keys,
    alignment_counts,
    f1,
    head_statistics,
    is_punctuation,
    rarest_position,
)

N = 6  # keys: five tokens then </s>
KEYS = Keys(boundary=N - 1, punctuation=[False, False, True, False, False, False], rare=3, positional=True)


def one_hot(columns: list[int], width: int = N) -> torch.Tensor:
    """(1, 1, len(columns), width): row q puts all its weight on key columns[q]."""
    attn = torch.zeros(len(columns), width)
    attn[torch.arange(len(columns)), torch.tensor(columns)] = 1.0
    return attn[None, None]


def test_a_head_on_the_previous_token_has_previous_share_one() -> None:
    # Row 0 has no previous token: it looks at itself and is left out of the previous share.
    stats = head_statistics(one_hot([0, 0, 1, 2, 3, 4]), KEYS)
    assert stats["prev_share"] is not None and stats["prev_share"].item() == pytest.approx(1.0)
    assert stats["next_share"] is not None and stats["next_share"].item() == pytest.approx(0.0)
    assert stats["same_share"] is not None and stats["same_share"].item() == pytest.approx(1 / N)
    assert stats["entropy"] is not None and stats["entropy"].item() == pytest.approx(0.0, abs=1e-6)
    assert stats["max_weight"] is not None and stats["max_weight"].item() == pytest.approx(1.0)


def test_a_head_on_the_next_and_same_token() -> None:
    nxt = head_statistics(one_hot([1, 2, 3, 4, 5, 5]), KEYS)["next_share"]
    same = head_statistics(one_hot(list(range(N))), KEYS)["same_share"]
    assert nxt is not None and nxt.item() == pytest.approx(1.0)
    assert same is not None and same.item() == pytest.approx(1.0)


def test_a_head_on_eos_is_all_boundary() -> None:
    stats = head_statistics(one_hot([N - 1] * N), KEYS)
    assert stats["eos_share"] is not None and stats["eos_share"].item() == pytest.approx(1.0)
    assert stats["punct_share"] is not None and stats["punct_share"].item() == 0.0
    assert stats["rare_share"] is not None and stats["rare_share"].item() == 0.0


def test_uniform_attention_shares_and_entropy() -> None:
    attn = torch.full((2, 3, N, N), 1.0 / N)  # two layers, three heads
    stats = head_statistics(attn, KEYS)
    for name in ("eos_share", "punct_share", "rare_share", "prev_share", "same_share", "next_share"):
        value = stats[name]
        assert value is not None and value.shape == (2, 3)
        assert torch.allclose(value, torch.full((2, 3), 1.0 / N))
    entropy = stats["entropy"]
    assert entropy is not None and torch.allclose(entropy, torch.full((2, 3), math.log(N)))


def test_punctuation_and_rare_shares_follow_their_keys() -> None:
    stats = head_statistics(one_hot([2, 2, 3, 3, 3, 3]), KEYS)
    assert stats["punct_share"] is not None and stats["punct_share"].item() == pytest.approx(2 / N)
    assert stats["rare_share"] is not None and stats["rare_share"].item() == pytest.approx(4 / N)


def test_cross_attention_has_no_positional_shares() -> None:
    keys = Keys(boundary=N - 1, punctuation=[False] * N, rare=0, positional=False)
    stats = head_statistics(one_hot([0, 1, 2], N), keys)
    assert stats["prev_share"] is None and stats["same_share"] is None and stats["next_share"] is None


def test_mismatched_key_flags_are_refused() -> None:
    with pytest.raises(ValueError, match="key flags"):
        head_statistics(one_hot([0, 1]), Keys(boundary=0, punctuation=[False], rare=None, positional=True))


def test_is_punctuation() -> None:
    assert is_punctuation("▁,") and is_punctuation(".") and is_punctuation("?!") and is_punctuation("▁-")
    assert not is_punctuation("▁Mann") and not is_punctuation("3") and not is_punctuation("▁") and not is_punctuation("a.")


def test_rarest_position_prefers_the_rarest_then_the_first() -> None:
    counts = {10: 5, 11: 1, 12: 1, 13: 9}
    assert rarest_position([10, 11, 12, 13], counts) == 1
    assert rarest_position([10, 13, 99], counts) == 2  # never seen counts as rarest
    with pytest.raises(ValueError):
        rarest_position([], counts)


def test_alignment_counts_and_f1() -> None:
    merged = torch.zeros(1, 2, 3, 3)  # head 0 aligns the diagonal, head 1 everything to word 0
    merged[0, 0] = torch.eye(3)
    merged[0, 1, :, 0] = 1.0
    correct, hypothesis, reference = alignment_counts(merged, {(0, 0), (1, 1), (2, 2)})
    assert correct == [[3, 1]] and hypothesis == 3 and reference == 3
    assert f1(3, 3, 3) == 1.0 and f1(1, 3, 3) == pytest.approx(1 / 3)
    assert math.isnan(f1(0, 0, 0))
