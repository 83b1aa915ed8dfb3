"""A thin wrapper around SentencePiece with the ids every model here assumes:
pad = 0, unk = 1, bos = 2, eos = 3. One joint model per language pair, so source and target
share a vocabulary (the Transformer ties its embeddings).

Round trip: a byte-fallback model (trained with ``normalization_rule_name="identity"`` and
``remove_extra_whitespaces=False``, see ``Tokenizer.train``) gives ``decode(encode(x)) == x`` for
every ``str`` that is valid Unicode, exactly (no NFKC, whitespace kept). The one character
SentencePiece cannot give back is its own space marker U+2581 ("▁"); ``encode`` spells that one
as its UTF-8 byte pieces. Older models (NFKC, no byte fallback) map unknown characters to
``<unk>``, which ``decode`` renders as "⁇" rather than dropping it."""

from __future__ import annotations

import io
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import sentencepiece as spm

from attnscope.nn.config import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from attnscope.text.interface import Tokenizer as TokenizerInterface
from attnscope.text.pieces import WORD_START, render_pieces

EOS_PIECE = "</s>"
BOS_PIECE = "<s>"


class SentencePieceTokenizer(TokenizerInterface):
    """The shipped models' tokenizer: a SentencePiece model whose own ids are the model's."""

    file_name = "tokenizer.model"

    def __init__(self, model_proto: bytes) -> None:
        self._proto = model_proto
        self.sp = spm.SentencePieceProcessor(model_proto=model_proto)
        ids = (self.sp.pad_id(), self.sp.unk_id(), self.sp.bos_id(), self.sp.eos_id())
        if ids != (PAD_ID, UNK_ID, BOS_ID, EOS_ID):
            raise ValueError(f"tokenizer has special ids {ids}; expected pad/unk/bos/eos = 0/1/2/3")
        self.byte_fallback = self.sp.is_byte(int(self.sp.piece_to_id("<0xE2>")))
        # U+2581 as byte pieces (see the module docstring); empty without byte fallback.
        self._marker_ids = [int(self.sp.piece_to_id(f"<0x{b:02X}>")) for b in WORD_START.encode()]
        if not self.byte_fallback:
            self._marker_ids = []
        # SentencePiece's dummy prefix: "a" is encoded as "▁a", and decoding drops that space.
        first = self.sp.encode("a", out_type=str)
        self._dummy_prefix = bool(first) and str(first[0]).startswith(WORD_START)
        # Models that collapse whitespace (remove_extra_whitespaces, the older ones) drop every
        # leading space when decoding, as SentencePiece does; lossless ones keep them.
        self._collapses_spaces = self.sp.encode("a  b", out_type=str).count(WORD_START) == 0

    @classmethod
    def load(cls, path: str | Path) -> SentencePieceTokenizer:
        return cls(Path(path).read_bytes())

    def save(self, path: str | Path) -> None:
        """Written to a temporary file beside ``path`` and renamed over it, so a process reading
        ``path`` meanwhile sees the old file or the new one, never a part of it."""
        path = Path(path)
        partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
        partial.write_bytes(self._proto)
        os.replace(partial, path)

    @classmethod
    def train(
        cls,
        sentences: Iterable[str],
        vocab_size: int,
        *,
        model_type: str = "unigram",
        seed: int = 1,
        byte_fallback: bool = False,
    ) -> SentencePieceTokenizer:
        """Train a joint model on ``sentences`` (e.g. source and target training text together).

        ``byte_fallback``: characters outside the vocabulary become UTF-8 byte pieces instead of
        ``<unk>``, digits are split into single pieces, and text is not normalised (identity rule,
        whitespace kept), so ``decode(encode(x)) == x`` for any text."""
        buffer = io.BytesIO()
        spm.set_random_generator_seed(seed)
        extra: dict[str, Any] = {}
        if byte_fallback:
            extra = dict(
                byte_fallback=True,
                split_digits=True,
                normalization_rule_name="identity",
                remove_extra_whitespaces=False,
            )
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(sentences),
            model_writer=buffer,
            vocab_size=vocab_size,
            model_type=model_type,
            character_coverage=1.0,
            pad_id=PAD_ID,
            unk_id=UNK_ID,
            bos_id=BOS_ID,
            eos_id=EOS_ID,
            hard_vocab_limit=False,
            num_threads=2,
            minloglevel=2,
            **extra,
        )
        return cls(buffer.getvalue())

    @property
    def vocab_size(self) -> int:
        return int(self.sp.get_piece_size())

    def encode(self, text: str) -> list[int]:
        """Subword ids of ``text`` (no EOS)."""
        if not self._marker_ids or WORD_START not in text:
            return list(self.sp.encode(text, out_type=int))
        first, *rest = text.split(WORD_START)
        ids = list(self.sp.encode(first, out_type=int))
        for part in rest:
            ids += self._marker_ids + self._encode_continuation(part)
        return ids

    def _encode_continuation(self, text: str) -> list[int]:
        """Ids of ``text`` that continues a word (so without the dummy prefix): its first word
        character by character (pieces, or bytes where a character is not a piece), the rest
        as SentencePiece splits it."""
        head, space, tail = text.partition(" ")
        ids: list[int] = []
        for char in head:
            piece = int(self.sp.piece_to_id(char))
            if piece != UNK_ID and not self.sp.is_control(piece):
                ids.append(piece)
            else:
                ids += [int(self.sp.piece_to_id(f"<0x{b:02X}>")) for b in char.encode()]
        if space:
            rest = list(self.sp.encode(space + tail, out_type=int))
            # " tail" is "▁" (the dummy prefix, a piece of its own) then "▁tail..."
            ids += rest[1:] if self.sp.id_to_piece(rest[0]) == WORD_START else rest
        return ids

    def id_of(self, piece: str) -> int | None:
        """The id of ``piece`` (``<s>``/``</s>`` included); None if it is not a piece."""
        found = int(self.sp.piece_to_id(piece))
        return found if str(self.sp.id_to_piece(found)) == piece else None

    def decode(self, ids: Iterable[int]) -> str:
        """Detokenised text. pad, <s> and </s> are dropped; byte pieces are joined into UTF-8
        characters; <unk> is rendered as "⁇" (never silently dropped)."""
        pieces = [str(self.sp.id_to_piece(int(i))) for i in ids if int(i) not in (PAD_ID, BOS_ID, EOS_ID)]
        text = render_pieces(pieces)
        if self._collapses_spaces:
            return text.lstrip(" ")
        if self._dummy_prefix and pieces and pieces[0].startswith(WORD_START):
            text = text[1:]
        return text

    def unk_spans(self, text: str) -> list[str]:
        """The original text behind each ``<unk>`` in ``encode(text)``, in order (e.g. ``["🍕🍕"]``),
        so the words shown for a source can name what the model could not see. Empty for a
        byte-fallback model, which has no unknown characters."""
        if self.byte_fallback:
            return []
        found = self.sp.encode_as_offset_mapping(text)
        return [text[a:b] for i, (a, b) in zip(found["ids"], found["offsets"], strict=True) if i == UNK_ID]

    def pieces(self, ids: Iterable[int]) -> list[str]:
        """Display strings for ids, with ``</s>`` and ``<s>`` for EOS and BOS."""
        out = []
        for i in ids:
            if i == EOS_ID:
                out.append(EOS_PIECE)
            elif i == BOS_ID:
                out.append(BOS_PIECE)
            else:
                out.append(str(self.sp.id_to_piece(int(i))))
        return out


def group_words(pieces: list[str]) -> list[list[int]]:
    """Group token indices into words: a piece starting with "▁" opens a new word, and special
    pieces (``</s>``, ``<s>``) are words of their own. Returns e.g. ``[[0, 1], [2], [3]]``."""
    specials = (EOS_PIECE, BOS_PIECE)
    groups: list[list[int]] = []
    for i, piece in enumerate(pieces):
        after_special = bool(groups) and pieces[groups[-1][-1]] in specials
        if not groups or piece in specials or after_special or piece.startswith(WORD_START):
            groups.append([i])
        else:
            groups[-1].append(i)
    return groups


# The name the training code, the tests and older scripts use for the SentencePiece kind; code
# that takes any tokenizer names attnscope.text.interface.Tokenizer instead.
Tokenizer = SentencePieceTokenizer
