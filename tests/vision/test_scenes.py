from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from attnscope.vision.data import CLASSES, load_items
from attnscope.vision.scenes import (
    EOS_ID,
    VOCAB,
    Placed,
    caption,
    caption_words,
    cell_overlap,
    decode,
    encode,
    make_scenes,
    random_layout,
)

NP = r"an? (t-shirt|trouser|pullover|dress|coat|sandal|shirt|sneaker|bag|ankle boot)"
REL = r"(above|below|left of|right of)"


def holds(rel: str, s: Placed, o: Placed) -> bool:
    """The grammar's relation, restated independently of the generator."""
    if rel in ("above", "below"):
        return s.row != o.row and (s.row < o.row) == (rel == "above")
    return s.row == o.row and (s.col < o.col) == (rel == "left of")


def parse(text: str) -> tuple[str, list[tuple[str, str]]]:
    """caption -> (subject class, [(relation, object class)])."""
    for pattern, shape in (
        (rf"^{NP}$", "1"),
        (rf"^{NP} {REL} {NP}$", "2"),
        (rf"^{NP} {REL} {NP} and {NP}$", "3same"),
        (rf"^{NP} {REL} {NP} and {REL} {NP}$", "3diff"),
    ):
        m = re.match(pattern, text)
        if m:
            g = m.groups()
            if shape == "1":
                return g[0], []
            if shape == "2":
                return g[0], [(g[1], g[2])]
            if shape == "3same":
                return g[0], [(g[1], g[2]), (g[1], g[3])]
            return g[0], [(g[1], g[2]), (g[3], g[4])]
    raise AssertionError(f"caption outside the grammar: {text!r}")


def test_examples_of_the_issue() -> None:
    sneaker, bag = CLASSES.index("sneaker"), CLASSES.index("bag")
    assert caption([Placed(bag, 2, 1), Placed(sneaker, 0, 1)]) == "a sneaker above a bag"
    dress, coat, sandal = (CLASSES.index(c) for c in ("dress", "coat", "sandal"))
    layout = [Placed(sandal, 1, 2), Placed(dress, 1, 0), Placed(coat, 1, 1)]
    assert caption(layout) == "a dress left of a coat and a sandal"
    assert caption([Placed(CLASSES.index("ankle boot"), 2, 2)]) == "an ankle boot"
    mixed = [Placed(0, 1, 1), Placed(1, 0, 1), Placed(2, 1, 0)]
    assert caption(mixed) == "a t-shirt below a trouser and right of a pullover"


def test_captions_match_their_layouts() -> None:
    generator = torch.Generator().manual_seed(0)
    seen = set()
    for _ in range(500):
        layout = random_layout(generator)
        text = caption(layout)
        subject, relations = parse(text)
        by_class = {CLASSES[p.cls]: p for p in layout}
        assert set(by_class) == {subject, *(o for _, o in relations)}  # every item named once
        assert by_class[subject].cls == min(p.cls for p in layout)
        for rel, other in relations:
            assert holds(rel, by_class[subject], by_class[other]), (text, layout)
            seen.add(rel)
        words, names = caption_words(layout)
        for word, named in zip(words, names, strict=True):
            if named is None:
                assert all(word not in c.split() for c in CLASSES)
            else:
                assert word in CLASSES[layout[named].cls].split()
    assert seen == {"above", "below", "left of", "right of"}


def test_bad_layouts_are_refused() -> None:
    with pytest.raises(ValueError, match="distinct"):
        caption([Placed(1, 0, 0), Placed(1, 2, 2)])
    with pytest.raises(ValueError, match="distinct"):
        caption([Placed(1, 0, 0), Placed(2, 0, 0)])


def test_encode_decode() -> None:
    words = caption_words([Placed(9, 0, 0), Placed(8, 0, 2)])[0]
    assert " ".join(words) == "a bag right of an ankle boot"
    ids = encode(words)
    assert ids[-1] == EOS_ID and all(0 <= i < len(VOCAB) for i in ids)
    assert decode([*ids, 5, 5]) == words


def test_scenes_draw_items_in_their_cells(fashion_dir: Path) -> None:
    items = load_items("train", fashion_dir)
    scenes = make_scenes(items, 30, torch.Generator().manual_seed(2))
    assert scenes.images.shape == (30, 1, 84, 84)
    for b, layout in enumerate(scenes.layouts):
        occupied = {(p.row, p.col) for p in layout}
        for r in range(3):
            for c in range(3):
                cell = scenes.images[b, 0, 28 * r : 28 * r + 28, 28 * c : 28 * c + 28]
                assert (cell.sum() > 0) == ((r, c) in occupied)
        for p in layout:  # the synthetic class bar sits at rows 2c+3..2c+8 of the item
            cell = scenes.images[b, 0, 28 * p.row : 28 * p.row + 28, 28 * p.col : 28 * p.col + 28]
            assert int(cell[:, 4:24].mean(1).argmax()) in range(2 * p.cls + 3, 2 * p.cls + 9)
        assert decode(scenes.tokens[b].tolist()) == scenes.captions[b].split()


@pytest.mark.parametrize("grid", [6, 7, 9])
def test_cell_overlap(grid: int) -> None:
    overlap = cell_overlap(grid, grid)
    assert overlap.shape == (grid * grid, 9)
    assert torch.allclose(overlap.sum(1), torch.ones(grid * grid))
    uniform = torch.full((grid * grid,), 1 / grid**2)
    assert torch.allclose(uniform @ overlap, torch.full((9,), 1 / 9))
    if grid == 6:  # aligned: each grid cell lies in one scene cell
        assert set(overlap.flatten().tolist()) == {0.0, 1.0}
        assert overlap[0, 0] == 1 and overlap[35, 8] == 1
