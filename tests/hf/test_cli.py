"""``attnscope import`` as a command: the folder it writes, the families it refuses, and the
extra it names when transformers is missing."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from safetensors import safe_open

from attnscope.cli import main
from attnscope.extras import MissingExtra
from attnscope.hf import require_transformers
from attnscope.hf.importer import import_model
from attnscope.nn.config import TransformerConfig, config_to_dict
from attnscope.repository import load_model_folder


def test_import_writes_a_float16_folder_that_loads(marian_source: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "en-de-opus"
    assert main(["import", str(marian_source), "--out", str(out), "--name", "tiny opus"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["folder"] == str(out)
    with safe_open(str(out / "model.safetensors"), "pt") as weights:
        assert {str(weights.get_tensor(k).dtype) for k in weights.keys()} == {"torch.float16"}
    loaded = load_model_folder(out)
    card = loaded.card
    assert card["name"] == "tiny opus" and card["dtype"] == "float16" and card["origin"]["source"] == str(marian_source)
    assert (loaded.source_lang, loaded.target_lang) == ("en", "de")
    assert card["conversion_checks"]["float32"]["max_logit_difference"] < 1e-4
    saved = card["conversion_checks"]["saved"]  # the float16 copy: rounding, recorded
    assert 0 < saved["max_logit_difference"] < 0.5  # logits of about ±10 here


def test_refused_family_names_what_is_missing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from transformers import FSMTConfig

    FSMTConfig(langs=["en", "de"], src_vocab_size=64, tgt_vocab_size=64, d_model=48).save_pretrained(tmp_path / "fsmt")
    assert main(["import", str(tmp_path / "fsmt"), "--out", str(tmp_path / "out")]) == 2
    error = capsys.readouterr().err
    assert "'fsmt'" in error and "separate source and target vocabularies" in error
    assert not (tmp_path / "out").exists()


def test_unknown_family_lists_the_ones_imported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from transformers import BertConfig

    BertConfig(vocab_size=64, hidden_size=48, num_attention_heads=3, num_hidden_layers=1).save_pretrained(tmp_path / "bert")
    assert main(["import", str(tmp_path / "bert"), "--out", str(tmp_path / "out")]) == 2
    error = capsys.readouterr().err
    assert "attnscope imports bart, m2m_100, marian, mbart, mt5, t5 (encoder-decoders)" in error
    assert "llama, mistral, qwen2, qwen3 (decoder-only LLMs)" in error  # the LLMs import too (docs/llm.md)


def test_not_a_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["import", str(tmp_path / "missing"), "--out", str(tmp_path / "out")]) == 2
    assert "not a folder saved with save_pretrained" in capsys.readouterr().err


def test_missing_transformers_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "transformers", None)  # import transformers now fails
    with pytest.raises(MissingExtra, match=r"pip install 'attnscope\[hf\]'"):
        require_transformers()
    with pytest.raises(MissingExtra, match=r"pip install 'attnscope\[hf\]'"):  # before a hub id is fetched
        import_model("Helsinki-NLP/opus-mt-en-de", "unused")


def test_shipped_layout_writes_no_layout_fields() -> None:
    """A shipped model's config.json reads as it always did: the layout fields appear only
    where an import set them."""
    written = config_to_dict(TransformerConfig(vocab_size=100))
    assert "activation" not in written and "positions" not in written
    assert config_to_dict(TransformerConfig(vocab_size=100, activation="gelu"))["activation"] == "gelu"
