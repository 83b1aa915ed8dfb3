"""DecodeOutput's per-sentence views, the decoding budget and right-padding."""

from __future__ import annotations

import torch

from attnscope.decoding import DecodeOutput
from attnscope.decoding.output import max_target_length, stack_padded


def test_hypotheses_are_trimmed_to_real_lengths() -> None:
    out = DecodeOutput(
        tokens=torch.tensor([[5, 6, 3], [7, 3, 0]]),
        lengths=torch.tensor([3, 2]),
        source_lengths=torch.tensor([4, 2]),
        scores=torch.tensor([-1.0, -2.0]),
        token_logprobs=torch.tensor([[-0.5, -0.25, -0.25], [-1.5, -0.5, 0.0]]),
        encoder_self=torch.rand(2, 2, 3, 4, 4),
        decoder_self=torch.rand(2, 2, 3, 3, 3),
        cross=torch.rand(2, 2, 3, 3, 4),
    )
    first, second = out.hypotheses()
    assert first.tokens == [5, 6, 3] and second.tokens == [7, 3]
    assert second.token_logprobs == [-1.5, -0.5] and second.score == -2.0
    assert second.cross is not None and second.cross.shape == (2, 3, 2, 2)
    assert second.decoder_self is not None and second.decoder_self.shape == (2, 3, 2, 2)
    assert second.encoder_self is not None and second.encoder_self.shape == (2, 3, 2, 2)
    assert out.cross is not None and torch.equal(second.cross, out.cross[1, :, :, :2, :2])
    assert first.cross is not None and first.cross.shape == (2, 3, 3, 4)


def test_budget() -> None:
    lengths = torch.tensor([4, 10])
    assert max_target_length(lengths, 1.5, 10, None) == 25
    assert max_target_length(lengths, 1.5, 10, 12) == 12
    assert max_target_length(torch.tensor([1]), 0.1, 0, None) == 1


def test_stack_padded() -> None:
    rows = [torch.tensor([1.0, 2.0]), torch.tensor([3.0])]
    assert stack_padded(rows, 3, pad_value=-1).tolist() == [[1, 2, -1], [3, -1, -1]]
