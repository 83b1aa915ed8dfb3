"""A Hugging Face ``tokenizer.json`` as an attnscope :class:`~attnscope.text.interface.Tokenizer`.

Read with the ``tokenizers`` library alone (no torch, no ``transformers`` at serving time). It
covers what ``PreTrainedTokenizerFast`` saves: byte-level BPE (GPT-2, RoBERTa, BART, Llama-3,
Qwen: pieces such as ``Ġthe``) and SentencePiece-style models (unigram for T5/Marian, BPE with
byte fallback for Llama-2: pieces such as ``▁the`` and ``<0xE2>``).

Two things sit beside the file, in ``tokenizer_meta.json``:

- ``order``: the model's numbering when an import renumbered the vocabulary (attnscope id
  ``i`` is the ``tokenizer.json`` id ``order[i]``, ``-1`` for an embedding row no piece names;
  see :mod:`attnscope.hf.vocab`); absent when the ids are the file's own.
- ``specials`` (pad/unk/bos/eos ids in the model's numbering) and ``languages`` (a
  multilingual model's code pieces, :class:`~attnscope.text.interface.Languages`).

Pieces are shown in SentencePiece's spelling (see the interface): a byte-level piece
``ĠðŁ`` (a space and the first two bytes of 🍕) is shown as ``▁<0xF0><0x9F>``.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer as Backend

from attnscope.text.interface import Languages, SpecialIds, Tokenizer
from attnscope.text.pieces import UNK_TEXT, WORD_START, piece_byte

JSON_FILE = "tokenizer.json"
META_FILE = "tokenizer_meta.json"
BOS_PIECE, EOS_PIECE = "<s>", "</s>"


@lru_cache(maxsize=1)
def byte_table() -> dict[int, str]:
    """GPT-2's byte -> printable character map (the byte-level alphabet)."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    table, extra = {b: chr(b) for b in printable}, 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return table


@lru_cache(maxsize=1)
def char_table() -> dict[str, int]:
    return {c: b for b, c in byte_table().items()}


def _mentions_byte_level(node: Any) -> bool:
    if isinstance(node, dict):
        return node.get("type") == "ByteLevel" or any(
            _mentions_byte_level(v) for v in node.values()
        )
    if isinstance(node, list):
        return any(_mentions_byte_level(v) for v in node)
    return False


def display_bytes(data: bytes) -> str:
    """Bytes in SentencePiece's spelling: whole UTF-8 characters as text (a space as ``▁``,
    U+2581 itself as its bytes), every other byte as ``<0xNN>``."""
    out, i = [], 0
    while i < len(data):
        for width in (1, 2, 3, 4):
            try:
                char = data[i : i + width].decode("utf-8")
            except UnicodeDecodeError:
                continue
            if char != WORD_START:
                out.append(WORD_START if char == " " else char)
                i += width
                break
        else:
            out.append(f"<0x{data[i]:02X}>")
            i += 1
    return "".join(out)


def _bytes_of_display(piece: str) -> bytes:
    """The inverse of :func:`display_bytes`."""
    out = bytearray()
    i = 0
    while i < len(piece):
        byte = piece_byte(piece[i : i + 6])
        if byte is not None:
            out.append(byte)
            i += 6
        else:
            out += (" " if piece[i] == WORD_START else piece[i]).encode()
            i += 1
    return bytes(out)


