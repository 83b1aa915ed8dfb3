"""Pharaoh text, grow-diag-final-and on a hand-worked example, and the alignment scores."""

from __future__ import annotations

import pytest

from attnscope.alignment.links import (
    AlignmentCounts,
    diagonal_links,
    format_pharaoh,
    grow_diag_final_and,
    parse_pharaoh,
)


def test_pharaoh_round_trips() -> None:
    links = {(0, 0), (2, 1), (1, 2), (3, 2)}
    text = format_pharaoh(links)
    assert text == "0-0 2-1 1-2 3-2"  # by target word, then source word
    assert parse_pharaoh(text) == links
    assert parse_pharaoh("") == set()


@pytest.mark.parametrize("bad", ["0-", "a-1", "1:2", "0-1-2"])
def test_pharaoh_rejects_malformed_items(bad: str) -> None:
    with pytest.raises(ValueError, match="Pharaoh"):
        parse_pharaoh(f"0-0 {bad}")


def test_grow_diag_final_and_hand_worked() -> None:
    """Five source and five target words.

    forward (each target word -> one source word): 0-0 1-1 1-2 4-4
    reverse (each source word -> one target word): 0-0 1-1 3-4
    intersection 0-0 1-1; union adds 1-2, 4-4, 3-4.
    grow-diag: 1-2 neighbours 1-1 and target word 2 is unaligned -> added. 4-4 and 3-4 neighbour
    no alignment point -> not grown.
    final-and(forward): 4-4, both words unaligned -> added.
    final-and(reverse): 3-4, target word 4 is now aligned -> NOT added (plain "final" would add it).
    """
    forward = {(0, 0), (1, 1), (1, 2), (4, 4)}
    reverse = {(0, 0), (1, 1), (3, 4)}
    assert grow_diag_final_and(forward, reverse) == {(0, 0), (1, 1), (1, 2), (4, 4)}


def test_grow_diag_follows_diagonals_step_by_step() -> None:
    """Only 0-0 is in both directions. From 0-0 the side neighbour 0-1 (target word 1 unaligned)
    is added, then the diagonal 1-1 (source word 1 unaligned), then, growing from 1-1, 2-2."""
    forward = {(0, 0), (1, 1), (2, 2)}
    reverse = {(0, 0), (0, 1)}
    assert grow_diag_final_and(forward, reverse) == {(0, 0), (0, 1), (1, 1), (2, 2)}
    # Without the diagonal neighbours ("grow" only) 1-1 would need a side neighbour: 0-1 gives it.
    assert grow_diag_final_and({(0, 0), (2, 2)}, {(0, 0)}) == {(0, 0), (2, 2)}  # via final-and


def test_scores_and_aer() -> None:
    counts = AlignmentCounts()
    counts.add({(0, 0), (1, 1), (2, 1)}, {(0, 0), (1, 1), (2, 2), (3, 3)})
    scores = counts.scores()
    assert scores["precision"] == round(2 / 3, 4)
    assert scores["recall"] == 0.5
    assert scores["f1"] == round(2 * (2 / 3) * 0.5 / (2 / 3 + 0.5), 4)
    assert scores["aer"] == round(1 - 4 / 7, 4)  # 1 - 2|A∩S| / (|A| + |S|)


def test_diagonal_baseline() -> None:
    assert diagonal_links(3, 3) == {(0, 0), (1, 1), (2, 2)}
    assert diagonal_links(5, 3) == {(0, 0), (2, 1), (4, 2)}  # first, middle, last
    assert diagonal_links(2, 4) == {(0, 0), (0, 1), (1, 2), (1, 3)}  # 0, 1/3, 2/3, 1 rounded
    assert diagonal_links(4, 1) == {(0, 0)}
