"""Renumber a Hugging Face vocabulary into attnscope's special ids, and export its tokenizer.

attnscope's decoders and text layer assume pad 0, unk 1, bos (the decoder's first input) 2 and
eos 3. A Hugging Face model numbers them its own way (Marian: eos 0, unk 1, pad last, and the
decoder starts from pad; M2M100: bos 0, pad 1, eos 2, starting from eos). :class:`Renumbering`
puts those four first and every other id after them in the original order; the rows of the
embedding, the output layer and its bias move with them. When the decoder's start token is also
pad or eos, attnscope's id 2 is a copy of that row whose output logit is -inf: the original has
the token once, so the softmax over the output stays exactly the original's.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from attnscope.hf import ImportFailure
from attnscope.nn.config import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from attnscope.text.bpe import JsonTokenizer
from attnscope.text.interface import SpecialIds, Tokenizer
from attnscope.text.vocab_tokenizer import Languages, VocabTokenizer

SPM_FILES = ("source.spm", "sentencepiece.bpe.model", "spiece.model", "tokenizer.model")


@dataclass(frozen=True)
class Renumbering:
    """``order[i]`` is the Hugging Face id of attnscope id ``i``; ``copies`` the attnscope ids
    that repeat a row already present (never predicted: their logit is -inf)."""

    order: tuple[int, ...]
    copies: tuple[int, ...]

    @classmethod
    def of(cls, *, pad: int, unk: int, eos: int, start: int, vocab_size: int) -> Renumbering:
        if len({pad, unk, eos}) < 3:
            raise ImportFailure(f"pad, unk and eos must be distinct ids, got {pad}, {unk}, {eos}")
        specials = {PAD_ID: pad, UNK_ID: unk, BOS_ID: start, EOS_ID: eos}
        head = [specials[i] for i in range(4)]
        rest = [i for i in range(vocab_size) if i not in head]
        copies = (BOS_ID,) if start in (pad, unk, eos) else ()
        return cls(tuple(head + rest), copies)

    @property
    def to_hf(self) -> Tensor:
        """(V',) the Hugging Face id of each attnscope id."""
        return torch.tensor(self.order, dtype=torch.long)

    def from_hf(self, ids: list[int]) -> list[int]:
        """Hugging Face ids -> attnscope ids (a copied row maps back to its original)."""
        inverse: dict[int, int] = {}
        for ours, theirs in enumerate(self.order):
            if ours not in self.copies:
                inverse.setdefault(theirs, ours)
        return [inverse[i] for i in ids]

    def apply(self, state: dict[str, Tensor]) -> dict[str, Tensor]:
        """The vocabulary rows of ``state`` (embedding, untied output layer, output bias)
        in attnscope's order; the copies' bias -inf."""
        index = self.to_hf
        out = dict(state)
        for name in ("embed.weight", "output.weight", "output_bias"):
            if name in out:
                out[name] = out[name].index_select(0, index).contiguous()
        for copy in self.copies:
            out["output_bias"][copy] = float("-inf")
        return out


def find_sentencepiece(folder: Path) -> Path | None:
    """The SentencePiece model of a ``save_pretrained`` tokenizer folder (source side first)."""
    for name in SPM_FILES:
        if (folder / name).is_file():
            return folder / name
    return None


def check_tokenizer_files(folder: Path) -> None:
    """ImportFailure unless ``folder`` holds a tokenizer attnscope reads: a SentencePiece model
    or what a ``tokenizers`` tokenizer is built from (``tokenizer.json``, or BPE's ``vocab.json``
    + ``merges.txt``)."""
    if find_sentencepiece(folder) is None and not (
        (folder / "tokenizer.json").is_file() or (folder / "merges.txt").is_file()
    ):
        raise ImportFailure(
            f"{folder} has no tokenizer attnscope reads: neither a SentencePiece model ({', '.join(SPM_FILES)}) "
            "nor a tokenizer.json (save the tokenizer with save_pretrained beside the model)"
        )


def export_tokenizer(
    hf_tokenizer: Any, folder: Path, numbering: Renumbering, languages: Languages | None = None
) -> Tokenizer:
    """attnscope's tokenizer for ``hf_tokenizer``, in attnscope's order: its SentencePiece model
    with its pieces (:class:`VocabTokenizer`; language-code prefixes such as Marian's ``>>de<<``
    kept as prefixes), or else its ``tokenizers`` backend (:class:`JsonTokenizer`: what a
    ``tokenizer.json``-only folder has, byte-level BPE or unigram); a multilingual model's
    ``languages`` (or a source prefix such as BART's ``<s>``)."""
    spm_file = find_sentencepiece(folder)
    if spm_file is not None:
        named = hf_tokenizer.convert_ids_to_tokens(list(numbering.order))
        # rows no piece names (t5-small has 28 past its tokenizer) get a name that no text spells
        pieces = [f"<unused_{hf_id}>" if p is None else str(p) for p, hf_id in zip(named, numbering.order, strict=True)]
        prefixes = [str(p) for p in getattr(hf_tokenizer, "supported_language_codes", []) or []]
        return VocabTokenizer(spm_file.read_bytes(), pieces, prefixes=prefixes, languages=languages)
    backend = getattr(hf_tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise ImportFailure(f"{folder}: the tokenizer has neither a SentencePiece model nor a tokenizer.json")
    return JsonTokenizer(backend.to_str(), specials=SpecialIds(), order=numbering.order, languages=languages)


def source_prefix(hf_tokenizer: Any) -> tuple[str, ...]:
    """The pieces the original puts before every source (BART's ``<s>``; none for Marian and
    T5). ImportFailure when the source does not end with EOS alone."""
    template = [int(i) for i in hf_tokenizer("").input_ids]
    if not template or template[-1] != hf_tokenizer.eos_token_id:
        raise ImportFailure("the original's source does not end with its EOS; attnscope puts EOS last")
    return tuple(str(p) for p in hf_tokenizer.convert_ids_to_tokens(template[:-1]))


def language_pieces(hf_tokenizer: Any, pair: tuple[str, str]) -> tuple[Languages, int]:
    """The language pieces of a multilingual tokenizer (M2M100, NLLB, mBART) for ``pair``, and
    the original's id of the target's code (``generate``'s ``forced_bos_token_id``). Sets the
    tokenizer's source language. ImportFailure for a language it does not know."""
    source, target = pair
    codes = dict(getattr(hf_tokenizer, "lang_code_to_id", None) or {})
    if not codes:  # NLLB: the codes are special tokens of their own (transformers 5: "extra")
        vocab = hf_tokenizer.get_vocab()
        listed = getattr(hf_tokenizer, "extra_special_tokens", None) or getattr(hf_tokenizer, "additional_special_tokens", None)
        named = [str(t) for t in listed] if isinstance(listed, list) else []
        codes = {t: vocab[t] for t in (*named, source, target) if t in vocab}
    missing = [lang for lang in (source, target) if lang not in codes]
    if missing:
        known = ", ".join(sorted(codes)[:12])
        raise ImportFailure(
            f"unknown language code(s) {', '.join(missing)} for this model (it knows e.g. {known}); "
            "name the pair with --pair SOURCE-TARGET"
        )
    hf_tokenizer.src_lang = source
    suffix = list(getattr(hf_tokenizer, "suffix_tokens", []))
    if suffix != [hf_tokenizer.eos_token_id]:
        raise ImportFailure(
            "the source ends with a language code (mBART-cc25's MBartTokenizer, or legacy NLLB); attnscope reads "
            "codes in front only (mBART-50's MBart50Tokenizer and NLLB's current tokenizer put them there)"
        )
    prefix = [str(p) for p in hf_tokenizer.convert_ids_to_tokens(list(getattr(hf_tokenizer, "prefix_tokens", [])))]
    every = [str(p) for p in hf_tokenizer.convert_ids_to_tokens(sorted(set(codes.values())))]
    forced = int(codes[target])
    return Languages(tuple(prefix), (str(hf_tokenizer.convert_ids_to_tokens(forced)),), tuple(every)), forced
