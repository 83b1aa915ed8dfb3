"""Tiny random Hugging Face models with tokenizers trained here, saved with ``save_pretrained``:
what ``attnscope import`` reads, built without a network."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sentencepiece as spm
import torch

from attnscope.testing import TINY_PAIRS

SENTENCES = [s for pair in TINY_PAIRS for s in pair] * 3


def train_sentencepiece(path: Path, vocab_size: int = 130, model_type: str = "unigram") -> list[str]:
    """A SentencePiece model (``model_type`` unigram or bpe) of the tiny corpus written to
    ``path``; returns its ordinary pieces."""
    buffer = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(SENTENCES), model_writer=buffer, vocab_size=vocab_size,
        character_coverage=1.0, hard_vocab_limit=False, num_threads=1, minloglevel=2, model_type=model_type,
    )
    path.write_bytes(buffer.getvalue())
    sp = spm.SentencePieceProcessor(model_proto=buffer.getvalue())
    return [sp.id_to_piece(i) for i in range(sp.get_piece_size()) if not (sp.is_control(i) or sp.is_unknown(i))]


def _perturb_norms(model: torch.nn.Module, seed: int) -> None:
    """Layer norms away from (1, 0), so that a norm in the wrong place shows in the logits."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(torch.randn(p.shape, generator=gen) * 0.2)


def marian_folder(
    folder: Path,
    *,
    d_model: int = 48,
    heads: int = 3,
    encoder_layers: int = 3,
    decoder_layers: int = 2,
    ff_dim: int = 80,
    activation: str = "swish",
    seed: int = 0,
    decoder_heads: int | None = None,
    decoder_ff_dim: int | None = None,
) -> Path:
    """A tiny Marian (post-norm, sinusoidal positions, eos 0, pad last) with its tokenizer;
    ``decoder_heads``/``decoder_ff_dim``: a decoder sized unlike the encoder."""
    from transformers import MarianConfig, MarianMTModel, MarianTokenizer

    folder.mkdir(parents=True, exist_ok=True)
    pieces = train_sentencepiece(folder / "source.spm")
    (folder / "target.spm").write_bytes((folder / "source.spm").read_bytes())
    vocab = {"</s>": 0, "<unk>": 1, **{p: i + 2 for i, p in enumerate(pieces)}}
    vocab["<pad>"] = len(vocab)
    (folder / "vocab.json").write_text(json.dumps(vocab))
    tokenizer = MarianTokenizer(
        str(folder / "source.spm"), str(folder / "target.spm"), str(folder / "vocab.json"),
        source_lang="en", target_lang="de",
    )
    pad = vocab["<pad>"]
    config = MarianConfig(
        vocab_size=len(vocab), decoder_vocab_size=len(vocab), d_model=d_model,
        encoder_layers=encoder_layers, decoder_layers=decoder_layers,
        encoder_attention_heads=heads, decoder_attention_heads=decoder_heads or heads,
        encoder_ffn_dim=ff_dim, decoder_ffn_dim=decoder_ff_dim or ff_dim, max_position_embeddings=64,
        pad_token_id=pad, eos_token_id=0, decoder_start_token_id=pad, forced_eos_token_id=0,
        activation_function=activation, scale_embedding=True, init_std=0.3,
        dropout=0.0, attention_dropout=0.0, activation_dropout=0.0,
    )
    torch.manual_seed(seed)
    model = MarianMTModel(config).eval()
    _perturb_norms(model, seed)
    with torch.no_grad():
        model.final_logits_bias.normal_(0.0, 0.5)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


# The fairseq-derived families' (M2M100, NLLB, mBART) shared tiny sizes and ids, and no dropout.
FAIRSEQ_SIZES = dict(
    encoder_attention_heads=3, decoder_attention_heads=3, encoder_ffn_dim=80, decoder_ffn_dim=80,
    max_position_embeddings=64, pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2,
)
NO_DROPOUT = dict(dropout=0.0, attention_dropout=0.0, activation_dropout=0.0, encoder_layerdrop=0.0, decoder_layerdrop=0.0)


