"""Scenes for Show, Attend and Tell: 1-3 Fashion-MNIST items in the cells of a 3×3 grid on an
84×84 black canvas, and a caption generated from the layout by the grammar of
``docs/vision-captions.md``:

    caption := NP                          one item
             | NP REL NP                   two items
             | NP REL NP "and" NP          three items, the same relation to both others
             | NP REL NP "and" REL NP      three items, different relations
    NP      := "a" CLASS | "an" CLASS      ("an" before a vowel: "an ankle boot")
    REL     := "above" | "below" | "left of" | "right of"

The subject is the item whose class comes first in :data:`CLASSES`; the others follow in class
order. A scene never holds two items of one class, so every class word names exactly one item.
REL(s, o) is "above"/"below" when their rows differ (vertical wins on a diagonal), otherwise
"left of"/"right of". The caption is a function of the image alone, so exact match is fair."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from attnscope.vision.data import CLASSES, ITEM, Items, paste

GRID = 3
SCENE = GRID * ITEM  # 84
PAD, BOS, EOS = "<pad>", "<s>", "</s>"
VOCAB: tuple[str, ...] = (
    PAD, BOS, EOS, "a", "an", "and", "above", "below", "left", "right", "of",
    *sorted({w for name in CLASSES for w in name.split()}),
)  # fmt: skip
WORD_ID: dict[str, int] = {w: i for i, w in enumerate(VOCAB)}
PAD_ID, BOS_ID, EOS_ID = 0, 1, 2


@dataclass(frozen=True)
class Placed:
    """An item of a scene: its class index and grid cell."""

    cls: int
    row: int
    col: int


def relation(subject: Placed, other: Placed) -> str:
    """Where ``subject`` is relative to ``other`` (vertical first, as the grammar says)."""
    if subject.row != other.row:
        return "above" if subject.row < other.row else "below"
    if subject.col == other.col:
        raise ValueError("two items in one cell")
    return "left of" if subject.col < other.col else "right of"


def noun_phrase(cls: int) -> list[str]:
    words = CLASSES[cls].split()
    return ["an" if words[0][0] in "aeiou" else "a", *words]


def caption_words(layout: list[Placed]) -> tuple[list[str], list[int | None]]:
    """The caption of ``layout`` as words, and for each word the index in ``layout`` of the item
    it names (class words only; None for the others)."""
    if not 1 <= len(layout) <= GRID * GRID:
        raise ValueError(f"a scene holds 1-{GRID * GRID} items, got {len(layout)}")
    if len({p.cls for p in layout}) != len(layout) or len({(p.row, p.col) for p in layout}) != len(layout):
        raise ValueError("items of a scene need distinct classes and distinct cells")
    if len(layout) > 3:
        raise ValueError("the caption grammar covers 1-3 items")
    order = sorted(range(len(layout)), key=lambda i: layout[i].cls)
    words: list[str] = []
    names: list[int | None] = []

    def say(text: str, item: int | None = None) -> None:
        for w in text.split():
            words.append(w)
            names.append(item if item is not None and w not in ("a", "an") else None)

    subject, others = order[0], order[1:]
    say(" ".join(noun_phrase(layout[subject].cls)), subject)
    relations = [relation(layout[subject], layout[o]) for o in others]
    for k, other in enumerate(others):
        if k == 1:
            say("and")
        if k == 0 or relations[1] != relations[0]:
            say(relations[k])
        say(" ".join(noun_phrase(layout[other].cls)), other)
    return words, names


def caption(layout: list[Placed]) -> str:
    return " ".join(caption_words(layout)[0])


def encode(words: list[str]) -> list[int]:
    """Word ids of a caption followed by ``</s>`` (no ``<s>``)."""
    return [WORD_ID[w] for w in words] + [EOS_ID]


def decode(ids: list[int]) -> list[str]:
    """Words of ``ids`` up to the first ``</s>`` (``<pad>``/``<s>`` dropped)."""
    words = []
    for i in ids:
        if i == EOS_ID:
            break
        if i not in (PAD_ID, BOS_ID):
            words.append(VOCAB[i])
    return words


def random_layout(generator: torch.Generator, max_items: int = 3) -> list[Placed]:
    count = int(torch.randint(1, max_items + 1, (1,), generator=generator))
    cells = torch.randperm(GRID * GRID, generator=generator)[:count].tolist()
    classes = torch.randperm(len(CLASSES), generator=generator)[:count].tolist()
    return [Placed(c, cell // GRID, cell % GRID) for c, cell in zip(classes, cells, strict=True)]


@dataclass(frozen=True)
class Scenes:
    """A batch: ``images`` (B, 1, 84, 84) in [0, 1]; ``tokens`` (B, T) word ids ending in
    ``</s>``, padded with ``<pad>``; the layouts and their captions."""

    images: Tensor
    tokens: Tensor
    layouts: list[list[Placed]]
    captions: list[str]


def render(items: Items, layouts: list[list[Placed]], generator: torch.Generator) -> Tensor:
    """(B, 1, 84, 84): each layout's items drawn from random examples of their classes (one
    random draw and one host-to-device copy per item slot)."""
    device = items.images.device
    canvas = torch.zeros(len(layouts), SCENE, SCENE, device=device)
    labels = items.labels.cpu()
    by_class = torch.argsort(labels, stable=True)  # item indices grouped by class
    counts = torch.bincount(labels, minlength=len(CLASSES))
    starts = torch.cumsum(counts, 0) - counts
    for slot in range(max((len(lay) for lay in layouts), default=0)):
        rows = [b for b, lay in enumerate(layouts) if len(lay) > slot]
        classes = torch.tensor([layouts[b][slot].cls for b in rows])
        if bool((counts[classes] == 0).any()):
            missing = CLASSES[int(classes[counts[classes] == 0][0])]
            raise ValueError(f"no {missing} in this split")
        offsets = (torch.rand(len(rows), generator=generator) * counts[classes]).long()
        picks = by_class[starts[classes] + torch.minimum(offsets, counts[classes] - 1)]
        where = torch.tensor([[b, layouts[b][slot].row * ITEM, layouts[b][slot].col * ITEM] for b in rows]).to(device)
        sub = canvas[where[:, 0]]
        paste(sub, items.images[picks.to(device)].float() / 255, where[:, 1], where[:, 2])
        canvas[where[:, 0]] = sub
    return canvas[:, None]


def make_scenes(items: Items, count: int, generator: torch.Generator, max_items: int = 3) -> Scenes:
    layouts = [random_layout(generator, max_items) for _ in range(count)]
    ids = [encode(caption_words(lay)[0]) for lay in layouts]
    tokens = torch.full((count, max(map(len, ids))), PAD_ID, dtype=torch.long)
    for b, row in enumerate(ids):
        tokens[b, : len(row)] = torch.tensor(row)
    images = render(items, layouts, generator)
    return Scenes(images, tokens.to(images.device), layouts, [caption(lay) for lay in layouts])


def cell_overlap(rows: int, cols: int) -> Tensor:
    """(rows*cols, 9): the share of each attention-grid cell's area that lies in each scene cell,
    taking annotation vector (r, c) to stand for its rectangle of the image (as in Xu et al.'s
    upsampled figures). Rows sum to 1."""

    def spans(n: int) -> Tensor:  # (n, GRID): overlap of n equal segments with GRID equal segments
        edges = torch.linspace(0, 1, n + 1, dtype=torch.float64)
        cuts = torch.linspace(0, 1, GRID + 1, dtype=torch.float64)
        lo = torch.maximum(edges[:-1, None], cuts[None, :-1])
        hi = torch.minimum(edges[1:, None], cuts[None, 1:])
        return (hi - lo).clamp(min=0) * n

    r, c = spans(rows), spans(cols)
    return torch.einsum("ai,bj->abij", r, c).reshape(rows * cols, GRID * GRID).float()
