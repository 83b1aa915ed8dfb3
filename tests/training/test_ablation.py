"""``attnscope evaluate --ablate``: BLEU with each head switched off, as ``[layer][head]`` grids.

The references are the model's own greedy translations, so BLEU with every head on is exactly
100 and a cell falls below it only if switching that head off changes what the model writes."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from attnscope.nn.ablation import disabled_heads
from attnscope.repository import LoadedModel, load_model_folder
from attnscope.testing import TINY_KINDS, TINY_PAIRS, build_sharp_transformer, build_tiny_models
from attnscope.training.ablation import ablation_bleu
from attnscope.training.data import load_parallel
from attnscope.training.evaluate import bleu_scores, translate_corpus
from attnscope.translator import Translator

from .conftest import write_corpus

SOURCES = [source for source, _ in TINY_PAIRS]


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> LoadedModel:
    """A tiny Transformer (2 + 2 layers, 2 heads) with weights large enough that its output
    depends on the input and on single heads (the default tiny init repeats one token)."""
    return load_model_folder(build_sharp_transformer(tmp_path_factory.mktemp("ablation")), torch.device("cpu"))


@pytest.fixture(scope="module")
def own_corpus(model: LoadedModel, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """test2016 = the tiny sources with the model's own greedy translations as references."""
    hyps = translate_corpus(Translator(model), SOURCES, beam_size=1, progress=False)
    pairs = [(s, h.strip()) for s, h in zip(SOURCES, hyps, strict=True) if h.strip()]
    assert len(pairs) >= 5
    return write_corpus(tmp_path_factory.mktemp("own"), {"test2016": pairs})


def bleu_with_off(model: LoadedModel, corpus: Path, head: tuple[str, int, int]) -> float:
    """BLEU of test2016 with one head off, computed here without ablation_bleu."""
    pairs = load_parallel(corpus, "test2016", "en", "de")
    sources, references = [s for s, _ in pairs], [t for _, t in pairs]
    with disabled_heads(model.model, [head]):
        hyps = translate_corpus(Translator(model), sources, beam_size=1, progress=False)
    return float(bleu_scores(hyps, references)["lowercase_13a"])


def test_each_cell_is_bleu_with_that_head_off(model: LoadedModel, own_corpus: Path) -> None:
    result = ablation_bleu(Translator(model), own_corpus, beam_size=1, progress=False)
    assert result["baseline"] == 100.0  # the references are the model's own output
    assert result["split"] == "test2016" and result["beam_size"] == 1
    grids = result["bleu_without_head"]
    assert set(grids) == {"cross", "encoder_self", "decoder_self"}
    for grid in grids.values():  # [layer][head]: 2 layers x 2 heads each
        assert [len(row) for row in grid] == [2, 2]
        assert all(0.0 <= v <= 100.0 for row in grid for v in row)
    assert any(v < 100.0 for grid in grids.values() for row in grid for v in row)  # heads matter
    for kind, layer, head in [("cross", 1, 0), ("encoder_self", 0, 1), ("decoder_self", 1, 1)]:
        assert grids[kind][layer][head] == pytest.approx(bleu_with_off(model, own_corpus, (kind, layer, head)))


def test_kinds_limit_the_grids_and_a_missing_kind_is_an_error(model: LoadedModel, own_corpus: Path, tmp_path: Path) -> None:
    result = ablation_bleu(Translator(model), own_corpus, kinds=["cross"], beam_size=1, progress=False)
    assert list(result["bleu_without_head"]) == ["cross"]
    (rnn,) = build_tiny_models(tmp_path, kinds=[k for k in TINY_KINDS if k[0] == "rnn-additive"])
    with pytest.raises(ValueError, match="has no encoder_self attention; it has cross"):
        ablation_bleu(Translator(load_model_folder(rnn, torch.device("cpu"))), own_corpus, kinds=["encoder_self"])

