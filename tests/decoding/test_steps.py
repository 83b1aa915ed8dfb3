"""The decoders' per-step report (``on_step``): listening changes nothing, there is one report
per step, and the reported rows are the ones the returned attention is made of."""

from __future__ import annotations

import torch
from torch import Tensor

from attnscope.decoding import beam_search, greedy_decode
from attnscope.decoding.steps import DecodeStep
from attnscope.nn.base import Seq2Seq


def test_greedy_reports_each_step_and_its_rows(model: Seq2Seq, src: Tensor) -> None:
    steps: list[DecodeStep] = []
    heard = greedy_decode(model, src, max_length=9, on_step=steps.append)
    plain = greedy_decode(model, src, max_length=9)
    assert torch.equal(heard.tokens, plain.tokens)
    assert [s.step for s in steps] == list(range(heard.tokens.size(1)))
    first = [s for s in steps if 0 in s.sentences]  # sentence 0, at every step it was decoded
    row = [s.sentences.index(0) for s in first]
    chosen = [s.chosen[r] for s, r in zip(first, row, strict=True)]
    assert [c.token for c in chosen if c is not None] == heard.tokens[0, : len(first)].tolist()
    if heard.cross is not None:
        rows = torch.stack([s.cross[r] for s, r in zip(first, row, strict=True)], dim=-2)  # type: ignore[index]
        assert torch.equal(rows, heard.cross[0, :, :, : len(first)])


def test_beam_reports_back_pointers_that_rebuild_the_best_hypothesis(model: Seq2Seq, src: Tensor) -> None:
    one = src[:1]
    steps: list[DecodeStep] = []
    heard = beam_search(model, one, beam_size=3, max_length=8, on_step=steps.append)
    plain = beam_search(model, one, beam_size=3, max_length=8)
    assert torch.equal(heard.tokens, plain.tokens)
    finished = [(s.step, c) for s in steps for c in s.finished]
    step, best = max(finished, key=lambda f: f[1].ranking or 0.0)
    tokens, row = [best.token], best.parent
    for t in range(step, 0, -1):
        chosen = steps[t - 1].chosen[row]
        assert chosen is not None
        tokens.append(chosen.token)
        row = chosen.parent
    assert tokens[::-1] == heard.tokens[0, : int(heard.lengths[0])].tolist()
