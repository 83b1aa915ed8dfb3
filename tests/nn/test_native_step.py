"""The native decoder steps (attnscope.nn.native, C++ operations built at install time). The int8 step
and encoder decode as the Python int8 layers do: the same tokens, log-probabilities and
attention rows up to float summation order, in greedy and beam search, with padded sources and a
growing cache. The float step is the Python step's operations in C++: the same bits. Where they
do not apply, decoding takes the Python layers (a missing or broken build:
tests/nn/test_native_library.py)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import Tensor, nn

from attnscope.decoding import beam_search, greedy_decode
from attnscope.nn import native
from attnscope.nn.base import Seq2Seq
from attnscope.nn.kv_cache import GROWTH
from attnscope.nn.native import library
from attnscope.nn.outputs import StepOutput
from attnscope.nn.quantize import quantize
from attnscope.nn.transformer import Transformer

ModelFactory = Callable[..., Seq2Seq]
SourceFactory = Callable[..., Tensor]


@pytest.fixture(scope="module", autouse=True)
def built() -> None:
    library.build()  # what `make install` did (a no-op when it did)
    assert native.ops() is not None, "the native step must build here (a C++ compiler and ninja)"


def _int8(make_model: ModelFactory, pre_norm: bool = True, seed: int = 0) -> Transformer:
    model = make_model("transformer", heads=4, pre_norm=pre_norm, decoder_layers=2, seed=seed)
    assert isinstance(model, Transformer)
    for p in model.parameters():  # non-zero biases and norms, so a swapped operand shows
        if p.dim() == 1:
            nn.init.normal_(p, std=0.3)
    return quantize(model, "int8")  # type: ignore[return-value]


def _both(monkeypatch: pytest.MonkeyPatch, decode: Callable[[], object]) -> tuple[object, object]:
    """decode() with the native step, then with ATTNSCOPE_NATIVE=0 (the Python step)."""
    fast = decode()
    monkeypatch.setenv("ATTNSCOPE_NATIVE", "0")
    slow = decode()
    monkeypatch.delenv("ATTNSCOPE_NATIVE")
    return fast, slow


def test_the_native_step_applies_to_a_pre_norm_int8_transformer_only(
    make_model: ModelFactory, make_source: SourceFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = make_source((5, 3))
    model, post = _int8(make_model), _int8(make_model, pre_norm=False)
    float_model = make_model("transformer", heads=4, decoder_layers=2)
    assert isinstance(float_model, Transformer)
    with torch.inference_mode():
        assert model.init_state(model.encode(src)).native is not None
        monkeypatch.setenv("ATTNSCOPE_NATIVE", "off")
        assert model.init_state(model.encode(src)).native is None
        monkeypatch.delenv("ATTNSCOPE_NATIVE")
        assert post.init_state(post.encode(src)).native is None  # post-norm: the Python step
        assert float_model.init_state(float_model.encode(src)).native is None
        post_out = greedy_decode(post, src, max_length=4)
        assert post_out.cross is not None


def _steps(model: Transformer, src: Tensor, tokens: Tensor, group: int, use_native: bool) -> list[StepOutput]:
    """model.step over forced tokens (N, T), N = sentences * group, native or Python."""
    with torch.inference_mode():
        enc = model.encode(src)
        state = model.init_state(enc, group=group, path="native" if use_native else "prepared")
        assert (state.native is not None) == use_native
        out = []
        for t in range(tokens.size(1)):
            step, state = model.step(tokens[:, t], state, enc, need_weights=True)
            out.append(step)
        return out


@pytest.mark.parametrize("group", [1, 3], ids=["one-row-per-sentence", "three-beams"])
def test_native_steps_equal_the_python_steps(make_model: ModelFactory, make_source: SourceFactory, group: int) -> None:
    model = _int8(make_model, seed=1)
    src = make_source((7, 4))  # the second row padded: blocked source positions
    g = torch.Generator().manual_seed(3)
    tokens = torch.randint(4, 40, (2 * group, 2 * GROWTH + 3), generator=g)  # the cache grows twice
    fast, slow = (_steps(model, src, tokens, group, n) for n in (True, False))
    for a, b in zip(fast, slow, strict=True):
        torch.testing.assert_close(a.log_probs, b.log_probs, atol=1e-4, rtol=0)
        torch.testing.assert_close(a.cross, b.cross, atol=1e-5, rtol=0)
        torch.testing.assert_close(a.decoder_self, b.decoder_self, atol=1e-5, rtol=0)
    last = fast[-1]
    assert last.decoder_self is not None and last.decoder_self.shape[-1] == 2 * GROWTH + 3
    assert last.cross is not None
    assert float(last.cross[group:, ..., 4:].abs().max()) == 0.0  # the padded sentence's padding


@pytest.mark.parametrize("beam", [1, 3], ids=["greedy", "beam-3"])
def test_decoding_natively_equals_the_python_step(
    make_model: ModelFactory, make_source: SourceFactory, monkeypatch: pytest.MonkeyPatch, beam: int
) -> None:
    model = _int8(make_model, seed=beam)
    src = make_source((7, 4, 6))

    def decode() -> object:
        if beam == 1:
            return greedy_decode(model, src, max_length=12)
        return beam_search(model, src, beam_size=beam, max_length=12)

    with torch.inference_mode():
        fast, slow = _both(monkeypatch, decode)
    a, b = fast.hypotheses(), slow.hypotheses()  # type: ignore[attr-defined]
    assert [h.tokens for h in a] == [h.tokens for h in b]
    for x, y in zip(a, b, strict=True):
        torch.testing.assert_close(x.cross, y.cross, atol=1e-5, rtol=0)
        torch.testing.assert_close(x.decoder_self, y.decoder_self, atol=1e-5, rtol=0)
    rows = a[1].cross.sum(-1)  # every attention row a distribution
    torch.testing.assert_close(rows, torch.ones_like(rows))


@pytest.mark.parametrize("name", ["en-de-transformer", "en-fr-transformer"])
def test_the_shipped_transformers_take_the_native_step_in_int8(name: str) -> None:
    # every product of the real weights passes the int8 kernel's probe (none falls back to
    # torch.ao's slower Linear), so the whole step runs natively
    from pathlib import Path

    from attnscope.repository import load_model_folder

    model = load_model_folder(Path(__file__).resolve().parents[2] / "models" / name, quantize="int8").model
    assert isinstance(model, Transformer)
    src = torch.tensor([[10, 11, 12, model.config.eos_id]])
    with torch.inference_mode():
        state = model.init_state(model.encode(src))
    assert state.native is not None


def test_the_native_encoder_equals_the_python_one_on_real_positions(
    make_model: ModelFactory, make_source: SourceFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = _int8(make_model, seed=5)
    src = make_source((7, 4, 6))
    with torch.inference_mode():
        assert model._native_encoder() is not None
        fast = model.encode(src, need_weights=True)
        monkeypatch.setenv("ATTNSCOPE_NATIVE", "0")
        assert model._native_encoder() is None
        slow = model.encode(src, need_weights=True)
    assert fast.encoder_self is not None and slow.encoder_self is not None
    for b, n in enumerate((7, 4, 6)):
        torch.testing.assert_close(fast.memory[b, :n], slow.memory[b, :n], atol=1e-5, rtol=0)
        torch.testing.assert_close(
            fast.encoder_self[b, :, :, :n, :n], slow.encoder_self[b, :, :, :n, :n], atol=1e-5, rtol=0
        )
        assert float(fast.memory[b, n:].abs().sum()) == 0.0  # padding: zero memory, no weights
        assert float(fast.encoder_self[b, :, :, n:].abs().sum()) == 0.0
        assert float(fast.encoder_self[b, :, :, :, n:].abs().sum()) == 0.0


def test_switched_off_heads_take_the_python_layers(make_model: ModelFactory, make_source: SourceFactory) -> None:
    from attnscope.nn.ablation import disabled_heads

    model = _int8(make_model, seed=6)
    src = make_source((5,))
    with torch.inference_mode():
        plain = model.encode(src, need_weights=True)
        with disabled_heads(model, [("encoder_self", 0, 1)]):
            assert model._native_encoder() is None
            ablated = model.encode(src, need_weights=True)
    assert not torch.allclose(ablated.memory, plain.memory, atol=1e-3)  # the head's output is gone


def _fp16_exact(make_model: ModelFactory, seed: int) -> Transformer:
    """A float model whose weights are fp16 numbers (as the shipped ones): its products run on
    FBGEMM's packed fp16 weights, which the native float step takes."""
    model = make_model("transformer", heads=4, decoder_layers=2, seed=seed)
    assert isinstance(model, Transformer)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 1:
                nn.init.normal_(p, std=0.3)
            p.copy_(p.half().float())
    return model


