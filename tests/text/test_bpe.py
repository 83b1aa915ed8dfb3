"""attnscope.text.bpe against transformers' own tokenizer over the same tokenizer.json.

Tiny tokenizers are trained here with the ``tokenizers`` library (no network), wrapped by
``transformers.PreTrainedTokenizerFast`` as a user's saved tokenizer would be, and compared with
:class:`JsonTokenizer` on ids, decoded text, display pieces and id lookups."""

from __future__ import annotations

import pytest

tokenizers = pytest.importorskip("tokenizers")
transformers = pytest.importorskip("transformers")

from tokenizers import decoders, models, pre_tokenizers, trainers  # noqa: E402

from attnscope.text.bpe import JsonTokenizer, display_bytes  # noqa: E402
from attnscope.text.interface import Languages, SpecialIds, Tokenizer  # noqa: E402
from attnscope.text.pieces import render_pieces  # noqa: E402
from attnscope.text.tokenizer import group_words  # noqa: E402

CORPUS = [
    "the cat sat on the mat",
    "a dog is in the house",
    "Die Katze saß auf der Matte",
    "ein Hund ist im Haus",
    "two men are playing football in the park",
    "zwei Männer spielen Fußball im Park",
] * 4
TEXTS = [
    "the cat sat on the mat",
    "Zwei Männer spielen im Park",
    "a dog   with  spaces ",
    "ünïcödé and 🍕 pizza",
    "Fußball",
]
SPECIALS = ["<s>", "<pad>", "</s>", "<unk>"]  # BART's order: bos 0, pad 1, eos 2, unk 3
BART_IDS = SpecialIds(pad=1, unk=3, bos=0, eos=2)


def byte_level() -> tokenizers.Tokenizer:
    tok = tokenizers.Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=320,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(CORPUS, trainer)
    return tok


def unigram() -> tokenizers.Tokenizer:
    tok = tokenizers.Tokenizer(models.Unigram())
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    trainer = trainers.UnigramTrainer(
        vocab_size=90, special_tokens=["<pad>", "</s>", "<unk>"], unk_token="<unk>"
    )
    tok.train_from_iterator(CORPUS, trainer)
    return tok


def fast(tok: tokenizers.Tokenizer) -> object:
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, clean_up_tokenization_spaces=False
    )


@pytest.fixture(scope="module")
def bpe_pair() -> tuple[JsonTokenizer, object]:
    tok = byte_level()
    return JsonTokenizer(tok.to_str(), specials=BART_IDS), fast(tok)


@pytest.fixture(scope="module")
def unigram_pair() -> tuple[JsonTokenizer, object]:
    tok = unigram()
    ids = SpecialIds(
        pad=tok.token_to_id("<pad>"),
        unk=tok.token_to_id("<unk>"),
        bos=0,
        eos=tok.token_to_id("</s>"),
    )
    return JsonTokenizer(tok.to_str(), specials=ids), fast(tok)


@pytest.mark.parametrize("text", TEXTS)
def test_byte_level_ids_and_text_are_transformers(
    bpe_pair: tuple[JsonTokenizer, object], text: str
) -> None:
    ours, theirs = bpe_pair
    ids = ours.encode(text)
    assert ids == theirs.encode(text, add_special_tokens=False)  # type: ignore[attr-defined]
    assert ours.decode(ids) == theirs.decode(ids, skip_special_tokens=True) == text  # type: ignore[attr-defined]
    assert ours.decode([BART_IDS.bos, *ids, BART_IDS.eos, BART_IDS.pad]) == text


@pytest.mark.parametrize("text", TEXTS)
def test_unigram_ids_and_text_are_transformers(
    unigram_pair: tuple[JsonTokenizer, object], text: str
) -> None:
    ours, theirs = unigram_pair
    ids = ours.encode(text)
    assert ids == theirs.encode(text, add_special_tokens=False)  # type: ignore[attr-defined]
    if ours.unk_id not in ids:
        assert ours.decode(ids) == theirs.decode(ids, skip_special_tokens=True)  # type: ignore[attr-defined]


def test_unigram_shows_unknowns_and_their_text(unigram_pair: tuple[JsonTokenizer, object]) -> None:
    ours, _ = unigram_pair
    ids = ours.encode("the cat 🍕")
    assert ours.unk_id in ids
    assert "⁇" in ours.decode(ids)  # never silently dropped
    assert ours.unk_spans("the cat 🍕") == ["🍕"]


