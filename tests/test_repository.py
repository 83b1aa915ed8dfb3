"""The model repository: a saved folder loads back bit-for-bit (fp32) or as the fp16-rounded
weights (fp16, what we ship), and an incomplete or inconsistent folder fails with a clear error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from attnscope.decoding import greedy_decode
from attnscope.nn import build_model
from attnscope.nn.base import Seq2Seq
from attnscope.nn.config import SCORES
from attnscope.repository import (
    CARD_FILE,
    CONFIG_FILE,
    TOKENIZER_FILE,
    WEIGHTS_FILE,
    discover,
    load_model_folder,
    save_model_folder,
)
from attnscope.testing import tiny_config
from attnscope.text import Tokenizer

KINDS = [("rnn", s) for s in SCORES] + [
    ("self_attentive_rnn", "additive"),
    ("transformer", "additive"),
]


@pytest.fixture(scope="module")
def tokenizer(tiny_models_dir: Path) -> Tokenizer:
    torch.set_num_threads(1)  # tiny models: threads only add overhead
    return Tokenizer.load(tiny_models_dir / "en-de-transformer" / TOKENIZER_FILE)


def _model(
    tokenizer: Tokenizer, architecture: str = "transformer", score: str = "additive"
) -> Seq2Seq:
    torch.manual_seed(0)
    model = build_model(tiny_config(architecture, score, tokenizer.vocab_size)).eval()
    with (
        torch.no_grad()
    ):  # move every parameter off its initial value (zero biases, beta = 10, ...)
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    return model


def _save(folder: Path, model: Seq2Seq, tokenizer: Tokenizer, dtype: torch.dtype) -> Path:
    card = {"bleu": 12.5, "note": "für Tests"}
    return save_model_folder(
        folder, model, tokenizer, source_lang="en", target_lang="de", card=card, dtype=dtype
    )


@pytest.mark.parametrize(("architecture", "score"), KINDS, ids=[f"{a}-{s}" for a, s in KINDS])
def test_fp32_round_trip_is_bit_identical(
    tmp_path: Path, tokenizer: Tokenizer, architecture: str, score: str
) -> None:
    model = _model(tokenizer, architecture, score)
    loaded = load_model_folder(_save(tmp_path / "m", model, tokenizer, torch.float32))
    assert loaded.config == model.config and loaded.id == "m"
    assert (loaded.source_lang, loaded.target_lang) == ("en", "de")
    assert loaded.card == {"bleu": 12.5, "note": "für Tests"}
    assert not loaded.model.training
    original, restored = model.state_dict(), loaded.model.state_dict()
    assert original.keys() == restored.keys()
    for name, tensor in original.items():
        assert restored[name].dtype == tensor.dtype and torch.equal(restored[name], tensor), name

    src = torch.tensor([[5, 9, 14, 3], [7, 3, 0, 0]])
    tgt_in = torch.tensor([[2, 8, 11], [2, 6, 6]])
    a, b = model(src, tgt_in, need_weights=True), loaded.model(src, tgt_in, need_weights=True)
    assert torch.equal(a.logits, b.logits)
    for name in ("cross", "encoder_self", "decoder_self"):
        x, y = getattr(a, name), getattr(b, name)
        assert (x is None and y is None) or torch.equal(x, y), name
    assert torch.equal(
        greedy_decode(model, src, max_length=6).tokens,
        greedy_decode(loaded.model, src, max_length=6).tokens,
    )


def test_fp16_saving_rounds_every_parameter(tmp_path: Path, tokenizer: Tokenizer) -> None:
    model = _model(tokenizer)
    folder = _save(tmp_path / "m", model, tokenizer, torch.float16)
    with safe_open(str(folder / WEIGHTS_FILE), framework="pt") as f:
        assert all(f.get_slice(k).get_dtype() == "F16" for k in f.keys())
    loaded = load_model_folder(folder)
    changed = 0
    for name, tensor in model.state_dict().items():
        restored = loaded.model.state_dict()[name]
        assert restored.dtype == torch.float32
        assert torch.equal(restored, tensor.half().float()), name
        changed += int(not torch.equal(restored, tensor))
    assert changed > 0  # fp16 really rounded something, so the check above had teeth


@pytest.mark.parametrize("missing", [CONFIG_FILE, WEIGHTS_FILE, TOKENIZER_FILE])
def test_missing_file_is_named(tmp_path: Path, tokenizer: Tokenizer, missing: str) -> None:
    folder = _save(tmp_path / "m", _model(tokenizer), tokenizer, torch.float32)
    (folder / missing).unlink()
    with pytest.raises(FileNotFoundError, match=f"missing {missing}"):
        load_model_folder(folder)


def test_card_is_optional(tmp_path: Path, tokenizer: Tokenizer) -> None:
    folder = _save(tmp_path / "m", _model(tokenizer), tokenizer, torch.float32)
    (folder / CARD_FILE).unlink()
    assert load_model_folder(folder).card == {}


def _edit_config(folder: Path, **changes: object) -> None:
    meta = json.loads((folder / CONFIG_FILE).read_text())
    for key, value in changes.items():
        if key == "format_version":
            meta[key] = value
        else:
            meta["model"][key] = value
    (folder / CONFIG_FILE).write_text(json.dumps(meta))


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"ff_dim": 64}, "weights do not match config.json"),
        ({"decoder_layers": 3}, "weights do not match config.json"),
        ({"architecture": "rnn"}, "unknown config fields for rnn: .*d_model"),
        ({"vocab_size": 500}, "tokenizer has .* pieces, config says 500"),
        ({"heads": 3}, "d_model=16 is not divisible by heads=3"),
        ({"colour": "red"}, "unknown config fields for transformer: colour"),
        ({"format_version": 99}, "unsupported model format 99"),
    ],
)
def test_mismatched_config_is_a_clear_error(
    tmp_path: Path, tokenizer: Tokenizer, changes: dict[str, object], message: str
) -> None:
    folder = _save(tmp_path / "m", _model(tokenizer), tokenizer, torch.float32)
    _edit_config(folder, **changes)
    with pytest.raises(ValueError, match=message):
        load_model_folder(folder)


def test_discover_lists_model_folders_only(tmp_path: Path, tiny_models_dir: Path) -> None:
    names = [p.name for p in discover(tiny_models_dir)]
    assert names == sorted(names) and len(names) == 4
    assert "en-de-transformer" in names
    (tmp_path / "not-a-model").mkdir()
    (tmp_path / "stray.txt").write_text("x")
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / CONFIG_FILE).write_text("{}")
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / CONFIG_FILE).write_text("{}")
    assert [p.name for p in discover(tmp_path)] == ["a", "b"]
    assert discover(tmp_path / "nowhere") == []
