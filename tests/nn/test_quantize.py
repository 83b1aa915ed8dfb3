"""Opt-in int8 inference (attnscope.nn.quantize): linear layers become int8 ones, every attention
matrix still comes back, outputs stay close to fp32, and the setting reaches the model loader."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch import Tensor, nn

from attnscope.config import Settings
from attnscope.decoding import greedy_decode
from attnscope.engine.registry import ModelRegistry
from attnscope.nn import inference
from attnscope.nn.base import Seq2Seq
from attnscope.nn.quantize import Int8Linear, quantize
from attnscope.repository import load_model_folder
from attnscope.translator import Translator

ModelFactory = Callable[..., Seq2Seq]
SourceFactory = Callable[..., Tensor]


def _float_linears(model: nn.Module) -> list[str]:
    return [name for name, m in model.named_modules() if type(m) is nn.Linear]


@pytest.mark.parametrize("architecture", ["transformer", "rnn"])
def test_linear_layers_become_int8_and_outputs_stay_close(
    make_model: ModelFactory, make_source: SourceFactory, architecture: str
) -> None:
    model = make_model(architecture, seed=3)
    src = make_source((7, 4, 6))
    tgt_in = torch.tensor([[2, 9, 8, 7], [2, 11, 12, 13], [2, 15, 16, 17]])
    with torch.inference_mode():
        reference = model(src, tgt_in, need_weights=True)
        quantize(model, "int8")
        assert _float_linears(model) == []
        if architecture == "transformer":
            assert model.quantized_output is not None
        got = model(src, tgt_in, need_weights=True)
        assert got.cross is not None and reference.cross is not None
        assert got.cross.shape == reference.cross.shape
        torch.testing.assert_close(got.cross, reference.cross, atol=0.05, rtol=0)
        torch.testing.assert_close(
            got.logits.log_softmax(-1), reference.logits.log_softmax(-1), atol=0.2, rtol=0
        )
        out = greedy_decode(model, src, max_length=6)  # the decoding fast paths take int8 layers
        assert out.cross is not None
        rows = out.cross.sum(-1)[out.cross.sum(-1) > 0]
        torch.testing.assert_close(rows, torch.ones_like(rows))


def test_the_int8_product_does_not_saturate_where_full_range_weights_would() -> None:
    # Two adjacent weights at the top of the range times two activations at the top of theirs:
    # FBGEMM's AVX2 kernel adds such pairs in a saturating 16-bit sum, so with weights on the full
    # -128..127 range this product comes out near 13.9 instead of 16.
    weight = -torch.ones(1, 16)
    weight[0, :2] = 1.0
    x = -torch.ones(1, 16)
    x[0, :2] = 1.0
    got = inference.int8_product(lambda: weight, None)(x)
    torch.testing.assert_close(got, torch.tensor([[16.0]]), atol=0.2, rtol=0)


def test_each_weight_row_is_quantised_on_seven_bits_with_zero_exact() -> None:
    g = torch.Generator().manual_seed(0)
    matrix = torch.randn(24, 40, generator=g) * 0.3
    matrix[3] *= 20  # a row of large weights does not coarsen the others
    matrix[0, :5] = 0.0
    q, col_offsets, scales = inference.quantize_weight(matrix)
    assert q.dtype == torch.int8 and int(q.min()) >= -63 and int(q.max()) <= 63
    assert torch.equal(q.abs().amax(1), torch.full((24,), 63, dtype=torch.int8))  # every row uses its range
    dequantised = q.float() * scales[:, None]
    assert bool(((dequantised - matrix).abs() <= scales[:, None] / 2 + 1e-7).all())
    assert torch.equal(dequantised[0, :5], torch.zeros(5))
    assert torch.equal(col_offsets, q.int().sum(1))


def test_a_fused_int8_product_equals_its_parts() -> None:
    # rows are quantised independently, so fusing (query, key and value in one product) changes
    # no number: the decoding step (fused) and the teacher-forced layers agree
    g = torch.Generator().manual_seed(1)
    a, b = torch.randn(16, 32, generator=g), torch.randn(8, 32, generator=g) * 5
    bias = torch.randn(24, generator=g)
    x = torch.randn(3, 32, generator=g)
    fused = inference.int8_product(lambda: torch.cat([a, b]), bias)(x)
    parts = torch.cat([inference.int8_product(lambda: a, bias[:16])(x), inference.int8_product(lambda: b, bias[16:])(x)], 1)
    torch.testing.assert_close(fused, parts, atol=1e-6, rtol=0)
    exact = x @ torch.cat([a, b]).t() + bias
    assert float((fused - exact).abs().max()) <= 0.05 * float(exact.abs().max())


def test_int8_layers_run_fbgemms_int8_kernel_and_fuse(
    make_model: ModelFactory, make_source: SourceFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ATTNSCOPE_NATIVE", "0")  # the Python step (the native one: test_native_step.py)
    model = quantize(make_model("transformer", seed=4), "int8")
    calls: list[tuple[int, ...]] = []
    kernel = torch.fbgemm_linear_int8_weight_fp32_activation

    def counted(x: Tensor, *args: object) -> Tensor:
        out = kernel(x, *args)  # type: ignore[arg-type]
        calls.append(tuple(out.shape))
        return out

    monkeypatch.setattr(torch, "fbgemm_linear_int8_weight_fp32_activation", counted)
    with torch.inference_mode():
        out = greedy_decode(model, make_source((5,)), max_length=3)
    assert out.cross is not None
    layers = [m for m in model.modules() if isinstance(m, Int8Linear)]
    assert calls and len(layers) > 0
    # a step's self-attention queries, keys and values come out of one product, (1, 3 * D); the
    # output projection is int8 too, (1, V)
    d, v = model.config.d_model, model.config.vocab_size
    assert (1, 3 * d) in calls and (1, v) in calls


def test_an_unknown_mode_is_refused(make_model: ModelFactory) -> None:
    with pytest.raises(ValueError, match="unknown quantization 'int4'"):
        quantize(make_model("transformer"), "int4")


def test_the_setting_reaches_the_loaded_models(tiny_models_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ATTNSCOPE_QUANTIZE", "int8")
    settings = Settings()
    assert settings.quantize == "int8"
    registry = ModelRegistry(tiny_models_dir, torch.device("cpu"), 200, quantize=settings.quantize)
    registry.load_all()
    served = registry.get("en-de-transformer")
    assert _float_linears(served.loaded.model) == []
    loaded = load_model_folder(tiny_models_dir / "en-de-rnn-additive", quantize="int8")
    [translation] = Translator(loaded).translate(["A man is riding a bicycle."], beam_size=2, max_length=6)
    assert translation.hypothesis.cross is not None
    monkeypatch.setenv("ATTNSCOPE_QUANTIZE", "int4")
    with pytest.raises(ValueError, match="int8"):
        Settings()
