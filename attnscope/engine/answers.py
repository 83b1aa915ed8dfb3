"""Tensors -> answers and their JSON: token lists, words, rounded attention matrices.

A Transformer's answer holds ~15,000 attention weights, and under load the time spent turning
them into JSON is taken from decoding. So an answer keeps each matrix as the rounded float64
array it is (:func:`matrix`), never as Python floats, and :func:`answer_json` writes the arrays
straight into the JSON (orjson reads their memory; ~0.6 ms an answer where ``tolist()`` plus
pydantic's validation and serialisation took ~2.5 ms). The answers are built with
``model_construct``: every value here is made by our own code with the field's type, so
validation would only copy them once more. The bytes are the same as pydantic's: both write a
float as its shortest round-trip form, and anything else pydantic still serialises (the
attention field's serializer turns arrays into lists there), so the OpenAPI schema is unchanged."""

from __future__ import annotations

import gzip
from typing import Any, cast

import numpy as np
import orjson
import torch
from isal import igzip, isal_zlib
from pydantic import BaseModel

from attnscope.engine.schemas import AttentionKind, TranslationResponse, Word
from attnscope.nn.config import EOS_ID, score_of
from attnscope.repository import LoadedModel
from attnscope.text.pieces import UNK_PIECE, render_pieces
from attnscope.text.tokenizer import BOS_PIECE, EOS_PIECE, group_words
from attnscope.translator import Translation


def matrix(t: torch.Tensor, decimals: int = 6) -> np.ndarray:
    """(L, H, Q, K) attention -> a C-contiguous float64 array rounded to ``decimals`` (float64,
    so 0.123457 is written as such and not as float32's 0.12345699965953827)."""
    return t.detach().to("cpu", torch.float64).round(decimals=decimals).contiguous().numpy()


def answer_json(value: TranslationResponse | list[TranslationResponse]) -> bytes:
    """The JSON of one answer or a list of them: what ``TypeAdapter(...).dump_json`` writes,
    byte for byte, with the attention arrays written without a detour through Python floats.

    One orjson (or pydantic) call holds the GIL throughout, so a large matrix is written a block
    of rows at a time (at most ``_SLAB_FLOATS`` floats) and spliced in, and so is any large extra
    (raw scores, context vectors, explanations, alternatives, the beam tree): the event loop
    (health checks) gets the interpreter between blocks instead of waiting for a whole answer
    (issue 35: health p99 784 ms under big answers)."""
    if isinstance(value, list):
        return b"[" + b",".join(_answer_bytes(answer) for answer in value) + b"]"
    return _answer_bytes(value)


_NUMPY = orjson.OPT_SERIALIZE_NUMPY
_SLAB_FLOATS = 16_384  # a value larger than this is written in blocks of at most this many floats
_PLACEHOLDER = "\x00large\x00"


def _answer_bytes(answer: TranslationResponse) -> bytes:
    large = [
        name for name in _FIELDS
        if name != "attention" and getattr(answer, name) is not None and _leaves(getattr(answer, name)) > _SLAB_FLOATS
    ]  # fmt: skip
    plain = _plain(answer, exclude={"attention", *large})
    attention = plain.get("attention")
    if isinstance(attention, dict) and any(isinstance(a, np.ndarray) and a.size > _SLAB_FLOATS for a in attention.values()):
        large = [name for name in _FIELDS if name == "attention" or name in large]  # in the fields' order
    if not large:
        return orjson.dumps(plain, option=_NUMPY)
    for name in large:
        plain[name] = _PLACEHOLDER
    pieces = orjson.dumps(plain, option=_NUMPY).split(orjson.dumps(_PLACEHOLDER))
    spliced = [pieces[0]]
    for name, piece in zip(large, pieces[1:], strict=True):
        spliced += [_chunked(getattr(answer, name)), piece]
    return b"".join(spliced)


def _leaves(value: object) -> int:
    """About how many numbers ``value`` holds (nested lists are taken to be as wide as their first item)."""
    if isinstance(value, np.ndarray):
        return int(value.size)
    if isinstance(value, list):
        return len(value) * _leaves(value[0]) if value else 0
    if isinstance(value, dict):
        return sum(_leaves(v) for v in value.values())
    if isinstance(value, BaseModel):
        return sum(_leaves(getattr(value, name)) for name in type(value).model_fields)
    return 1


def _chunked(value: object) -> bytes:
    """``value``'s JSON as pydantic writes it, in orjson calls of at most about ``_SLAB_FLOATS``
    numbers each: a 4-d array (attention) in blocks of rows, containers item by item."""
    if _leaves(value) <= _SLAB_FLOATS:
        return orjson.dumps(_jsonable(value), option=_NUMPY)
    if isinstance(value, np.ndarray) and value.ndim == 4:
        return b"[" + b",".join(b"[" + b",".join(_rows(head) for head in layer) + b"]" for layer in value) + b"]"
    if isinstance(value, BaseModel):
        value = {name: getattr(value, name) for name in type(value).model_fields}
    if isinstance(value, dict):
        return b"{" + b",".join(orjson.dumps(k) + b":" + _chunked(v) for k, v in value.items()) + b"}"
    if isinstance(value, list):
        return b"[" + b",".join(_chunked(v) for v in value) + b"]"
    return orjson.dumps(value, option=_NUMPY)  # one large flat array or list: nothing to split


