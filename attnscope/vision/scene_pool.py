"""Training scenes drawn on the device, with no Python per example and no host-device copy.

:func:`attnscope.vision.scenes.make_scenes` builds each layout and caption in Python and pastes
its items slot by slot from host-made index tensors: fine for the fixed validation and test sets,
but in a training step on a GPU it is host work (and a sync per slot) the device waits for. Here
every layout the grammar allows is enumerated once (1-3 items of distinct classes in distinct
cells of the 3×3 grid: 90 + 3,240 + 60,480 = 63,810 layouts) with its caption's tokens, and kept
as device tensors. A batch then draws, on the generator's device:

* the number of items uniformly from 1-3, then one layout uniformly among those with that many
  items: the distribution of :func:`~attnscope.vision.scenes.random_layout` (uniform count, then a
  uniform set of distinct classes in a uniform set of distinct cells), only another random stream;
* for each item a uniformly chosen training example of its class, as ``render`` chooses it, added
  into its cell with one indexed write per slot (cells are distinct, so adding onto black is the
  ``render``'s brighter-pixel paste).

Layouts with a class the split lacks are left out (``make_scenes`` would raise when it drew one).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from itertools import combinations, permutations

import torch
from torch import Tensor

from attnscope.vision.data import CLASSES, ITEM, Items
from attnscope.vision.scenes import GRID, PAD_ID, SCENE, Placed, caption_words, encode

MAX_ITEMS = 3


@dataclass(frozen=True)
class LayoutTable:
    """Every layout, ordered by item count: ``classes``, ``rows``, ``cols`` (N, 3) long, -1 past
    ``count`` (N,); ``tokens`` (N, T) the caption's ids ending in ``</s>``, ``<pad>`` after;
    ``lengths`` (N,) tokens before the padding."""

    classes: Tensor
    rows: Tensor
    cols: Tensor
    count: Tensor
    tokens: Tensor
    lengths: Tensor

    def to(self, device: torch.device | str) -> LayoutTable:
        return LayoutTable(*(t.to(device) for t in (self.classes, self.rows, self.cols, self.count, self.tokens, self.lengths)))

    def where(self, keep: Tensor) -> LayoutTable:
        return LayoutTable(*(t[keep] for t in (self.classes, self.rows, self.cols, self.count, self.tokens, self.lengths)))


def all_layouts() -> list[list[Placed]]:
    """Every layout of 1-3 items once, each as its items in class order (the caption does not
    depend on the order)."""
    out = []
    for count in range(1, MAX_ITEMS + 1):
        for classes in combinations(range(len(CLASSES)), count):
            for cells in permutations(range(GRID * GRID), count):
                out.append([Placed(c, cell // GRID, cell % GRID) for c, cell in zip(classes, cells, strict=True)])
    return out


@functools.lru_cache(maxsize=1)
def layout_table() -> LayoutTable:
    """The table of :func:`all_layouts` on the CPU (built once a process: about a second)."""
    layouts = all_layouts()
    ids = [encode(caption_words(lay)[0]) for lay in layouts]
    width = max(map(len, ids))
    tokens = torch.full((len(layouts), width), PAD_ID, dtype=torch.long)
    slots = torch.full((3, len(layouts), MAX_ITEMS), -1, dtype=torch.long)
    for n, (lay, row) in enumerate(zip(layouts, ids, strict=True)):
        tokens[n, : len(row)] = torch.tensor(row)
        for k, p in enumerate(lay):
            slots[0, n, k], slots[1, n, k], slots[2, n, k] = p.cls, p.row, p.col
    count = torch.tensor([len(lay) for lay in layouts])
    return LayoutTable(slots[0], slots[1], slots[2], count, tokens, torch.tensor([len(r) for r in ids]))


class ScenePool:
    """Training scenes of ``items`` (a split on the training device) drawn on the device."""

    def __init__(self, items: Items) -> None:
        device = items.images.device
        labels = items.labels
        self.images = items.images
        self.by_class = torch.argsort(labels, stable=True)  # item indices grouped by class
        self.counts = torch.bincount(labels, minlength=len(CLASSES))
        self.starts = torch.cumsum(self.counts, 0) - self.counts
        present = (self.counts > 0).cpu()
        table = layout_table()
        usable = (~((table.classes >= 0) & ~present[table.classes.clamp_min(0)])).all(1)
        table = table.where(usable)
        blocks = torch.bincount(table.count, minlength=MAX_ITEMS + 1)[1:]
        if bool((blocks == 0).any()):
            raise ValueError(f"scenes of {MAX_ITEMS} items need {MAX_ITEMS} classes; this split has {int(present.sum())}")
        self.table = table.to(device)
        self.block_size = blocks.to(device)  # (3,) layouts with 1, 2, 3 items
        self.block_start = (torch.cumsum(blocks, 0) - blocks).to(device)

    def draw(self, batch: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        """(images (B, 1, 84, 84) in [0, 1], tokens (B, T) padded to the batch's longest caption)
        drawn with ``generator`` (on the pool's device)."""
        images, tokens, _ = self.draw_indexed(batch, generator)
        return images, tokens

    def draw_indexed(self, batch: int, generator: torch.Generator) -> tuple[Tensor, Tensor, Tensor]:
        """:meth:`draw`, and each scene's row of :attr:`table` (B,)."""
        device = self.images.device
        k = torch.randint(MAX_ITEMS, (batch,), generator=generator, device=device)  # items - 1
        size = self.block_size[k]
        within = torch.minimum((torch.rand(batch, generator=generator, device=device) * size).long(), size - 1)
        index = self.block_start[k] + within
        t = self.table
        classes, rows, cols, count = t.classes[index], t.rows[index], t.cols[index], t.count[index]
        canvas = torch.zeros(batch, GRID, GRID, ITEM, ITEM, device=device)
        which = torch.arange(batch, device=device)
        for slot in range(MAX_ITEMS):
            cls = classes[:, slot].clamp_min(0)
            n = self.counts[cls]
            offsets = torch.minimum((torch.rand(batch, generator=generator, device=device) * n).long(), n - 1)
            picks = self.by_class[self.starts[cls] + offsets]
            shown = (slot < count).float()[:, None, None]
            patch = self.images[picks].float() / 255 * shown  # absent items add black
            canvas.index_put_((which, rows[:, slot].clamp_min(0), cols[:, slot].clamp_min(0)), patch, accumulate=True)
        images = canvas.permute(0, 1, 3, 2, 4).reshape(batch, 1, SCENE, SCENE)
        longest = int(t.lengths[index].max())  # one sync: the decoder runs as many steps as the batch needs
        return images, t.tokens[index, :longest], index