@pytest.mark.parametrize("group", [1, 3], ids=["one-row-per-sentence", "three-beams"])
def test_the_float_native_step_equals_the_python_step_bit_for_bit(
    make_model: ModelFactory, make_source: SourceFactory, group: int
) -> None:
    model = _fp16_exact(make_model, seed=7)
    src = make_source((7, 4))
    g = torch.Generator().manual_seed(4)
    tokens = torch.randint(4, 40, (2 * group, 2 * GROWTH + 3), generator=g)  # the cache grows twice
    fast, slow = (_steps(model, src, tokens, group, n) for n in (True, False))
    for a, b in zip(fast, slow, strict=True):
        assert torch.equal(a.log_probs, b.log_probs)
        assert a.cross is not None and b.cross is not None and torch.equal(a.cross, b.cross)
        assert a.decoder_self is not None and b.decoder_self is not None
        assert torch.equal(a.decoder_self, b.decoder_self)


def test_the_float_native_step_leaves_many_rows_on_several_threads_to_python(
    make_model: ModelFactory, make_source: SourceFactory
) -> None:
    model = _fp16_exact(make_model, seed=8)
    with torch.inference_mode():
        state = model.init_state(model.encode(make_source((5,))))
    step = state.native
    assert isinstance(step, native.NativeFp32Step)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)  # products of more than 24 rows go to MKL's threads
        with torch.no_grad():
            assert model.step_path(24) == "native" and model.step_path(25) == "prepared"
            torch.set_num_threads(1)
            assert model.step_path(25) == "native"
    finally:
        torch.set_num_threads(threads)
    rough = make_model("transformer", heads=4, decoder_layers=2)  # weights not fp16 numbers
    assert isinstance(rough, Transformer)
    with torch.inference_mode():
        assert rough.init_state(rough.encode(make_source((5,)))).native is None