def _rows(head: np.ndarray) -> bytes:
    """(Q, K) weights as ``[[...],...]``, written a block of at most ``_SLAB_FLOATS`` floats at a time."""
    step = max(1, _SLAB_FLOATS // max(1, head.shape[1]))
    blocks = (orjson.dumps(head[i : i + step], option=_NUMPY)[1:-1] for i in range(0, head.shape[0], step))
    return b"[" + b",".join(blocks) + b"]"


def _jsonable(value: object) -> object:
    """A small value as orjson can write it: models as pydantic's JSON-mode dump."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    return value


def gzip_bytes(body: bytes, level: int) -> bytes:
    """``body`` as a gzip stream (no timestamp, so equal answers are equal bytes). Levels 1-3 go
    through ISA-L's igzip, 4-9 through zlib. For a Transformer answer of 144 KB, igzip's level 1
    took 0.41 ms here against zlib's 1.39 ms at its level 1, and came out smaller (52.5 against
    54.8 KB); every answer is compressed, so under load this is CPU given back to decoding."""
    if level <= isal_zlib.ISAL_BEST_COMPRESSION:
        return igzip.compress(body, level, mtime=0)
    return gzip.compress(body, level, mtime=0)


def _plain(answer: TranslationResponse, exclude: set[str]) -> dict[str, Any]:
    """The answer as a dict in field order: pydantic's JSON-mode dump of every field but those
    ``exclude``d, which stay as they are (the attention: arrays, or lists in an answer made elsewhere)."""
    fields = answer.model_dump(mode="json", exclude=exclude)
    return {
        name: getattr(answer, name) if name in exclude else fields[name]
        for name in _FIELDS
        if name in exclude or name in fields  # a field pydantic leaves out (exclude_if) stays out
    }


_FIELDS = tuple(TranslationResponse.model_fields)


def words(pieces: list[str], unk_spans: list[str] | None = None) -> list[Word]:
    """Pieces grouped into words, each word's text readable: byte pieces joined into their
    characters (a word never ends inside a character's bytes: only a "▁" piece opens a word),
    and each ``<unk>`` shown as the original text behind it (``unk_spans``, in order) or "⁇"."""
    spans = iter(unk_spans or [])
    shown = [next(spans, piece) if piece == UNK_PIECE else piece for piece in pieces]
    return [
        Word.model_construct(text=render_pieces([shown[i] for i in group], marker=""), tokens=group)
        for group in group_words(pieces)
    ]


def to_response(
    loaded: LoadedModel,
    result: Translation,
    timing_ms: float = 0.0,
    *,
    kinds: tuple[str, ...] | None = None,
    decimals: int = 6,
) -> TranslationResponse:
    """One answer; ``kinds`` picks the attention kinds returned (default: all the model has)."""
    return TranslationResponse.model_construct(
        **response_fields(loaded, result, kinds=kinds, decimals=decimals), timing_ms=float(timing_ms)
    )


def response_fields(
    loaded: LoadedModel, result: Translation, *, kinds: tuple[str, ...] | None = None, decimals: int = 6
) -> dict[str, Any]:
    """The fields every answer has (but ``timing_ms``): tokens, words, the attention of
    ``kinds`` (default: all the model has), log-probabilities."""
    tok, hyp = loaded.tokenizer, result.hypothesis
    source_tokens = tok.pieces(result.source_ids)
    target_tokens = tok.pieces(result.target_ids)
    attention: dict[AttentionKind, np.ndarray] = {}
    for kind in cast(tuple[AttentionKind, ...], loaded.config.attention_kinds):
        weights = getattr(hyp, kind)
        if weights is not None and (kinds is None or kind in kinds):
            attention[kind] = matrix(weights, decimals)
    return dict(
        model=loaded.id,
        translation=result.text,
        source_tokens=source_tokens,
        target_tokens=target_tokens,
        decoder_input_tokens=[BOS_PIECE, *target_tokens[:-1]],
        eos_token=EOS_PIECE,
        finished=bool(result.target_ids) and result.target_ids[-1] == EOS_ID,
        source_words=words(source_tokens, tok.unk_spans(result.source_text)),
        target_words=words(target_tokens),
        attention=attention,  # arrays: see the module's docstring
        score=score_of(loaded.config),
        logprob=round(float(hyp.score), 6),
        target_logprobs=[round(float(x), 6) for x in hyp.token_logprobs],
    )
