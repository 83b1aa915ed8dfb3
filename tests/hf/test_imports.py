"""What a user's ``save_pretrained`` folder holds, imported: decoders sized unlike their
encoders (per-stack sizes), tokenizers that are only a ``tokenizer.json`` (byte-level BPE for
BART, unigram for T5), the language pair from the saved tokenizer, and the errors that name
what to do (``--pair``, a folder without a tokenizer)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from builders import bart_folder, json_only, m2m100_folder, marian_folder, t5_folder

from attnscope.cli import main
from attnscope.hf.importer import import_model
from attnscope.nn.config import TransformerConfig
from attnscope.nn.family import geometry_of
from attnscope.repository import load_model_folder
from attnscope.testing import TINY_PAIRS
from attnscope.text.bpe import JsonTokenizer
from attnscope.translator import Translator

TEXTS = [s for pair in TINY_PAIRS[:4] for s in pair] + ["Zwei Männer, 3 Hunde & ünïcödé!"]


def _original(folder: Path) -> tuple[Any, Any]:
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    model = AutoModelForSeq2SeqLM.from_pretrained(folder, attn_implementation="eager").eval()
    return model, AutoTokenizer.from_pretrained(folder)


def _assert_checks_pass(card: dict[str, Any]) -> None:
    checks = card["conversion_checks"]
    assert checks["tokenizer_equal"] == checks["float32"]["sentences"] == 4
    for copy in ("float32", "saved"):
        assert checks[copy]["max_logit_difference"] < 1e-4 and checks[copy]["greedy_equal"] == 4


@pytest.fixture(scope="module")
def bart(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("bart")
    source = bart_folder(root / "source")
    return source, import_model(str(source), root / "en-de-bart", dtype="float32", pair=("en", "de")).folder


def test_bart_with_a_byte_level_tokenizer_json_imports(bart: tuple[Path, Path]) -> None:
    source, out = bart
    assert not any(p.suffix in (".model", ".spm") for p in source.iterdir())  # tokenizer.json only
    loaded = load_model_folder(out)
    _assert_checks_pass(loaded.card)
    assert isinstance(loaded.tokenizer, JsonTokenizer) and (out / "tokenizer.json").is_file()
    _, hf_tok = _original(source)
    assert loaded.tokenizer.pieces(loaded.tokenizer.source_prefix_ids()) == ["<s>"]  # BART's <s> before every source
    for text in TEXTS:
        theirs = hf_tok(text).input_ids  # <s> text </s>, in the original's numbering
        ours = Translator(loaded).source_ids(text)
        assert len(ours) == len(theirs)
        assert loaded.tokenizer.decode(ours) == hf_tok.decode(theirs, skip_special_tokens=True) == text


def test_bart_translation_is_the_originals(bart: tuple[Path, Path]) -> None:
    source, out = bart
    hf_model, hf_tok = _original(source)
    from attnscope.hf.checks import generation_config

    translator = Translator(load_model_folder(out))
    for text in TEXTS[:3]:
        generation_config(hf_model, max_new_tokens=10)
        with torch.no_grad():
            theirs = hf_model.generate(torch.tensor([hf_tok(text).input_ids]))[0, 1:].tolist()
        (result,) = translator.translate([text], max_length=10)
        assert result.text == hf_tok.decode(theirs, skip_special_tokens=True)


def test_per_stack_sizes_are_carried(bart: tuple[Path, Path], tmp_path: Path) -> None:
    """BART: 3 encoder heads 80 wide, 6 decoder heads 96 wide; a Marian likewise (3 and 6
    heads, 80 and 112 wide): the config, the geometry and config.json say so, and the
    converted model computes the original's numbers (the import's checks)."""
    config = load_model_folder(bart[1]).config
    assert isinstance(config, TransformerConfig)
    assert (config.heads_of("encoder"), config.heads_of("decoder")) == (3, 6)
    assert (config.ff_dim_of("encoder"), config.ff_dim_of("decoder")) == (80, 96)
    assert geometry_of(config).shapes() == {"cross": (3, 6), "encoder_self": (2, 3), "decoder_self": (3, 6)}
    marian = marian_folder(tmp_path / "marian", decoder_heads=6, decoder_ff_dim=112)
    out = tmp_path / "en-de-marian"
    assert main(["import", str(marian), "--out", str(out), "--dtype", "float32"]) == 0
    written = json.loads((out / "config.json").read_text())["model"]
    assert (written["heads"], written["decoder_heads"], written["ff_dim"], written["decoder_ff_dim"]) == (3, 6, 80, 112)
    _assert_checks_pass(load_model_folder(out).card)


def test_t5_with_only_a_tokenizer_json_imports(tmp_path: Path) -> None:
    """What PreTrainedTokenizerFast saves for T5 (a unigram tokenizer.json, no spiece.model)."""
    source = json_only(t5_folder(tmp_path / "t5"))
    out = import_model(str(source), tmp_path / "en-de-t5", dtype="float32").folder
    loaded = load_model_folder(out)
    _assert_checks_pass(loaded.card)
    assert isinstance(loaded.tokenizer, JsonTokenizer)
    _, hf_tok = _original(source)
    for text in TEXTS:
        assert len(loaded.tokenizer.encode(text)) + 1 == len(hf_tok(text).input_ids)


def test_m2m100_takes_its_pair_from_the_saved_tokenizer(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The tokenizer was saved with src_lang en, tgt_lang de: no --pair needed."""
    source = m2m100_folder(tmp_path / "m2m100-source")
    out = tmp_path / "multilingual"
    assert main(["import", str(source), "--out", str(out), "--dtype", "float32"]) == 0
    loaded = load_model_folder(out)
    assert (loaded.source_lang, loaded.target_lang) == ("en", "de")
    assert loaded.tokenizer.pieces(loaded.tokenizer.target_prefix_ids()) == ["__de__"]
    capsys.readouterr()
    assert main(["import", str(source), "--out", str(tmp_path / "bad"), "--pair", "en-xx"]) == 2
    error = capsys.readouterr().err
    assert "unknown language code(s) xx" in error and "--pair" in error
    assert "Traceback" not in error and not (tmp_path / "bad").exists()


def test_a_folder_without_a_tokenizer_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from transformers import MarianConfig

    folder = tmp_path / "weights-only"
    MarianConfig(vocab_size=64, d_model=48, encoder_attention_heads=3, decoder_attention_heads=3).save_pretrained(folder)
    assert main(["import", str(folder), "--out", str(tmp_path / "out")]) == 2
    error = capsys.readouterr().err
    assert "has no tokenizer attnscope reads" in error and "tokenizer.json" in error
    assert "Traceback" not in error and not (tmp_path / "out").exists()


def test_a_decoder_whose_heads_do_not_divide_d_model_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from transformers import MarianConfig

    folder = tmp_path / "odd"
    MarianConfig(vocab_size=64, d_model=48, encoder_attention_heads=3, decoder_attention_heads=5).save_pretrained(folder)
    assert main(["import", str(folder), "--out", str(tmp_path / "out")]) == 2
    assert "d_model 48 is not divisible by the decoder's 5 heads" in capsys.readouterr().err
