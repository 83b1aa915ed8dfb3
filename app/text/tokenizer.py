"""A thin wrapper around SentencePiece with the ids every model here assumes:
pad = 0, unk = 1, bos = 2, eos = 3. One joint model per language pair, so source and target
share a vocabulary (the Transformer ties its embeddings)."""

from __future__ import annotations

import io
from collections.abc import Iterable
from pathlib import Path

import sentencepiece as spm

from app.nn.config import BOS_ID, EOS_ID, PAD_ID, UNK_ID

EOS_PIECE = "</s>"
BOS_PIECE = "<s>"
WORD_START = "\u2581"  # SentencePiece's "▁" marks a piece that begins a word


class Tokenizer:
    def __init__(self, model_proto: bytes) -> None:
        self._proto = model_proto
        self.sp = spm.SentencePieceProcessor(model_proto=model_proto)
        ids = (self.sp.pad_id(), self.sp.unk_id(), self.sp.bos_id(), self.sp.eos_id())
        if ids != (PAD_ID, UNK_ID, BOS_ID, EOS_ID):
            raise ValueError(f"tokenizer has special ids {ids}; expected pad/unk/bos/eos = 0/1/2/3")

    @classmethod
    def load(cls, path: str | Path) -> Tokenizer:
        return cls(Path(path).read_bytes())

    def save(self, path: str | Path) -> None:
        Path(path).write_bytes(self._proto)

    @classmethod
    def train(
        cls,
        sentences: Iterable[str],
        vocab_size: int,
        *,
        model_type: str = "unigram",
        seed: int = 1,
        byte_fallback: bool = False,
    ) -> Tokenizer:
        """Train a joint model on ``sentences`` (e.g. source and target training text together).

        ``byte_fallback``: characters outside the vocabulary become UTF-8 byte pieces instead of
        ``<unk>``, digits are split into single pieces, and text is not normalised (identity rule,
        whitespace kept), so ``decode(encode(x)) == x`` for any text."""
        buffer = io.BytesIO()
        spm.set_random_generator_seed(seed)
        extra: dict[str, object] = {}
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
        return list(self.sp.encode(text, out_type=int))

    def decode(self, ids: Iterable[int]) -> str:
        """Detokenised text; special ids are dropped."""
        return str(self.sp.decode([i for i in ids if i > EOS_ID]))

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
