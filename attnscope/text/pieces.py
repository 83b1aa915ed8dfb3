"""SentencePiece pieces -> text, for decoding and for the words the API returns.

A byte-fallback model spells a character that is not in its vocabulary as the pieces of its
UTF-8 bytes, ``<0xF0><0x9F><0x8D><0x95>`` for 🍕. Rendering joins each run of byte pieces into
bytes and decodes them as UTF-8 (a run that is not valid UTF-8, which only a model's own output
can produce, shows one U+FFFD per broken byte, as SentencePiece's own decoder does). ``<unk>``, which models without byte fallback
produce, is rendered as ``⁇`` (SentencePiece's own unknown surface) so a lost span stays visible.
"""

from __future__ import annotations

import codecs
import re

WORD_START = "\u2581"  # SentencePiece's "▁" marks a piece that begins a word
UNK_PIECE = "<unk>"
UNK_TEXT = "\u2047"  # "⁇"
_BYTE_PIECE = re.compile(r"<0x([0-9A-F]{2})>")
_BYTE_SPLIT = re.compile(r"(<0x[0-9A-F]{2}>)")


def _one_mark_per_byte(err: UnicodeError) -> tuple[str, int]:
    if not isinstance(err, UnicodeDecodeError):
        raise err
    return "\ufffd" * (err.end - err.start), err.end


codecs.register_error("attnscope-replace-bytes", _one_mark_per_byte)


def _text_of(run: bytearray) -> str:
    return run.decode("utf-8", errors="attnscope-replace-bytes")


def piece_byte(piece: str) -> int | None:
    """The byte a byte-fallback piece stands for (``"<0x41>"`` -> 65), or None for other pieces."""
    match = _BYTE_PIECE.fullmatch(piece)
    return int(match.group(1), 16) if match else None


def render_pieces(pieces: list[str], *, marker: str = " ") -> str:
    """The text ``pieces`` spell: byte runs decoded as UTF-8, ``▁`` replaced by ``marker``
    (a space for text, ``""`` for a word's label), ``<unk>`` as ``⁇``. The word marker is only
    replaced in ordinary pieces: a ``▁`` spelled in bytes is the character U+2581 itself. A
    piece that mixes text and bytes (a byte-level BPE piece shown as ``▁<0xF0><0x9F>``, see
    :mod:`attnscope.text.bpe`) is read as its parts."""
    out: list[str] = []
    run = bytearray()
    for piece in (part for whole in pieces for part in _parts(whole)):
        byte = piece_byte(piece)
        if byte is not None:
            run.append(byte)
            continue
        if run:
            out.append(_text_of(run))
            run.clear()
        out.append(UNK_TEXT if piece == UNK_PIECE else piece.replace(WORD_START, marker))
    if run:
        out.append(_text_of(run))
    return "".join(out)


def _parts(piece: str) -> list[str]:
    """``piece`` itself, or its text and byte parts when it mixes them."""
    if "<0x" not in piece or piece_byte(piece) is not None:
        return [piece]
    return [part for part in _BYTE_SPLIT.split(piece) if part]
