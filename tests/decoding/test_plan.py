"""The decode plan: made once per decode from the options, the model and the device; the
decoders follow it, and the options are one frozen, hashable value."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor

from app.decoding import beam_search, greedy_decode
from app.decoding.plan import DecodeOptions, make_plan, options_of
from app.nn.base import Seq2Seq


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
