from __future__ import annotations

import pytest
import torch

from attnscope.vision.captioner import (
    Captioner,
    CaptionerConfig,
    CaptionOutput,
    beam_search,
    caption_loss,
    greedy,
)
from attnscope.vision.scenes import BOS_ID, EOS_ID, PAD_ID
from attnscope.vision.testing import TINY_CAPTIONER


def tiny(attention: bool = True, seed: int = 0) -> Captioner:
    torch.manual_seed(seed)
    return Captioner(CaptionerConfig(attention=attention, dropout=0.0, **TINY_CAPTIONER)).eval()  # type: ignore[arg-type]


IMAGES = torch.rand(3, 1, 84, 84)
TOKENS = torch.tensor([[3, 12, 6, 3, 13, EOS_ID], [4, 11, 14, EOS_ID, PAD_ID, PAD_ID], [3, 15, EOS_ID, 0, 0, 0]])


@pytest.mark.parametrize("attention", [True, False])
def test_attention_over_the_grid_sums_to_one_per_word(attention: bool) -> None:
    model = tiny(attention)
    out = model(IMAGES, TOKENS)
    assert out.logits.shape == (3, 6, model.config.vocab)
    assert out.attention.shape == (3, 6, 49) and model.config.grid == 7
    assert torch.allclose(out.attention.sum(-1), torch.ones(3, 6))
    assert (out.attention >= 0).all()
    if not attention:
        assert torch.allclose(out.attention, torch.full_like(out.attention, 1 / 49))
    else:
        assert out.attention.std(-1).min() > 0  # not uniform
    ids, atts = greedy(model, IMAGES)
    for row, att in zip(ids, atts, strict=True):
        assert att.shape == (len(row), 49) and torch.allclose(att.sum(-1), torch.ones(len(row)))
        assert PAD_ID not in row and BOS_ID not in row


def test_beam_one_is_greedy_and_beams_keep_their_attention() -> None:
    model = tiny(seed=3)
    ids, atts = greedy(model, IMAGES[:1])
    beam_ids, beam_att = beam_search(model, IMAGES[:1], 1)
    assert beam_ids == ids[0] and torch.allclose(beam_att, atts[0])
    wide_ids, wide_att = beam_search(model, IMAGES[:1], 4)
    assert wide_att.shape == (len(wide_ids), 49)
    forced = model(IMAGES[:1], torch.tensor([wide_ids])).attention[0]
    assert torch.allclose(forced, wide_att, atol=1e-6)  # rows follow the back-pointers


def test_doubly_stochastic_regulariser() -> None:
    attention = torch.zeros(1, 3, 4)
    attention[0, 0, 0] = attention[0, 1, 1] = attention[0, 2, 2] = 1.0  # third word is padding
    out = CaptionOutput(torch.zeros(1, 3, 5), attention)
    tokens = torch.tensor([[3, EOS_ID, PAD_ID]])
    _, reg = caption_loss(out, tokens, doubly_stochastic=2.0)
    # coverage (1, 1, 0, 0) over the two real words: 2 * (0 + 0 + 1 + 1)
    assert reg.item() == pytest.approx(4.0)


def test_training_steps_lower_the_loss() -> None:
    torch.manual_seed(0)
    config = CaptionerConfig(canvas=24, dropout=0.0, **TINY_CAPTIONER)  # type: ignore[arg-type]
    model = Captioner(config).train()  # a 2×2 grid over 24×24 images keeps this fast
    images = torch.rand(3, 1, 24, 24)
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-2)
    losses = []
    for _ in range(10):
        nll, reg = caption_loss(model(images, TOKENS), TOKENS, 1.0)
        optimizer.zero_grad()
        (nll + reg).backward()
        optimizer.step()
        losses.append(nll.item())
    assert losses[-1] < losses[0] * 0.7


def test_names_every_item_needs_each_items_class_word() -> None:
    """The captioner goal's measure: every item of the scene named (by either word of a two-word
    class), whatever the order or relations; a class absent from the scene names nothing."""
    from attnscope.vision.evaluate import names_every_item
    from attnscope.vision.scenes import Placed, caption

    layout = [Placed(9, 0, 0), Placed(3, 1, 2)]  # an ankle boot and a dress
    assert names_every_item(caption(layout).split(), layout)
    assert names_every_item("a dress left of an ankle boot".split(), layout)
    assert names_every_item("a boot above a dress".split(), layout)
    assert not names_every_item("an ankle boot above a coat".split(), layout)
    assert not names_every_item("a dress".split(), layout)
    assert not names_every_item([], [Placed(0, 0, 0)])
