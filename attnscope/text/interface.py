"""What the rest of attnscope may ask of a tokenizer: :class:`Tokenizer`.

Three kinds implement it: :class:`~attnscope.text.tokenizer.SentencePieceTokenizer` (the shipped
models' own SentencePiece model, ids as SentencePiece numbers them),
:class:`~attnscope.text.vocab_tokenizer.VocabTokenizer` (a SentencePiece segmenter with a
vocabulary of its own, Marian/M2M100/NLLB/T5 imports) and
:class:`~attnscope.text.bpe.JsonTokenizer` (a Hugging Face ``tokenizer.json`` read with the
``tokenizers`` library: byte-level BPE for BART/GPT-2/Llama-3/Qwen, unigram for T5/Marian
saved by ``PreTrainedTokenizerFast``). Serving, decoding and explanations use only what is
declared here, never an implementation's internals (no ``tok.sp``).

Conventions every implementation keeps:

- ``encode`` gives the ids of the text alone: no BOS/EOS and no language code (those come from
  ``source_prefix_ids``/``target_prefix_ids`` and the caller's EOS).
- ``pieces`` are display strings in SentencePiece's spelling, whatever the segmenter: a piece
  that starts a word begins with ``▁`` (U+2581), a byte that is not a whole character is
  ``<0xNN>``, and BOS/EOS are ``<s>``/``</s>``. :func:`~attnscope.text.tokenizer.group_words`
  and :func:`~attnscope.text.pieces.render_pieces` work on them unchanged.
- ``id_of`` takes a piece as ``pieces`` shows it (or as the vocabulary spells it) and gives
  None for a string that is not one piece of the vocabulary.
- ``decode`` drops pad, BOS, EOS and language codes and shows an unknown piece as "⁇", never
  silently dropping it.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from attnscope.nn.config import BOS_ID, EOS_ID, PAD_ID, UNK_ID

T = TypeVar("T", bound="Tokenizer")


@dataclass(frozen=True)
class SpecialIds:
    """The ids of the four pieces decoding needs (the shipped models and every encoder-decoder
    import: 0/1/2/3, see :mod:`attnscope.hf.vocab`)."""

    pad: int = PAD_ID
    unk: int = UNK_ID
    bos: int = BOS_ID
    eos: int = EOS_ID


@dataclass(frozen=True)
class Languages:
    """The language pieces of a multilingual model: the source's code put before every source,
    the target's forced as the first output token, and every code (dropped when decoding)."""

    source_prefix: tuple[str, ...] = ()
    target_prefix: tuple[str, ...] = ()
    hidden: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name in ("source_prefix", "target_prefix", "hidden"):
            object.__setattr__(self, name, tuple(getattr(self, name)))

    @property
    def codes(self) -> dict[str, str]:
        """Each language code a request may name -> its piece: M2M100's ``__de__`` is "de",
        NLLB's ``deu_Latn`` and mBART-50's ``de_DE`` are their own codes."""
        return {_code_of(piece): piece for piece in self.hidden}

    def code_of(self, pieces: tuple[str, ...]) -> str | None:
        """The code of a one-piece prefix (the card's default pair), else None."""
        return _code_of(pieces[0]) if len(pieces) == 1 else None

    def choose(self, source: str | None, target: str | None) -> Languages:
        """These languages with another source and/or target code (None: keep this one's);
        ValueError naming the valid codes for a code it does not know."""
        codes = self.codes
        for code in (source, target):
            if code is not None and code not in codes:
                known = ", ".join(sorted(codes)) or "none: this model has no language codes"
                raise ValueError(f"unknown language code {code!r}; valid codes: {known}")
        return dataclasses.replace(
            self,
            source_prefix=self.source_prefix if source is None else (codes[source],),
            target_prefix=self.target_prefix if target is None else (codes[target],),
        )


def _code_of(piece: str) -> str:
    return (
        piece[2:-2] if len(piece) > 4 and piece.startswith("__") and piece.endswith("__") else piece
    )


NO_LANGUAGE_CODES = (
    "this model has no language codes (only M2M100, NLLB and mBART imports have them)"
)


class Tokenizer(ABC):
    """Text <-> ids for one model (see the module docstring for the conventions)."""

    #: the file name the tokenizer is saved under in a model folder
    file_name: str = "tokenizer.model"

    # ---- identity -------------------------------------------------------------------
    @property
    @abstractmethod
    def vocab_size(self) -> int:
        """Number of ids (the model's embedding rows)."""

    @property
    def special_ids(self) -> SpecialIds:
        """pad/unk/bos/eos ids."""
        return SpecialIds()

    @property
    def pad_id(self) -> int:
        return self.special_ids.pad

    @property
    def unk_id(self) -> int:
        return self.special_ids.unk

    @property
    def bos_id(self) -> int:
        return self.special_ids.bos

    @property
    def eos_id(self) -> int:
        return self.special_ids.eos

    # ---- text <-> ids ---------------------------------------------------------------
    @abstractmethod
    def encode(self, text: str) -> list[int]:
        """Ids of ``text`` (no BOS, EOS or language code)."""

    @abstractmethod
    def decode(self, ids: Iterable[int]) -> str:
        """Detokenised text (pad, BOS, EOS and language codes dropped, unknowns as "⁇")."""

    @abstractmethod
    def pieces(self, ids: Iterable[int]) -> list[str]:
        """Display strings of ``ids`` (``▁`` word starts, ``<0xNN>`` bytes, ``<s>``/``</s>``)."""

    @abstractmethod
    def id_of(self, piece: str) -> int | None:
        """The id of one piece (as ``pieces`` shows it or as the vocabulary spells it); None
        when ``piece`` is not a piece of the vocabulary."""

    def unk_spans(self, text: str) -> list[str]:
        """The original text behind each unknown id of ``encode(text)``, in order (empty for a
        tokenizer without unknowns, e.g. byte fallback or byte-level BPE)."""
        return []

    # ---- languages ------------------------------------------------------------------
    def language_codes(self) -> list[str]:
        """The codes ``for_languages`` takes, sorted; empty for a model without codes."""
        return []

    def for_languages(self: T, source: str | None, target: str | None) -> T:
        """This tokenizer with another source and/or target language code (None: the saved
        one's). ValueError naming the valid codes, or saying there are none."""
        if source is None and target is None:
            return self
        raise ValueError(NO_LANGUAGE_CODES)

    def source_prefix_ids(self) -> list[int]:
        """Ids every source starts with (a multilingual model's source language code)."""
        return []

    def target_prefix_ids(self) -> list[int]:
        """Ids every output is forced to start with (a multilingual model's target code)."""
        return []

    # ---- files ----------------------------------------------------------------------
    @abstractmethod
    def save(self, path: str | Path) -> None:
        """Write the tokenizer to ``path`` (and any file it needs beside it), each file
        written to a temporary name and renamed into place."""
