"""The translator facade: text in, translations with attention out, in the shapes the page draws
(query = target ids, key = source ids, both ending with EOS)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from app.decoding import greedy_decode
from app.nn.config import EOS_ID
from app.repository import LoadedModel, load_model_folder
from app.translator import Translation, Translator

FOLDERS = ["en-de-transformer", "en-de-rnn-additive", "en-de-rnn-none", "en-de-self-attentive"]
TEXTS = ["A man is riding a bicycle.", "Two dogs."]


@pytest.fixture(scope="module", params=FOLDERS)
def loaded(request: pytest.FixtureRequest, tiny_models_dir: Path) -> LoadedModel:
    torch.set_num_threads(1)  # tiny models: threads only add overhead
    return load_model_folder(tiny_models_dir / request.param)


def assert_shapes(loaded: LoadedModel, translation: Translation) -> None:
    c, hyp = loaded.config, translation.hypothesis
    s, t = len(translation.source_ids), len(translation.target_ids)
    assert translation.source_ids[-1] == EOS_ID and t >= 1
    enc_layers = c.encoder_layers if c.architecture == "transformer" else 1
    expected = {
        "cross": (c.layers, c.num_heads, t, s),
        "encoder_self": (enc_layers, c.num_heads, s, s),
        "decoder_self": (c.layers, c.num_heads, t, t),
    }
    for kind, shape in expected.items():
        weights = getattr(hyp, kind)
        if kind in c.attention_kinds:
            assert weights is not None and tuple(weights.shape) == shape, kind
            torch.testing.assert_close(weights.sum(-1), torch.ones(shape[:-1]), atol=1e-5, rtol=0)
        else:
            assert weights is None, kind


@pytest.mark.parametrize("beam_size", [1, 3])
def test_translate_returns_attention_over_target_and_source_ids(
    loaded: LoadedModel, beam_size: int
) -> None:
    translator = Translator(loaded)
    out = translator.translate(TEXTS, beam_size=beam_size, max_length=8)
    assert len(out) == len(TEXTS)
    for text, translation in zip(TEXTS, out, strict=True):
        assert translation.source_ids == loaded.tokenizer.encode(text) + [EOS_ID]
        assert translation.target_ids == translation.hypothesis.tokens
        assert translation.text == loaded.tokenizer.decode(translation.target_ids)
        assert_shapes(loaded, translation)


def test_greedy_translation_is_greedy_decoding(loaded: LoadedModel) -> None:
    translator = Translator(loaded)
    [translation] = translator.translate(TEXTS[:1], beam_size=1, max_length=8)
    src = torch.tensor([translation.source_ids])
    direct = greedy_decode(loaded.model, src, max_length=8).hypotheses()[0]
    assert translation.target_ids == direct.tokens


def test_align_scores_the_given_target(loaded: LoadedModel) -> None:
    translator = Translator(loaded)
    targets = ["Ein Mann fährt Fahrrad.", "Zwei Hunde spielen im Schnee."]
    out = translator.align(TEXTS, targets)
    for target, translation in zip(targets, out, strict=True):
        assert translation.target_ids == loaded.tokenizer.encode(target) + [EOS_ID]
        assert translation.text == target
        assert len(translation.hypothesis.token_logprobs) == len(translation.target_ids)
        assert_shapes(loaded, translation)


def test_bad_input_is_a_clear_error(loaded: LoadedModel) -> None:
    translator = Translator(loaded, max_source_tokens=5)
    with pytest.raises(ValueError, match="no tokens"):
        translator.translate([""])
    with pytest.raises(ValueError, match="the limit is 5"):
        translator.translate(["Children are playing football in the park."])
    with pytest.raises(ValueError, match="the limit is 5"):
        translator.align(["A boy."], ["Kinder spielen Fußball im Park und im Schnee."])