def test_byte_level_pieces_spell_the_text_in_sentencepiece_form(
    bpe_pair: tuple[JsonTokenizer, object],
) -> None:
    """Display pieces use ▁ for word starts and <0xNN> for partial characters, so the text
    layer's word grouping and rendering work on them unchanged."""
    ours, theirs = bpe_pair
    for text in TEXTS:
        ids = ours.encode(text)
        pieces = ours.pieces(ids)
        assert render_pieces(pieces) == text
        words = [
            render_pieces([pieces[i] for i in group], marker="") for group in group_words(pieces)
        ]
        assert [w for w in words if w] == text.split()
        for piece, i in zip(pieces, ids, strict=True):
            assert ours.id_of(piece) == i  # the display spelling finds the id again
            raw = theirs.convert_ids_to_tokens(i)  # type: ignore[attr-defined]
            assert ours.id_of(raw) == i  # and so does the vocabulary's own
    assert ours.pieces([BART_IDS.bos, BART_IDS.eos]) == ["<s>", "</s>"]
    assert ours.id_of("no such piece here") is None
    assert ours.unk_spans("🍕 anything") == []
    assert display_bytes(" \xf0\x9f".encode("latin-1")) == "▁<0xF0><0x9F>"


def test_renumbered_ids_follow_the_order(bpe_pair: tuple[JsonTokenizer, object]) -> None:
    """An import puts pad/unk/bos/eos first: attnscope id i is the file's id order[i]."""
    plain, theirs = bpe_pair
    size = plain.vocab_size
    order = [1, 3, 0, 2, *range(4, size)]
    ours = JsonTokenizer(plain.backend.to_str(), specials=SpecialIds(), order=order)
    text = "the cat sat on the mat"
    original = theirs.encode(text, add_special_tokens=False)  # type: ignore[attr-defined]
    assert [order[i] for i in ours.encode(text)] == original
    assert ours.decode([2, *ours.encode(text), 3]) == text
    assert ours.id_of("<s>") == 2 and ours.id_of("</s>") == 3 and ours.id_of("<pad>") == 0
    assert ours.id_of("Ġthe") == order.index(theirs.convert_tokens_to_ids("Ġthe"))  # type: ignore[attr-defined]


def test_saves_and_loads_back(tmp_path, bpe_pair: tuple[JsonTokenizer, object]) -> None:
    plain, _ = bpe_pair
    order = [1, 3, 0, 2, *range(4, plain.vocab_size)]
    ours = JsonTokenizer(plain.backend.to_str(), specials=SpecialIds(), order=order)
    ours.save(tmp_path / "tokenizer.json")
    back = JsonTokenizer.load(tmp_path / "tokenizer.json")
    assert back.order == order and back.special_ids == SpecialIds()
    assert back.encode(TEXTS[1]) == ours.encode(TEXTS[1])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tokenizer.json", "tokenizer_meta.json"]


def test_language_codes_prefix_and_hide(tmp_path) -> None:
    tok = byte_level()
    tok.add_special_tokens(["__en__", "__de__"])
    languages = Languages(
        source_prefix=("__en__",), target_prefix=("__de__",), hidden=("__en__", "__de__")
    )
    ours = JsonTokenizer(tok.to_str(), specials=BART_IDS, languages=languages)
    assert ours.language_codes() == ["de", "en"]
    en, de = ours.id_of("__en__"), ours.id_of("__de__")
    assert ours.source_prefix_ids() == [en] and ours.target_prefix_ids() == [de]
    flipped = ours.for_languages("de", "en")
    assert flipped.source_prefix_ids() == [de] and flipped.target_prefix_ids() == [en]
    assert ours.decode([de, *ours.encode("the cat"), BART_IDS.eos]) == "the cat"
    with pytest.raises(ValueError, match="valid codes: de, en"):
        ours.for_languages("fr", None)


def test_every_kind_is_the_interface(bpe_pair: tuple[JsonTokenizer, object]) -> None:
    from attnscope.testing import tiny_tokenizer

    sp = tiny_tokenizer()
    assert isinstance(sp, Tokenizer) and isinstance(bpe_pair[0], Tokenizer)
    assert sp.language_codes() == [] and sp.for_languages(None, None) is sp
    with pytest.raises(ValueError, match="no language codes"):
        sp.for_languages("de", None)
    piece = sp.pieces(sp.encode("a dog"))[0]
    assert sp.id_of(piece) == sp.encode("a dog")[0] and sp.id_of("no such piece") is None
