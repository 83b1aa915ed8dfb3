"""The translator facade: text in, translations with attention out, in the shapes the page draws
(query = target ids, key = source ids, both ending with EOS)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from attnscope.decoding import beam_search, greedy_decode
from attnscope.nn.config import EOS_ID
from attnscope.repository import LoadedModel, load_model_folder
from attnscope.testing import build_tiny_models
from attnscope.translator import DEFAULT_LENGTH_PENALTY, Translation, Translator

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


def test_beam_uses_the_length_penalty_saved_in_the_card(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = build_tiny_models(tmp_path)[0]
    card_path = folder / "card.json"
    card = json.loads(card_path.read_text())
    card["decoding"] = {"beam_size": 4, "length_penalty": 2.5, "tuned_on": "val"}
    card_path.write_text(json.dumps(card))
    translator = Translator(load_model_folder(folder))
    assert translator.length_penalty == 2.5
    seen: list[float] = []

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.append(args[2].alpha)  # the options the translator decodes with
        return beam_search(*args, **kwargs)

    monkeypatch.setattr("attnscope.translator.beam_search", spy)
    translator.translate(["Two dogs play in the snow."], beam_size=4, max_length=6)
    translator.translate(["Two dogs play in the snow."], beam_size=4, max_length=6, alpha=0.1)
    assert seen == [2.5, 0.1]
    plain = Translator(load_model_folder(build_tiny_models(tmp_path / "plain")[0]))
    assert plain.length_penalty == DEFAULT_LENGTH_PENALTY


@pytest.mark.parametrize("beam_size", [1, 3])
def test_prefix_tree_and_coverage_pass_through(loaded: LoadedModel, beam_size: int) -> None:
    """A target prefix (tokenised like a target) is forced; the tree comes back when asked, for
    beam size 1 too; a coverage penalty is refused by the model without attention."""
    translator = Translator(loaded)
    prefix = translator.target_ids("Zwei Hunde")
    [translation] = translator.translate(
        TEXTS[1:], beam_size=beam_size, max_length=12, prefix=[prefix], return_tree=True
    )
    hyp = translation.hypothesis
    assert translation.target_ids[: len(prefix)] == prefix and hyp.forced_tokens == len(prefix)
    assert hyp.tree is not None
    assert [hyp.tree.nodes[i].token for i in hyp.tree.best[1:]] == translation.target_ids
    assert_shapes(loaded, translation)
    if "cross" in loaded.config.attention_kinds:
        translator.translate(TEXTS, beam_size=beam_size, max_length=8, coverage_penalty=0.2)
    elif beam_size > 1:
        with pytest.raises(ValueError, match="cross-attention"):
            translator.translate(TEXTS, beam_size=beam_size, coverage_penalty=0.2)
