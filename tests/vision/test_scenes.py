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


# -- training scenes drawn on the device (attnscope.vision.scene_pool) --


def test_the_layout_table_holds_every_layout_once_with_its_caption() -> None:
    from attnscope.vision.scene_pool import all_layouts, layout_table

    layouts = all_layouts()
    sets = {frozenset((p.cls, p.row, p.col) for p in lay) for lay in layouts}
    assert len(layouts) == len(sets) == 10 * 9 + 45 * 9 * 8 + 120 * 9 * 8 * 7
    table = layout_table()
    generator = torch.Generator().manual_seed(3)
    for _ in range(300):  # any layout make_scenes draws is in the table, with make_scenes' caption
        lay = random_layout(generator)
        key = sorted((p.cls, p.row, p.col) for p in lay)
        n = layouts.index([Placed(*k) for k in key])
        ids = encode(caption_words(lay)[0])
        assert table.tokens[n, : len(ids)].tolist() == ids and int(table.lengths[n]) == len(ids)
        assert (table.tokens[n, len(ids) :] == 0).all()


def test_device_scenes_paste_an_example_of_each_items_class_in_its_cell(fashion_dir: Path) -> None:
    from attnscope.vision.scene_pool import ScenePool

    items = load_items("train", fashion_dir)
    pool = ScenePool(items)
    images, tokens, index = pool.draw_indexed(64, torch.Generator().manual_seed(0))
    assert images.shape == (64, 1, 84, 84) and tokens.shape[0] == 64
    assert tokens.shape[1] == int(pool.table.lengths[index].max())
    examples = items.images.float() / 255
    for b in range(64):
        n = int(index[b])
        placed = {(int(pool.table.rows[n, k]), int(pool.table.cols[n, k])): int(pool.table.classes[n, k])
                  for k in range(int(pool.table.count[n]))}  # fmt: skip
        for row in range(3):
            for col in range(3):
                cell = images[b, 0, row * 28 : (row + 1) * 28, col * 28 : (col + 1) * 28]
                if (row, col) not in placed:
                    assert (cell == 0).all()
                    continue
                same = (examples == cell).flatten(1).all(1)  # pixel-exact copies of an example
                assert same.any() and (items.labels[same] == placed[(row, col)]).all()
        layout = [Placed(c, r, k) for (r, k), c in placed.items()]
        ids = encode(caption_words(layout)[0])
        assert tokens[b, : len(ids)].tolist() == ids and (tokens[b, len(ids) :] == 0).all()


def test_device_scenes_follow_make_scenes_distribution(fashion_dir: Path) -> None:
    from attnscope.vision.scene_pool import ScenePool

    pool = ScenePool(load_items("train", fashion_dir))
    _, _, index = pool.draw_indexed(30_000, torch.Generator().manual_seed(1))
    count = pool.table.count[index]
    for k in (1, 2, 3):  # uniform count, as random_layout draws it (±7 standard deviations)
        assert abs(float((count == k).float().mean()) - 1 / 3) < 0.02
    classes = pool.table.classes[index]
    cells = pool.table.rows[index] * 3 + pool.table.cols[index]
    placed = classes >= 0
    class_share = torch.bincount(classes[placed], minlength=10).float() / placed.sum()
    cell_share = torch.bincount(cells[placed], minlength=9).float() / placed.sum()
    assert (class_share - 0.1).abs().max() < 0.01 and (cell_share - 1 / 9).abs().max() < 0.01
    three = count == 3  # within a count, every set of classes alike: e.g. how often class 0 is in
    assert abs(float((classes[three] == 0).any(1).float().mean()) - 0.3) < 0.02
