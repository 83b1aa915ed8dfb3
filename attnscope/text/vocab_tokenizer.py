"""A SentencePiece segmenter with a vocabulary of its own: the tokenizer of imported models.

Marian, M2M100/NLLB and T5 segment text with a SentencePiece model but number the pieces with
a vocabulary of their own (Marian's ``vocab.json``, fairseq's shifted ids, T5's extra ids).
:mod:`attnscope.hf` renumbers that vocabulary into attnscope's special ids (pad 0, unk 1, bos 2,
eos 3, then the rest in the original order) and writes the pieces in that order to
``vocab.json`` beside ``tokenizer.model``; this class reads the pair and implements
:class:`~attnscope.text.interface.Tokenizer`. It needs ``sentencepiece`` only, never
``transformers``.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import sentencepiece as spm

from attnscope.nn.config import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from attnscope.text.interface import Languages, Tokenizer

__all__ = ["VOCAB_FILE", "Languages", "VocabTokenizer"]  # Languages: where attnscope.hf looks for it
from attnscope.text.pieces import render_pieces

VOCAB_FILE = "vocab.json"
EOS_PIECE = "</s>"
BOS_PIECE = "<s>"


class VocabTokenizer(Tokenizer):
    """SentencePiece pieces looked up in ``pieces`` (index = attnscope id). A piece outside the
    vocabulary is ``<unk>``, as in the original tokenizers."""

    file_name = "tokenizer.model"

    def __init__(
        self, model_proto: bytes, pieces: list[str], *, prefixes: Iterable[str] = (), languages: Languages | None = None
    ) -> None:
        if len(pieces) < 4:
            raise ValueError("a vocabulary needs pad, unk, bos and eos")
        self._proto = model_proto
        self.sp = spm.SentencePieceProcessor(model_proto=model_proto)
        self._pieces = list(pieces)
        self._ids: dict[str, int] = {}
        for i, piece in enumerate(self._pieces):
            if i not in (PAD_ID, BOS_ID, EOS_ID):
                self._ids.setdefault(piece, i)
        # pieces the original puts in front of the text when it starts with them (Marian's >>de<<)
        self.prefixes = tuple(p for p in prefixes if p in self._ids)
        self.languages = languages or Languages()
        for piece in (*self.languages.source_prefix, *self.languages.target_prefix, *self.languages.hidden):
            if piece not in self._ids:
                raise ValueError(f"language piece {piece!r} is not in the vocabulary")
        self._hidden = {self._ids[p] for p in self.languages.hidden}

    @classmethod
    def load(cls, path: str | Path) -> VocabTokenizer:
        """``path``: the SentencePiece model; its vocabulary is ``vocab.json`` beside it."""
        path = Path(path)
        meta = json.loads((path.parent / VOCAB_FILE).read_text(encoding="utf-8"))
        if not isinstance(meta, dict) or not isinstance(meta.get("pieces"), list):
            raise ValueError(f"{VOCAB_FILE} has no 'pieces' list")
        languages = Languages(**meta["languages"]) if isinstance(meta.get("languages"), dict) else None
        return cls(path.read_bytes(), [str(p) for p in meta["pieces"]], prefixes=meta.get("prefixes", ()), languages=languages)

    def save(self, path: str | Path) -> None:
        """The SentencePiece model to ``path`` and the vocabulary to ``vocab.json`` beside it."""
        path = Path(path)
        meta: dict[str, Any] = {"pieces": self._pieces, "prefixes": list(self.prefixes)}
        if self.languages != Languages():
            meta["languages"] = dataclasses.asdict(self.languages)
        for target, data in ((path, self._proto), (path.parent / VOCAB_FILE, json.dumps(meta, ensure_ascii=False).encode())):
            partial = target.with_name(f".{target.name}.{os.getpid()}.partial")
            partial.write_bytes(data)
            os.replace(partial, target)

    @property
    def vocab_size(self) -> int:
        return len(self._pieces)

    def id_of(self, piece: str) -> int | None:
        """The id of ``piece`` (``<s>``/``</s>`` included); None when it is not in the vocabulary."""
        special = {EOS_PIECE: EOS_ID, BOS_PIECE: BOS_ID}.get(piece)
        return special if special is not None else self._ids.get(piece)

    def _lookup(self, piece: str) -> int:
        """The id of a piece of the segmentation (UNK_ID when it is not in the vocabulary)."""
        return self._ids.get(piece, UNK_ID)

    def encode(self, text: str) -> list[int]:
        """Ids of ``text`` (no EOS): a leading prefix piece (e.g. ``>>de<<``) as itself, then the
        SentencePiece segmentation looked up in the vocabulary."""
        head: list[int] = []
        for prefix in self.prefixes:
            if text.startswith(prefix):
                head, text = [self._ids[prefix]], text[len(prefix) :]
                break
        return head + [self._lookup(str(p)) for p in self.sp.encode(text, out_type=str)]

    def source_prefix_ids(self) -> list[int]:
        """Ids every source starts with (M2M100/NLLB: the source language's code)."""
        return [self._ids[p] for p in self.languages.source_prefix]

    def language_codes(self) -> list[str]:
        """The codes ``for_languages`` takes, sorted (none: a model without language codes)."""
        return sorted(self.languages.codes)

    def for_languages(self, source: str | None, target: str | None) -> VocabTokenizer:
        """This tokenizer with another source and/or target language (None: the saved one's);
        ValueError naming the valid codes for one it does not know. Shares everything else."""
        clone = copy.copy(self)
        clone.languages = self.languages.choose(source, target)
        return clone

    def target_prefix_ids(self) -> list[int]:
        """Ids every output is forced to start with (M2M100/NLLB: the target language's code)."""
        return [self._ids[p] for p in self.languages.target_prefix]

    def decode(self, ids: Iterable[int]) -> str:
        """Detokenised text; pad, ``<s>``, ``</s>`` and language codes dropped, ``<unk>`` shown
        as "⁇"."""
        dropped = {PAD_ID, BOS_ID, EOS_ID, *self._hidden}
        pieces = [self._pieces[int(i)] for i in ids if int(i) not in dropped]
        return render_pieces(pieces).strip(" ")

    def unk_spans(self, text: str) -> list[str]:
        """The original text behind each ``<unk>`` of ``encode(text)``, in order."""
        found = self.sp.encode_as_offset_mapping(text)
        pairs = zip(found["pieces"], found["offsets"], strict=True)
        return [text[a:b] for piece, (a, b) in pairs if self._lookup(str(piece)) == UNK_ID]

    def pieces(self, ids: Iterable[int]) -> list[str]:
        """Display strings for ids, with ``</s>`` and ``<s>`` for EOS and BOS."""
        names = {EOS_ID: EOS_PIECE, BOS_ID: BOS_PIECE}
        return [names.get(int(i), self._pieces[int(i)]) for i in ids]
