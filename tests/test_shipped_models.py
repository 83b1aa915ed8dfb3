"""The trained models shipped in models/: each loads on the CPU and translates, its weights are
fp16 and small, and its card reports test BLEU (both conventions) and BLEU by source length."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from attnscope.alignment.hard import Side, hard_alignment, trained_rows, word_level_attention
from attnscope.alignment.links import parse_pharaoh
from attnscope.nn.config import UNK_ID
from attnscope.repository import (
    CARD_FILE,
    CONFIG_FILE,
    TOKENIZER_FILE,
    WEIGHTS_FILE,
    LoadedModel,
    load_model_folder,
)
from attnscope.text.tokenizer import Tokenizer
from attnscope.training.data import TEST_SPLITS
from attnscope.training.evaluate import LENGTH_BUCKETS, bucket_name
from attnscope.translator import Translator

MODELS_DIR = Path(__file__).resolve().parents[1] / "models"
SHIPPED = [
    "en-de-rnn-additive",
    "en-de-rnn-concat",
    "en-de-rnn-cosine",
    "en-de-rnn-dot",
    "en-de-rnn-general",
    "en-de-rnn-location",
    "en-de-rnn-none",
    "en-de-rnn-query_key",
    "en-de-rnn-scaled_dot",
    "en-de-self-attentive",
    "en-de-transformer",
    "en-de-transformer-aligned",
    "en-fr-rnn-additive",
    "en-fr-rnn-query_key",
    "en-fr-transformer",
    "en-fr-transformer-aligned",
]
TEST_SIZES = {"test2016": 1000, "test2017": 1000, "mscoco2017": 461}  # Multi30k task 1
MIB = 2**20
SENTENCE = "A man is riding a bicycle."
# A word each target language must have for SENTENCE (every shipped model gets it right).
EXPECTED_WORD = {"de": "Mann", "fr": "homme"}
# The example of what the older models lost: digits, a rare name, emoji.
UNSEEN = "On 12/03/2024 Dr. Zbigniew Brzęczyszczykiewicz paid $1,234.56 for 3 pizzas 🍕🍕 at Café Müller — wow!!! 😀"
# Folders with a byte-fallback tokenizer (no <unk>): the Transformers of the recipe search.
LOSSLESS = [n for n in SHIPPED if Tokenizer.load(MODELS_DIR / n / TOKENIZER_FILE).byte_fallback]
# Issue 14's rule 4 (better on validation and on every test split) is for the Transformers
# themselves; an *-aligned variant is re-made from each new one and follows issue 11's rule instead.
REPLACED = [
    n for n in SHIPPED
    if json.loads((MODELS_DIR / n / CARD_FILE).read_text()).get("history") and not n.endswith("-aligned")
]
ALIGNED = [n for n in SHIPPED if n.endswith("-aligned")]


@pytest.fixture(scope="module")
def shipped() -> dict[str, LoadedModel]:
    """Each shipped model, loaded once on the CPU."""
    torch.set_num_threads(1)  # one sentence each: a second thread only spins on a busy machine
    return {name: load_model_folder(MODELS_DIR / name, "cpu") for name in SHIPPED}


@pytest.fixture(scope="module")
def translations(shipped: dict[str, LoadedModel]) -> dict[str, str]:
    """SENTENCE translated by each model (beam 2)."""
    return {
        name: Translator(loaded).translate([SENTENCE], beam_size=2, need_weights=False)[0].text
        for name, loaded in shipped.items()
    }


def folder_size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.iterdir() if p.is_file())


def test_the_models_folder_holds_the_shipped_models() -> None:
    found = sorted(p.name for p in MODELS_DIR.iterdir() if (p / CONFIG_FILE).is_file())
    assert found == SHIPPED


@pytest.mark.parametrize("name", SHIPPED)
def test_each_model_loads_and_translates(
    name: str, shipped: dict[str, LoadedModel], translations: dict[str, str]
) -> None:
    loaded = shipped[name]
    source, target = name.split("-")[:2]
    assert (loaded.source_lang, loaded.target_lang) == (source, target)
    assert loaded.model.device == torch.device("cpu") and not loaded.model.training
    text = translations[name]
    assert text.strip() and text != SENTENCE
    assert EXPECTED_WORD[target] in text, text


def test_the_en_de_transformer_translates_the_demo_sentence(translations: dict[str, str]) -> None:
    text = translations["en-de-transformer"]
    assert "Mann" in text and "Fahrrad" in text, text


@pytest.mark.parametrize("name", SHIPPED)
def test_each_folder_is_complete_small_and_fp16(name: str) -> None:
    folder = MODELS_DIR / name
    for file in (CONFIG_FILE, WEIGHTS_FILE, TOKENIZER_FILE, CARD_FILE):
        assert (folder / file).is_file(), file
    assert folder_size(folder) <= 25 * MIB
    with safe_open(str(folder / WEIGHTS_FILE), framework="pt") as f:
        dtypes = {f.get_slice(key).get_dtype() for key in f.keys()}
    assert dtypes == {"F16"}


def test_all_models_together_stay_small() -> None:
    assert sum(folder_size(MODELS_DIR / name) for name in SHIPPED) <= 200 * MIB


@pytest.mark.parametrize("name", SHIPPED)
def test_each_card_reports_test_bleu_and_bleu_by_length(
    name: str, shipped: dict[str, LoadedModel]
) -> None:
    loaded = shipped[name]
    card = loaded.card
    assert card["id"] == name
    assert card["architecture"] == loaded.config.architecture
    assert card["parameters"] == loaded.model.num_parameters
    assert card["curve"] and card["training"]["epochs"] == len(card["curve"])
    assert set(card["bleu"]) == set(TEST_SPLITS) == set(card["bleu_by_length"])
    for split in TEST_SPLITS:
        bleu = card["bleu"][split]
        assert 0 < bleu["cased"] < 100 and 0 < bleu["lowercase_13a"] < 100
        assert "case:mixed" in bleu["signature_cased"] and "tok:13a" in bleu["signature_cased"]
        assert "case:lc" in bleu["signature_lowercase"] and "tok:13a" in bleu["signature_lowercase"]
        rows = card["bleu_by_length"][split]
        assert [r["bucket"] for r in rows] == [bucket_name(lo, hi) for lo, hi in LENGTH_BUCKETS]
        assert sum(r["sentences"] for r in rows) == TEST_SIZES[split]
        assert all(r["bleu"] is not None for r in rows if r["sentences"])
        chrf = card["chrf"][split]  # sacreBLEU's chrF2 of the same decoding, beside the BLEU
        assert bleu["cased"] < chrf["score"] < 100 and "case:mixed|eff:yes|nc:6|nw:0" in chrf["signature"]
        ran = chrf.get("bleu_same_run")  # scripts/card_chrf.py: these translations' BLEU, where not the card's
        assert ran is None or (ran != {k: bleu[k] for k in ran} and all(abs(ran[k] - bleu[k]) < 0.1 for k in ran))


def test_the_no_attention_baseline_is_below_every_en_de_attention_model(
    shipped: dict[str, LoadedModel],
) -> None:
    baseline = shipped["en-de-rnn-none"].card["bleu"]["test2016"]
    attention = [n for n in SHIPPED if n.startswith("en-de-") and n != "en-de-rnn-none"]
    assert len(attention) == 11
    for name in attention:
        bleu = shipped[name].card["bleu"]["test2016"]
        for convention in ("cased", "lowercase_13a"):
            assert baseline[convention] < bleu[convention], (name, convention)


def test_the_replaced_transformers_have_lossless_tokenizers() -> None:
    """Both Transformers were replaced by recipe-search picks (byte fallback, no <unk>)."""
    for name in ("en-de-transformer", "en-fr-transformer"):
        assert name in LOSSLESS and name in REPLACED
    assert set(REPLACED) <= set(LOSSLESS)


@pytest.mark.parametrize("name", LOSSLESS)
def test_lossless_models_translate_digits_and_emoji_without_unk(name: str, shipped: dict[str, LoadedModel]) -> None:
    loaded = shipped[name]
    tok = loaded.tokenizer
    assert tok.decode(tok.encode(UNSEEN)) == UNSEEN
    texts = [UNSEEN, "Two dogs play with 3 balls in the snow 🍕."]
    for out in Translator(loaded).translate(texts, beam_size=2, need_weights=False, max_length=60):
        assert UNK_ID not in out.source_ids and UNK_ID not in out.target_ids
        assert out.text.strip() and "⁇" not in out.text and "\ufffd" not in out.text, out.text


@pytest.mark.parametrize("name", REPLACED)
def test_a_replaced_model_was_better_on_val_and_on_every_test_split(name: str, shipped: dict[str, LoadedModel]) -> None:
    """The issue's rule for replacing a shipped model; the old card's numbers stay in history."""
    card = shipped[name].card
    for old in card["history"]:
        assert card["training"]["best_val_bleu"] > old["best_val_bleu"]
        for split in TEST_SPLITS:
            assert card["bleu"][split]["lowercase_13a"] > old["bleu"][split]["lowercase_13a"], split


@pytest.mark.parametrize("name", ALIGNED)
def test_an_aligned_variant_keeps_its_transformers_bleu_and_aligns_better(name: str, shipped: dict[str, LoadedModel]) -> None:
    """Issue 11: the supervised head, scored on the rows it was trained on (the producing step's,
    or the reading step's: card key alignment_reads), reaches F1 0.85 and aligns better than any
    head of the unsupervised Transformer, and the variant's test2016 BLEU stays within 0.5 of
    that Transformer's (both as shipped)."""
    card, base = shipped[name].card, shipped[name.removesuffix("-aligned")].card
    supervised = card["training"]["alignment_supervision"]
    layer, head = supervised["layer"], supervised["head"]
    scores = card["alignment_reads" if supervised.get("rows") == "reads" else "alignment"]
    assert scores["best_head"] == {"layer": layer, "head": head, "f1": scores["f1"][layer][head]}
    assert scores["f1"][layer][head] >= 0.85
    assert scores["f1"][layer][head] > base["alignment"]["best_head"]["f1"]
    bleu = card["bleu"]["test2016"]["lowercase_13a"]
    assert abs(bleu - base["bleu"]["test2016"]["lowercase_13a"]) <= 0.5, bleu


def test_the_en_de_head_trained_on_reading_rows_aligns_by_them(shipped: dict[str, LoadedModel]) -> None:
    """en-de-transformer-aligned's L1H4 was trained on the step that reads each word: read there
    (its default) it links the content words of a plain pair to their translations; read on the
    producing step, as an untrained head would be, it is one word off."""
    loaded = shipped["en-de-transformer-aligned"]
    assert trained_rows(loaded.card, (1, 4)) == "reads" and trained_rows(loaded.card, (2, 7)) == "produces"
    source = "A man in a blue shirt is riding a bicycle down the street."
    target = "Ein Mann in einem blauen Hemd fährt mit dem Fahrrad die Straße hinunter."
    (result,) = Translator(loaded).align([source], [target])
    pairs = {}
    for rows in ("reads", "produces"):
        hard = hard_alignment(word_level_attention(
            loaded.tokenizer, source=Side(source, result.source_ids, "en"), target=Side(target, result.target_ids, "de"),
            cross=result.hypothesis.cross, choice=(1, 4), rows=rows,  # type: ignore[arg-type]
        ))
        pairs[rows] = {(hard.source_words[i], hard.target_words[j]) for i, j in parse_pharaoh(hard.pharaoh)}
    content = {("man", "Mann"), ("blue", "blauen"), ("shirt", "Hemd"), ("riding", "fährt"), ("bicycle", "Fahrrad"), ("street", "Straße")}
    assert content <= pairs["reads"]
    assert len(content & pairs["produces"]) <= 2


LONG = (
    "A young woman in a bright red jacket and blue jeans is walking her two small dogs along the busy street while an "
    "older man with a grey beard sits on a wooden bench reading a newspaper and drinking a cup of hot coffee near the "
    "entrance of the old train station."
)


def test_the_en_de_transformer_keeps_the_second_clause_of_the_long_example(shipped: dict[str, LoadedModel]) -> None:
    """The issue's long sentence: beam search with the card's coverage penalty (tuned on val) keeps
    the older man of the second clause, which plain beam search dropped."""
    translator = Translator(shipped["en-de-transformer"])
    assert translator.coverage_penalty > 0
    (out,) = translator.translate([LONG], beam_size=5, need_weights=False)
    assert "Hund" in out.text and "älterer Mann" in out.text, out.text  # both clauses


@pytest.mark.parametrize("name", ["en-de-transformer", "en-fr-transformer"])
def test_protect_copies_numbers_and_emoji_and_attention_reads_the_output(name: str, shipped: dict[str, LoadedModel]) -> None:
    """Through placeholders the Transformers keep what they lose alone ("Nummer 2" for 42), and
    the attention returned is the model's, teacher-forced, while reading the output shown."""
    translator = Translator(shipped[name])
    text = "The bus number 42 leaves at 7:15. 🚌"
    (result,) = translator.translate_protected([text], beam_size=5)
    out = result.translation
    assert {p.text for p in result.placements} == {"42", "7:15", "🚌"}
    for p in result.placements:
        assert out.text[p.target_start : p.target_end] == p.text, out.text
    (forced,) = translator.align([text], [out.text])
    assert out.target_ids == forced.target_ids
    assert out.hypothesis.cross is not None and forced.hypothesis.cross is not None
    assert torch.equal(out.hypothesis.cross, forced.hypothesis.cross)
    # A sentence with nothing to protect translates exactly as without protect.
    clean = "A man is riding a bicycle."
    (same,) = translator.translate_protected([clean], beam_size=5)
    assert same.placements == [] and same.translation.text == translator.translate([clean], beam_size=5)[0].text
