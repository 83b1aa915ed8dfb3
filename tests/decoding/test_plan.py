"""The decode plan: made once per decode from the options, the model and the device; the
decoders follow it, and the options are one frozen, hashable value."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import Tensor

from attnscope.decoding import beam_search, greedy_decode
from attnscope.decoding.plan import DecodeOptions, make_plan, options_of
from attnscope.nn.base import Seq2Seq


def test_options_are_frozen_and_hashable_with_per_sentence_budgets_and_prefixes() -> None:
    options = DecodeOptions(max_length=[4, 6], prefix=[[5], []])
    assert options.max_length == (4, 6) and options.prefix == ((5,), ())
    assert hash(options) == hash(DecodeOptions(max_length=(4, 6), prefix=((5,), ())))
    with pytest.raises(AttributeError):
        options.beam_size = 2  # type: ignore[misc]
    assert options_of(options, {"beam_size": 2}) == DecodeOptions(beam_size=2, max_length=[4, 6], prefix=[[5], []])


@pytest.mark.parametrize(
    ("options", "search", "weights"),
    [
        (DecodeOptions(beam_size=1), "greedy", True),
        (DecodeOptions(beam_size=1, return_tree=True), "beam", True),
        (DecodeOptions(beam_size=4, need_weights=False), "beam", False),
        (DecodeOptions(beam_size=4, need_weights=False, coverage_penalty=0.2), "beam", True),
        (DecodeOptions(beam_size=1, need_weights=False, coverage_penalty=0.2), "greedy", False),
    ],
)
def test_the_plan_picks_the_search_and_what_is_recorded(
    model: Seq2Seq, src: Tensor, options: DecodeOptions, search: str, weights: bool
) -> None:
    plan = make_plan(model, src, options)
    assert plan.search == search and plan.record_weights == weights
    assert not plan.static  # the CUDA-graph path is for a GPU that asks for it


def test_native_search_follows_the_setting_once_per_decode(
    model: Seq2Seq, src: Tensor, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert make_plan(model, src, DecodeOptions()).native_search
    monkeypatch.setenv("ATTNSCOPE_NATIVE", "0")
    plan = make_plan(model, src, DecodeOptions())
    assert not plan.native_search
    monkeypatch.delenv("ATTNSCOPE_NATIVE")
    # The plan decides, not the setting at each step: the Python search finds the same output.
    with torch.no_grad():
        native = beam_search(model, src, DecodeOptions(beam_size=3, max_length=8))
        python = beam_search(model, src, DecodeOptions(beam_size=3, max_length=8), plan)
        assert torch.equal(native.tokens, python.tokens)
        one = greedy_decode(model, src, DecodeOptions(max_length=8), make_plan(model, src, DecodeOptions(beam_size=1)))
        assert torch.equal(one.tokens, greedy_decode(model, src, max_length=8).tokens)


def test_options_by_keyword_equal_the_options_object(model: Seq2Seq, src: Tensor) -> None:
    with torch.no_grad():
        by_keyword = beam_search(model, src, beam_size=2, max_length=7, alpha=0.3)
        by_object = beam_search(model, src, DecodeOptions(beam_size=2, max_length=7, alpha=0.3))
    assert torch.equal(by_keyword.tokens, by_object.tokens) and torch.equal(by_keyword.scores, by_object.scores)


def test_the_plan_chooses_the_decoder_step_once_and_the_state_holds_it(
    tiny: Callable[..., Seq2Seq], src: Tensor, monkeypatch: pytest.MonkeyPatch
) -> None:
    from attnscope.nn.ablation import disabled_heads
    from attnscope.nn.recording import recording
    from attnscope.nn.transformer import Transformer

    rnn, transformer = tiny("rnn"), tiny("transformer")
    assert isinstance(transformer, Transformer)
    beams = DecodeOptions(beam_size=4)
    with torch.no_grad():
        assert make_plan(rnn, src, beams).step == "general"  # one step path
        monkeypatch.setenv("ATTNSCOPE_NATIVE", "0")
        assert make_plan(transformer, src, beams).step == "prepared"
        with disabled_heads(transformer, [("cross", 0, 1)]):  # the native step knows no heads
            assert make_plan(transformer, src, beams).step == "general"
        with recording():
            assert make_plan(transformer, src, beams).step == "general"
        plan = make_plan(transformer, src, DecodeOptions(beam_size=1))
        state = transformer.init_state(transformer.encode(src), path=plan.step)
        assert state.weights is not None and state.native is None
        threads = torch.get_num_threads()
        monkeypatch.delenv("ATTNSCOPE_NATIVE")
        try:  # the float native step takes up to 24 rows on several threads: the widest step counts
            torch.set_num_threads(2)
            assert transformer.step_path(6 * 4) == transformer.step_path(1) == "native"
            assert make_plan(transformer, src, DecodeOptions(beam_size=7)).step == "prepared"  # 28 rows
        finally:
            torch.set_num_threads(threads)
    assert make_plan(transformer, src, beams).step == "general"  # gradients recorded
    transformer.train()
    with torch.no_grad():
        assert make_plan(transformer, src, beams).step == "general"
