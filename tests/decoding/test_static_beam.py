"""The fixed-shape beam search behind the CUDA graphs (attnscope/decoding/static_beam.py), run
eagerly on the CPU: the ordinary beam search's output, in every field."""

from __future__ import annotations

import pytest
import torch

from attnscope.decoding import beam_search, greedy_decode
from attnscope.decoding import static_beam as sb
from attnscope.decoding import static_greedy as sg
from attnscope.decoding.output import DecodeOutput, DecodeStopped
from attnscope.decoding.plan import DecodeOptions, make_plan
from attnscope.nn.base import Seq2Seq
from attnscope.nn.config import EOS_ID
from tests.decoding.conftest import build_tiny, padded_source
from tests.decoding.test_static_greedy import assert_same


def fixed(model: Seq2Seq, src: torch.Tensor, **kwargs: object) -> DecodeOutput:
    out = sb.static_beam_search(model, src, DecodeOptions(**kwargs), graphs=False)  # type: ignore[arg-type]
    assert out is not None
    return out


@pytest.mark.parametrize(
    ("pre_norm", "beam", "alpha", "beta"), [(True, 4, 0.6, 0.0), (False, 2, 1.0, 0.0), (True, 3, 0.0, 0.0), (False, 4, 0.6, 0.4)]
)
def test_equals_beam_search_on_a_padded_batch(pre_norm: bool, beam: int, alpha: float, beta: float) -> None:
    """Sentences of different lengths, some ending on EOS, some at their own budget, with and
    without GNMT's coverage penalty: tokens, scores, log-probabilities and every attention
    matrix along the returned hypotheses."""
    model = build_tiny("transformer", pre_norm=pre_norm)
    with torch.no_grad():  # a larger EOS logit: hypotheses finish at different steps
        model.get_submodule("embed").weight[EOS_ID] *= 4
    src = padded_source([7, 3, 12, 5], seed=1)
    ends = set()
    for budgets in ([12, 5, 12, 8], None):
        options = {"beam_size": beam, "alpha": alpha, "coverage_penalty": beta, "max_length": budgets}
        ours, theirs = fixed(model, src, **options), beam_search(model, src, **options)  # type: ignore[arg-type]
        assert_same(ours, theirs)
        ends |= {bool(theirs.tokens[b, n - 1] == EOS_ID) for b, n in enumerate(theirs.lengths.tolist())}
    assert ends == {True, False}, "some hypotheses should end on EOS, others at the budget"


def test_no_weights_reuse_and_budget_beyond_the_positions() -> None:
    model = build_tiny("transformer", seed=3)
    a, b = padded_source([6, 9], seed=5), padded_source([8, 13], seed=6)
    first = fixed(model, a, beam_size=3, max_length=12)
    fixed(model, b, beam_size=3, max_length=12)  # the same buffers, another batch
    assert_same(fixed(model, a, beam_size=3, max_length=12), first)
    out = fixed(model, a, beam_size=3, need_weights=False)
    assert out.cross is None and out.decoder_self is None
    assert torch.equal(out.tokens, beam_search(model, a, beam_size=3, need_weights=False).tokens)
    too_long = model.config.max_positions + 1
    assert sb.static_beam_search(model, a, DecodeOptions(beam_size=3, max_length=too_long), graphs=False) is None
    with pytest.raises(DecodeStopped):
        sb.static_beam_search(model, a, DecodeOptions(beam_size=3), should_stop=lambda: True, graphs=False)


def test_the_plan_takes_it_only_without_tree_stream_or_sampling(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the fixed-shape path applies (a GPU: faked here), beam search takes it unless it is
    asked for what only the ordinary search gives."""
    model = build_tiny("transformer", seed=4)
    src = padded_source([5], seed=2)
    monkeypatch.setattr(sg, "applies", lambda *args: True)
    assert make_plan(model, src, DecodeOptions(beam_size=4)).static
    assert make_plan(model, src, DecodeOptions(beam_size=1)).static  # greedy
    assert not make_plan(model, src, DecodeOptions(beam_size=4, return_tree=True)).static
    assert make_plan(model, src, DecodeOptions(beam_size=4, coverage_penalty=0.2)).static
    assert not make_plan(model, src, DecodeOptions(beam_size=4), streamed=True).static


def test_odd_batches_are_rounded_up_to_a_bucket_and_cut_back() -> None:
    """Three sentences decode in a batch of four (a copy of the first added) and come back as
    three, equal to the ordinary decoders' (greedy and beam), per-sentence budgets included."""
    model = build_tiny("transformer", seed=5)
    src = padded_source([9, 4, 6], seed=3)
    padded, budgets = sg.bucketed(src, [10, 4, 7])
    assert padded.size(0) == 4 and list(budgets) == [10, 4, 7, 10]  # type: ignore[arg-type]
    assert_same(fixed(model, src, beam_size=3, max_length=[10, 4, 7]), beam_search(model, src, beam_size=3, max_length=[10, 4, 7]))
    greedy = sg.static_greedy_decode(model, src, max_length=[10, 4, 7], graphs=False)
    assert greedy is not None
    assert_same(greedy, greedy_decode(model, src, max_length=[10, 4, 7]))