def m2m100_folder(folder: Path, *, seed: int = 0) -> Path:
    """A tiny M2M100 (pre-norm, final norms, fairseq's sinusoidal positions, language codes)
    of odd sizes: d_model 48, 3 heads, 2 encoder and 3 decoder layers, relu."""
    from transformers import M2M100Config, M2M100ForConditionalGeneration, M2M100Tokenizer

    folder.mkdir(parents=True, exist_ok=True)
    pieces = train_sentencepiece(folder / "sentencepiece.bpe.model")
    vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3, **{p: i + 4 for i, p in enumerate(pieces)}}
    (folder / "vocab.json").write_text(json.dumps(vocab))
    tokenizer = M2M100Tokenizer(
        str(folder / "vocab.json"), str(folder / "sentencepiece.bpe.model"), src_lang="en", tgt_lang="de"
    )
    config = M2M100Config(
        vocab_size=max(tokenizer.lang_code_to_id.values()) + 1 + 8,  # the codes, then 8 "madeup words"
        d_model=48, encoder_layers=2, decoder_layers=3,
        **FAIRSEQ_SIZES,
        activation_function="relu", scale_embedding=True, init_std=0.3,
        **NO_DROPOUT,
    )
    torch.manual_seed(seed)
    model = M2M100ForConditionalGeneration(config).eval()
    _perturb_norms(model, seed)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def t5_folder(folder: Path, *, gated: bool = False, seed: int = 0) -> Path:
    """A tiny T5 (relative position bias in 8 buckets up to distance 16, RMS norms, unscaled
    attention, tied output rescaled) of odd sizes: d_model 48, 3 heads, 3 encoder and 2 decoder
    layers, 6 output rows no piece names (as t5-small's 32128 against its 32100 pieces);
    ``gated``: T5 v1.1 / mT5's gated-GELU feed-forward, heads of 20 (inner size 60, not 48)."""
    from transformers import T5Config, T5ForConditionalGeneration, T5Tokenizer

    folder.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(SENTENCES), model_writer=buffer, vocab_size=130, character_coverage=1.0,
        hard_vocab_limit=False, num_threads=1, minloglevel=2, pad_id=0, eos_id=1, unk_id=2, bos_id=-1,
    )  # T5's numbering: pad 0, eos 1, unk 2
    (folder / "spiece.model").write_bytes(buffer.getvalue())
    tokenizer = T5Tokenizer.from_pretrained(str(folder), extra_ids=4)
    config = T5Config(
        vocab_size=len(tokenizer) + 6, d_model=48, d_kv=20 if gated else 16, d_ff=80, num_layers=3,
        num_decoder_layers=2, num_heads=3, relative_attention_num_buckets=8, relative_attention_max_distance=16,
        feed_forward_proj="gated-gelu" if gated else "relu", tie_word_embeddings=not gated,
        dropout_rate=0.0, initializer_factor=3.0, pad_token_id=0, eos_token_id=1, decoder_start_token_id=0,
    )
    torch.manual_seed(seed)
    model = T5ForConditionalGeneration(config).eval()
    _perturb_norms(model, seed)
    with torch.no_grad():  # logits of a few units (T5 initialises the embedding with std 3 here)
        model.shared.weight.mul_(0.05)
        model.get_output_embeddings().weight.mul_(0.05 if gated else 1.0)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def nllb_folder(folder: Path, *, seed: int = 1) -> Path:
    """A tiny NLLB: an M2M100 (pre-norm, final norms) with NLLB's tokenizer (its 202 language
    codes are tokens like ``deu_Latn``), d_model 48, 3 heads, 3 encoder and 2 decoder layers."""
    from transformers import M2M100Config, M2M100ForConditionalGeneration, NllbTokenizer
    from transformers.models.nllb.tokenization_nllb import FAIRSEQ_LANGUAGE_CODES

    folder.mkdir(parents=True, exist_ok=True)
    # BPE, as NLLB's own: transformers 5 reads the file into a BPE tokenizer (a unigram model segments otherwise)
    train_sentencepiece(folder / "sentencepiece.bpe.model", model_type="bpe")
    tokenizer = NllbTokenizer.from_pretrained(
        str(folder), src_lang="eng_Latn", tgt_lang="deu_Latn", extra_special_tokens=FAIRSEQ_LANGUAGE_CODES
    )
    config = M2M100Config(
        vocab_size=len(tokenizer), d_model=48, encoder_layers=3, decoder_layers=2,
        **FAIRSEQ_SIZES,
        activation_function="relu", scale_embedding=True, init_std=0.3,
        **NO_DROPOUT,
    )
    torch.manual_seed(seed)
    model = M2M100ForConditionalGeneration(config).eval()
    _perturb_norms(model, seed)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def mbart50_folder(folder: Path, *, seed: int = 2) -> Path:
    """A tiny mBART-50 (pre-norm, embedding and final norms, learned positions from row 2, GELU,
    unscaled embeddings, language codes like ``de_DE`` in front), d_model 48, 3 heads, 2 encoder
    and 3 decoder layers, an output bias."""
    from transformers import MBart50Tokenizer, MBartConfig, MBartForConditionalGeneration

    folder.mkdir(parents=True, exist_ok=True)
    train_sentencepiece(folder / "sentencepiece.bpe.model")
    tokenizer = MBart50Tokenizer.from_pretrained(str(folder), src_lang="en_XX", tgt_lang="de_DE")
    config = MBartConfig(
        vocab_size=len(tokenizer), d_model=48, encoder_layers=2, decoder_layers=3,
        **FAIRSEQ_SIZES,
        activation_function="gelu", scale_embedding=False, init_std=0.3,
        **NO_DROPOUT,
    )
    torch.manual_seed(seed)
    model = MBartForConditionalGeneration(config).eval()
    _perturb_norms(model, seed)
    with torch.no_grad():
        model.final_logits_bias.normal_(0.0, 0.5)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def byte_level_tokenizer(vocab_size: int = 300) -> Any:
    """BART's kind of tokenizer, trained here: byte-level BPE with <s> 0, <pad> 1, </s> 2,
    <unk> 3 and BART's template ``<s> text </s>``, as ``PreTrainedTokenizerFast``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=["<s>", "<pad>", "</s>", "<unk>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(SENTENCES, trainer)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A </s>", special_tokens=[("<s>", 0), ("</s>", 2)])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>", unk_token="<unk>",
        clean_up_tokenization_spaces=False,
    )


def bart_folder(folder: Path, *, seed: int = 3, decoder_heads: int = 6, decoder_ff_dim: int = 96) -> Path:
    """A tiny BART (post-norm, embedding norm, learned positions from row 2) whose tokenizer
    is only a byte-level BPE ``tokenizer.json``, its decoder sized unlike its encoder: 3 encoder
    heads and 80 wide against ``decoder_heads`` and ``decoder_ff_dim``, 2 encoder and 3 decoder layers."""
    from transformers import BartConfig, BartForConditionalGeneration

    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = byte_level_tokenizer()
    config = BartConfig(
        vocab_size=len(tokenizer), d_model=48, encoder_layers=2, decoder_layers=3,
        **{**FAIRSEQ_SIZES, "decoder_attention_heads": decoder_heads, "decoder_ffn_dim": decoder_ff_dim},
        activation_function="gelu", scale_embedding=False, init_std=0.3, forced_eos_token_id=2,
        **NO_DROPOUT,
    )
    torch.manual_seed(seed)
    model = BartForConditionalGeneration(config).eval()
    _perturb_norms(model, seed)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def json_only(folder: Path) -> Path:
    """``folder`` with its SentencePiece files removed: the tokenizer is its tokenizer.json
    alone, as ``PreTrainedTokenizerFast`` saves it."""
    for name in ("spiece.model", "source.spm", "target.spm", "sentencepiece.bpe.model"):
        (folder / name).unlink(missing_ok=True)
    assert (folder / "tokenizer.json").is_file()
    return folder


@dataclass(frozen=True)
class Kind:
    """A family as the tests build it: its builder, the model id it is served as, and the
    language pair to import it with (multilingual families)."""

    build: Callable[[Path], Path]
    model_id: str
    pair: tuple[str, str] | None = None


def language_id(tokenizer: Any, code: str) -> int:
    """The original's id of a language code (M2M100's "de" is the token ``__de__``)."""
    if hasattr(tokenizer, "get_lang_id"):
        return int(tokenizer.get_lang_id(code))
    return int(tokenizer.convert_tokens_to_ids(code))


def language_piece(family: str, code: str) -> str:
    return f"__{code}__" if family == "m2m100" else code


KINDS = {
    "marian": Kind(marian_folder, "en-de-marian"),
    "m2m100": Kind(m2m100_folder, "en-de-m2m100", ("en", "de")),
    "nllb": Kind(nllb_folder, "en-de-nllb", ("eng_Latn", "deu_Latn")),
    "mbart50": Kind(mbart50_folder, "en-de-mbart50", ("en_XX", "de_DE")),
    "t5": Kind(t5_folder, "en-de-t5"),
    "t5gated": Kind(lambda folder: t5_folder(folder, gated=True), "en-de-t5gated"),
}
