"""What the decoders keep while they run: attention rows only for the rows alive at each step,
unpadded, so memory grows linearly with the output length, and finished sentences leave the
batch. (Counts of stored elements, no timing.)"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator

import pytest
import torch

from attnscope.decoding import beam as beam_module
from attnscope.decoding import beam_search, greedy_decode
from attnscope.decoding import greedy as greedy_module
from attnscope.decoding.history import AttentionHistory
from attnscope.nn.base import Seq2Seq
from attnscope.nn.config import EOS_ID
from attnscope.nn.outputs import EncoderOutput, StepOutput

b, c = 5, 6


@pytest.fixture
def histories(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[AttentionHistory]]:
    """Every AttentionHistory the decoders create during the test."""
    made: list[AttentionHistory] = []

    class Recording(AttentionHistory):
        def __init__(self) -> None:
            super().__init__()
            made.append(self)

    monkeypatch.setattr(beam_module, "AttentionHistory", Recording)
    monkeypatch.setattr(greedy_module, "AttentionHistory", Recording)
    yield made


def never_ending(model: Seq2Seq) -> Seq2Seq:
    """The model with EOS made impossible, so every hypothesis runs to the length limit."""
    inner = model.step

    def step(
        tokens: torch.Tensor, state: object, enc: EncoderOutput, need_weights: bool = False
    ) -> tuple[StepOutput, object]:
        out, new_state = inner(tokens, state, enc, need_weights=need_weights)
        out.log_probs[:, EOS_ID] = float("-inf")
        return out, new_state

    model.step = step  # type: ignore[method-assign]
    return model


@pytest.mark.parametrize("decoder", ["greedy", "beam"])
def test_recorded_attention_is_linear_in_the_output_length(
    histories: list[AttentionHistory], tiny: Callable[..., Seq2Seq], decoder: str
) -> None:
    """A Transformer (2 layers, 2 heads) decoding T tokens keeps exactly N * L * H * (S + t + 1)
    weights at step t: one cross row and one self row of t + 1 keys per live row, never padded
    to the budget, never copied per step. Beam search's first step has one row (the beams are
    copies of it until they have scores), the later ones one per beam."""
    model = never_ending(tiny("transformer"))
    src = torch.tensor([[9, 10, 11, 12, 13, EOS_ID]])
    rows, layers, heads, s = (3 if decoder == "beam" else 1), 2, 2, 6
    for length in (8, 16):
        if decoder == "beam":
            beam_search(model, src, beam_size=3, max_length=length)
        else:
            greedy_decode(model, src, max_length=length)
        history = histories[-1]
        assert len(history.cross) == len(history.decoder_self) == length
        first = layers * heads * (s + 1)  # step 0: one row, S cross keys and 1 self key
        later = sum(rows * layers * heads * (s + t + 1) for t in range(1, length))
        assert history.stored_elements() == first + later


def test_finished_sentences_leave_the_batch(
    histories: list[AttentionHistory], scripted: Callable[..., Seq2Seq]
) -> None:
    """Sentence 1 ends at step 0 and sentence 2 at step 1; sentence 0 never ends. From then on,
    only sentence 0's rows are decoded (and recorded)."""
    forever = {p: {c: 0.6, b: 0.4} for n in range(8) for p in itertools.product((b, c), repeat=n)}
    tables = [forever, {(): {EOS_ID: 0.99}}, {(): {c: 0.99}, (c,): {EOS_ID: 0.99}}]
    src = torch.tensor([[7, 7, 3], [7, 3, 0], [7, 3, 0]])
    greedy_decode(scripted(tables), src, max_length=6)
    assert [len(x) for x in histories[-1].cross] == [3, 2, 1, 1, 1, 1]
    # beam 2: a sentence leaves once it has 2 finished hypotheses
    out = beam_search(scripted(tables), src, beam_size=2, max_length=6)
    assert out.lengths.tolist() == [6, 1, 2]
    per_step = [len(x) for x in histories[-1].cross]
    assert per_step[0] == 3 and per_step[-1] == 2 and len(per_step) == 6  # first step: a row each
