"""Opt-in int8 inference (app.nn.quantize): linear layers become int8 ones, every attention
matrix still comes back, outputs stay close to fp32, and the setting reaches the model loader."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch import Tensor, nn

from app.config import Settings
from app.decoding import greedy_decode
from app.nn.base import Seq2Seq
from app.nn.quantize import quantize
from app.repository import load_model_folder
from app.serving.registry import ModelRegistry
from app.translator import Translator

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
