"""The fixed-shape greedy decoder behind the CUDA graphs (attnscope/decoding/static_greedy.py), run
eagerly on the CPU: the same output as ordinary greedy decoding, in every field."""

from __future__ import annotations

import pytest
import torch

from attnscope.decoding import greedy_decode
from attnscope.decoding import static_greedy as sg
from attnscope.decoding.output import DecodeOutput, DecodeStopped
from attnscope.nn.base import Seq2Seq
from attnscope.nn.config import EOS_ID
from tests.decoding.conftest import build_tiny, padded_source


def fixed(model: Seq2Seq, src: torch.Tensor, **kwargs: object) -> DecodeOutput:
    out = sg.static_greedy_decode(model, src, graphs=False, **kwargs)  # type: ignore[arg-type]
    assert out is not None
    return out


def assert_same(a: DecodeOutput, b: DecodeOutput) -> None:
    assert torch.equal(a.tokens, b.tokens)
    assert torch.equal(a.lengths, b.lengths)
    assert torch.equal(a.source_lengths, b.source_lengths)
    torch.testing.assert_close(a.token_logprobs, b.token_logprobs, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(a.scores, b.scores, atol=1e-4, rtol=1e-5)
    for name in ("cross", "decoder_self", "encoder_self"):
        x, y = getattr(a, name), getattr(b, name)
        assert (x is None) == (y is None), name
        if x is not None:
            assert x.shape == y.shape, name
            torch.testing.assert_close(x, y, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("pre_norm", [True, False])
def test_equals_greedy_on_a_padded_batch(pre_norm: bool) -> None:
    """Sentences of different lengths (padding, finishing at different steps, one running into
    its budget): tokens, log-probabilities and every attention matrix as greedy decoding's."""
    model = build_tiny("transformer", pre_norm=pre_norm)
    with torch.no_grad():  # a larger EOS logit (the output layer is the tied embedding): some end early
        model.get_submodule("embed").weight[EOS_ID] *= 10
    src = padded_source([7, 3, 12, 5], seed=1)
    budgets = [12, 5, 12, 8]
    ours, theirs = fixed(model, src, max_length=budgets), greedy_decode(model, src, max_length=budgets)
    assert len(set(theirs.lengths.tolist())) >= 3, "the batch should finish at different steps"
    ended = [b for b, n in enumerate(theirs.lengths.tolist()) if theirs.tokens[b, n - 1] == EOS_ID]
    assert ended and min(theirs.lengths[ended].tolist()) < 5, "one sentence should end on EOS, early"
    assert_same(ours, theirs)


def test_default_budget_per_row_budgets_and_no_weights() -> None:
    model = build_tiny("transformer", seed=3)
    src = padded_source([20, 4], seed=2)  # the default budget: 1.5 * 20 + 10 > one length bucket
    assert_same(fixed(model, src), greedy_decode(model, src))
    assert_same(fixed(model, src, max_length=[2, 6]), greedy_decode(model, src, max_length=[2, 6]))
    out = fixed(model, src, need_weights=False)
    assert out.cross is None and out.decoder_self is None
    assert torch.equal(out.tokens, greedy_decode(model, src, need_weights=False).tokens)


def test_buffers_are_reused_across_calls_without_leaking_state() -> None:
    """Two different batches of the same shape bucket (the second with a longer source), one after
    the other, then the first again: each decode starts from clean buffers."""
    model = build_tiny("transformer", seed=4)
    a, b = padded_source([6, 9], seed=5), padded_source([8, 13], seed=6)
    assert sg.capacities(9, 12, 512) == sg.capacities(13, 12, 512)
    first = fixed(model, a, max_length=12)
    fixed(model, b, max_length=12)
    assert_same(fixed(model, a, max_length=12), first)
    assert_same(first, greedy_decode(model, a, max_length=12))


def test_new_weights_get_new_buffers() -> None:
    """A model whose parameters changed (trained further) must not decode with the old ones."""
    model = build_tiny("transformer", seed=7)
    src = padded_source([6], seed=8)
    fixed(model, src, max_length=8)
    with torch.no_grad():
        for p in model.decoder_layers.parameters():
            p.mul_(1.5)
    assert_same(fixed(model, src, max_length=8), greedy_decode(model, src, max_length=8))


def test_should_stop_and_budget_beyond_the_positions() -> None:
    model = build_tiny("transformer", seed=9)
    src = padded_source([5], seed=10)
    with pytest.raises(DecodeStopped):
        fixed(model, src, should_stop=lambda: True)
    too_long = model.config.max_positions + 1
    assert sg.static_greedy_decode(model, src, max_length=too_long, graphs=False) is None


def test_taken_only_on_cuda_for_transformers_without_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    transformer, rnn = build_tiny("transformer"), build_tiny("rnn")
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    monkeypatch.delenv("ATTNSCOPE_CUDA_GRAPHS", raising=False)
    with torch.no_grad():
        assert sg.applies(transformer, cuda, None)  # the default on a GPU (timed: docs/gpu.md)
    monkeypatch.setenv("ATTNSCOPE_CUDA_GRAPHS", "1")
    assert not sg.applies(transformer, cuda, None)  # gradients recorded: training-time decoding
    with torch.no_grad():
        assert not sg.applies(transformer, cpu, None)
        assert sg.applies(transformer, cuda, None)
        assert not sg.applies(transformer, cuda, [[5]])
        assert not sg.applies(rnn, cuda, None)
        monkeypatch.setenv("ATTNSCOPE_CUDA_GRAPHS", "0")
        assert not sg.applies(transformer, cuda, None)


def test_an_unloaded_model_is_freed_with_its_runners() -> None:
    """The runners are kept per model in a weak dictionary; a runner that held its model strongly
    kept every unloaded model (on CUDA: its weights and graphs' memory) alive for good."""
    import gc
    import weakref

    from attnscope.decoding import static_beam
    from attnscope.decoding.plan import DecodeOptions

    model = build_tiny("transformer", seed=11)
    src = padded_source([6], seed=12)
    fixed(model, src, max_length=8)
    assert static_beam.static_beam_search(model, src, DecodeOptions(beam_size=2, max_length=8), graphs=False) is not None
    assert sg._runners.get(model) is not None and len(sg._runners[model].by_key) == 2
    gone = weakref.ref(model)
    del model
    gc.collect()
    assert gone() is None