class JsonTokenizer(Tokenizer):
    """A ``tokenizer.json`` (see the module docstring); ``order`` renumbers its ids."""

    file_name = JSON_FILE

    def __init__(
        self,
        json_text: str,
        *,
        specials: SpecialIds,
        order: Iterable[int] | None = None,
        languages: Languages | None = None,
    ) -> None:
        self._json = json_text
        self.backend = Backend.from_str(json_text)
        spec = json.loads(json_text)
        self.byte_level = _mentions_byte_level(spec.get("decoder")) or _mentions_byte_level(
            spec.get("pre_tokenizer")
        )
        size = self.backend.get_vocab_size(with_added_tokens=True)
        self.order = None if order is None else [int(i) for i in order]
        self._to_backend = self.order or list(range(size))
        # the file's id -> ours; the first row wins, bos last: an import whose decoder starts
        # from eos or pad has bos as a copy of that row (attnscope.hf.vocab.Renumbering)
        rows = [i for i in range(len(self._to_backend)) if i != specials.bos] + [specials.bos]
        self._from_backend: dict[int, int] = {}
        for ours in rows:
            if 0 <= ours < len(self._to_backend) and self._to_backend[ours] >= 0:
                self._from_backend.setdefault(self._to_backend[ours], ours)
        self._specials = specials
        for name, value in dataclasses.asdict(specials).items():
            if not 0 <= value < len(self._to_backend):
                raise ValueError(
                    f"{name} id {value} is outside the vocabulary of {len(self._to_backend)}"
                )
        self.languages = languages or Languages()
        for piece in (
            *self.languages.source_prefix,
            *self.languages.target_prefix,
            *self.languages.hidden,
        ):
            if self._piece_id(piece) is None:
                raise ValueError(f"language piece {piece!r} is not in the vocabulary")

    # ---- files ----------------------------------------------------------------------
    @classmethod
    def load(cls, path: str | Path) -> JsonTokenizer:
        """``path``: the ``tokenizer.json``; ``tokenizer_meta.json`` beside it."""
        path = Path(path)
        meta = json.loads((path.parent / META_FILE).read_text(encoding="utf-8"))
        if not isinstance(meta, dict) or not isinstance(meta.get("specials"), dict):
            raise ValueError(f"{META_FILE} has no 'specials' object")
        languages = (
            Languages(**meta["languages"]) if isinstance(meta.get("languages"), dict) else None
        )
        return cls(
            path.read_text(encoding="utf-8"),
            specials=SpecialIds(**{k: int(v) for k, v in meta["specials"].items()}),
            order=meta.get("order"),
            languages=languages,
        )

    def save(self, path: str | Path) -> None:
        """``tokenizer.json`` to ``path`` and ``tokenizer_meta.json`` beside it."""
        path = Path(path)
        meta: dict[str, Any] = {"specials": dataclasses.asdict(self._specials)}
        if self.order is not None:
            meta["order"] = self.order
        if self.languages != Languages():
            meta["languages"] = dataclasses.asdict(self.languages)
        for target, text in (
            (path, self._json),
            (path.parent / META_FILE, json.dumps(meta, ensure_ascii=False)),
        ):
            partial = target.with_name(f".{target.name}.{os.getpid()}.partial")
            partial.write_text(text, encoding="utf-8")
            os.replace(partial, target)

    # ---- the interface ----------------------------------------------------------------
    @property
    def vocab_size(self) -> int:
        return len(self._to_backend)

    @property
    def special_ids(self) -> SpecialIds:
        return self._specials

    def _raw(self, i: int) -> str | None:
        """The ``tokenizer.json`` spelling of attnscope id ``i`` (None: a row no piece names)."""
        theirs = self._to_backend[i] if 0 <= i < len(self._to_backend) else -1
        return None if theirs < 0 else self.backend.id_to_token(theirs)

    def encode(self, text: str) -> list[int]:
        """Ids of ``text`` (no specials; a piece the model has no row for is unk)."""
        found = self.backend.encode(text, add_special_tokens=False).ids
        return [self._from_backend.get(i, self._specials.unk) for i in found]

    def decode(self, ids: Iterable[int]) -> str:
        s = self._specials
        dropped = {s.pad, s.bos, s.eos, *self._hidden_ids(), *self.source_prefix_ids()}
        raw = []
        for i in (int(i) for i in ids):
            if i in dropped:
                continue
            piece = None if i == s.unk else self._raw(i)
            raw.append(UNK_TEXT if piece is None else piece)
        decoder = self.backend.decoder
        return decoder.decode(raw) if decoder is not None else "".join(raw)

    def pieces(self, ids: Iterable[int]) -> list[str]:
        out = []
        for i in (int(i) for i in ids):
            if i == self._specials.eos:
                out.append(EOS_PIECE)
            elif i == self._specials.bos:
                out.append(BOS_PIECE)
            else:
                raw = self._raw(i)
                out.append(f"<unused_{i}>" if raw is None else self._display(raw, i))
        return out

    def _display(self, raw: str, i: int) -> str:
        if not self.byte_level or self.backend.token_to_id(raw) is None or self._is_added(raw):
            return raw
        table = char_table()
        if any(c not in table for c in raw):
            return raw
        return display_bytes(bytes(table[c] for c in raw))

    def _is_added(self, raw: str) -> bool:
        return any(t.content == raw for t in self.backend.get_added_tokens_decoder().values())

    def id_of(self, piece: str) -> int | None:
        special = {EOS_PIECE: self._specials.eos, BOS_PIECE: self._specials.bos}.get(piece)
        if special is not None:
            return special
        theirs = None
        if self.byte_level and not self._is_added(piece):  # the display spelling first: "ß" is
            table = byte_table()  # the character, not the byte-level alphabet's byte 0xDF
            theirs = self.backend.token_to_id("".join(table[b] for b in _bytes_of_display(piece)))
        if theirs is None:
            theirs = self.backend.token_to_id(piece)
        return None if theirs is None else self._from_backend.get(theirs)

    def unk_spans(self, text: str) -> list[str]:
        found = self.backend.encode(text, add_special_tokens=False)
        unk = self._specials.unk
        return [
            text[a:b]
            for i, (a, b) in zip(found.ids, found.offsets, strict=True)
            if self._from_backend.get(i, unk) == unk
        ]

    # ---- languages ------------------------------------------------------------------
    def _piece_id(self, piece: str) -> int | None:
        """The id of a piece as the file spells it (``<s>`` is the file's own, not bos)."""
        theirs = self.backend.token_to_id(piece)
        return None if theirs is None else self._from_backend.get(theirs)

    def _hidden_ids(self) -> list[int]:
        return [i for i in (self._piece_id(p) for p in self.languages.hidden) if i is not None]

    def language_codes(self) -> list[str]:
        return sorted(self.languages.codes)

    def for_languages(self, source: str | None, target: str | None) -> JsonTokenizer:
        clone = copy.copy(self)
        clone.languages = self.languages.choose(source, target)
        return clone

    def source_prefix_ids(self) -> list[int]:
        return [i for i in (self._piece_id(p) for p in self.languages.source_prefix) if i is not None]

    def target_prefix_ids(self) -> list[int]:
        return [i for i in (self._piece_id(p) for p in self.languages.target_prefix) if i is not None]
