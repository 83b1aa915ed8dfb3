"""Adding a converter is one module: the one docs/import.md shows ("Adding a converter"),
registered here, imports a tiny Pegasus (a model type attnscope otherwise refuses) with every
conversion check passing; unregistered, the model type is refused again."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest
import torch
from builders import NO_DROPOUT, SENTENCES, _perturb_norms

from attnscope.hf import ImportFailure
from attnscope.hf.converters import converter_for, converters, register, unregister
from attnscope.hf.converters.bart_lineage import BartLineage
from attnscope.hf.importer import import_model
from attnscope.repository import load_model_folder


class PegasusConverter(BartLineage):
    model_types: ClassVar[tuple[str, ...]] = ("pegasus",)
    label: ClassVar[str] = "Pegasus"

    def __init__(self) -> None:
        super().__init__(pre_norm=True, embedding_norm=False, final_norm=True, first_position=lambda m: 0)


@pytest.fixture
def pegasus_converter() -> Iterator[PegasusConverter]:
    converter = register(PegasusConverter())
    yield converter
    unregister("pegasus")


def pegasus_folder(folder: Path) -> Path:
    """A tiny Pegasus (pre-norm, final norms, sinusoidal positions from row 0) whose tokenizer
    is a unigram tokenizer.json trained here (pad 0, eos 1, unk 2, as Pegasus numbers them)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PegasusConfig, PegasusForConditionalGeneration, PreTrainedTokenizerFast

    tok = Tokenizer(models.Unigram())
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    tok.train_from_iterator(SENTENCES, trainers.UnigramTrainer(vocab_size=120, special_tokens=["<pad>", "</s>", "<unk>"], unk_token="<unk>"))
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 1)])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="</s>", pad_token="<pad>", unk_token="<unk>")
    config = PegasusConfig(
        vocab_size=len(tokenizer), d_model=48, encoder_layers=2, decoder_layers=2, encoder_attention_heads=3,
        decoder_attention_heads=3, encoder_ffn_dim=80, decoder_ffn_dim=80, max_position_embeddings=64,
        pad_token_id=0, eos_token_id=1, decoder_start_token_id=0, forced_eos_token_id=1, init_std=0.3,
        scale_embedding=True, **NO_DROPOUT,
    )
    torch.manual_seed(4)
    model = PegasusForConditionalGeneration(config).eval()
    _perturb_norms(model, 4)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def test_a_converter_registered_in_one_module_imports(pegasus_converter: PegasusConverter, tmp_path: Path) -> None:
    assert converters()["pegasus"] is pegasus_converter
    source = pegasus_folder(tmp_path / "pegasus")
    out = import_model(str(source), tmp_path / "en-de-pegasus", dtype="float32", pair=("en", "de")).folder
    loaded = load_model_folder(out)
    checks = loaded.card["conversion_checks"]
    assert checks["float32"]["max_logit_difference"] < 1e-4 and checks["float32"]["greedy_equal"] == 4
    assert checks["tokenizer_equal"] == 4
    assert loaded.card["origin"]["family"] == "Pegasus"


def test_unregistered_the_model_type_is_refused_again() -> None:
    with pytest.raises(ImportFailure, match="Pegasus is not a translation family"):
        converter_for("pegasus")


def test_a_model_type_cannot_be_taken_by_another_converter() -> None:
    class Impostor(PegasusConverter):
        model_types: ClassVar[tuple[str, ...]] = ("marian",)

    with pytest.raises(ValueError, match="'marian' is already converted by MarianConverter"):
        register(Impostor())
