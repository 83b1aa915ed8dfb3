"""Padding never changes what a model computes for the real tokens: extra pad columns on the
source and target leave every real position's logits, and so the training loss, unchanged."""

from __future__ import annotations

import pytest
import torch
from torch.nn import functional as F

from attnscope.nn.config import PAD_ID
from attnscope.nn.factory import build_model
from attnscope.testing import TINY_KINDS, tiny_config
from attnscope.training.data import Example, collate

EXAMPLES = [Example(src=[5, 9, 7, 3], tgt=[8, 6, 3]), Example(src=[11, 4, 3], tgt=[10, 12, 13, 9, 3])]


def pad_more(t: torch.Tensor, extra: int) -> torch.Tensor:
    return F.pad(t, (0, extra), value=PAD_ID)


@pytest.mark.parametrize(("architecture", "score"), [(a, s) for _, a, s in TINY_KINDS] + [("rnn", "location")])
def test_extra_padding_leaves_logits_and_loss_unchanged(architecture: str, score: str | None) -> None:
    torch.manual_seed(0)
    model = build_model(tiny_config(architecture, score, 40)).eval()
    src, tgt_in, gold = collate(EXAMPLES)
    real = gold.ne(PAD_ID)
    with torch.no_grad():
        logits = model(src, tgt_in).logits
        padded = model(pad_more(src, 5), pad_more(tgt_in, 3)).logits[:, : gold.size(1)]
    torch.testing.assert_close(padded[real], logits[real], atol=1e-5, rtol=1e-5)
    loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), gold.reshape(-1), ignore_index=PAD_ID, label_smoothing=0.1)
    padded_gold = pad_more(gold, 3)
    longer = model(pad_more(src, 5), pad_more(tgt_in, 3)).logits.detach()
    loss_padded = F.cross_entropy(
        longer.reshape(-1, longer.size(-1)), padded_gold.reshape(-1), ignore_index=PAD_ID, label_smoothing=0.1
    )
    torch.testing.assert_close(loss_padded, loss.detach(), atol=1e-5, rtol=1e-5)
