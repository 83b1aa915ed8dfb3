"""Tensors -> JSON-ready answers: token lists, words, rounded attention matrices."""

from __future__ import annotations

from typing import cast

import torch

from app.nn.config import EOS_ID, score_of
from app.repository import LoadedModel
from app.serving.schemas import AttentionKind, Matrix, TranslationResponse, Word
from app.text.pieces import UNK_PIECE, render_pieces
from app.text.tokenizer import BOS_PIECE, EOS_PIECE, group_words
from app.translator import Translation


def matrix(t: torch.Tensor, decimals: int = 6) -> Matrix:
    """(L, H, Q, K) attention -> nested lists rounded to ``decimals`` (via float64, so 0.123457
    prints as such and not as float32's 0.12345699965953827)."""
    return cast(Matrix, t.detach().to("cpu", torch.float64).round(decimals=decimals).tolist())


def words(pieces: list[str], unk_spans: list[str] | None = None) -> list[Word]:
    """Pieces grouped into words, each word's text readable: byte pieces joined into their
    characters (a word never ends inside a character's bytes: only a "▁" piece opens a word),
    and each ``<unk>`` shown as the original text behind it (``unk_spans``, in order) or "⁇"."""
    spans = iter(unk_spans or [])
    shown = [next(spans, piece) if piece == UNK_PIECE else piece for piece in pieces]
    return [Word(text=render_pieces([shown[i] for i in group], marker=""), tokens=group) for group in group_words(pieces)]


def to_response(
    loaded: LoadedModel,
    result: Translation,
    timing_ms: float = 0.0,
    *,
    kinds: tuple[str, ...] | None = None,
    decimals: int = 6,
) -> TranslationResponse:
    """One answer; ``kinds`` picks the attention kinds returned (default: all the model has)."""
    tok, hyp = loaded.tokenizer, result.hypothesis
    source_tokens = tok.pieces(result.source_ids)
    target_tokens = tok.pieces(result.target_ids)
    attention: dict[AttentionKind, Matrix] = {}
    for kind in cast(tuple[AttentionKind, ...], loaded.config.attention_kinds):
        weights = getattr(hyp, kind)
        if weights is not None and (kinds is None or kind in kinds):
            attention[kind] = matrix(weights, decimals)
    return TranslationResponse(
        model=loaded.id,
        translation=result.text,
        source_tokens=source_tokens,
        target_tokens=target_tokens,
        decoder_input_tokens=[BOS_PIECE, *target_tokens[:-1]],
        eos_token=EOS_PIECE,
        finished=bool(result.target_ids) and result.target_ids[-1] == EOS_ID,
        source_words=words(source_tokens, tok.unk_spans(result.source_text)),
        target_words=words(target_tokens),
        attention=attention,
        score=score_of(loaded.config),
        logprob=round(hyp.score, 6),
        target_logprobs=[round(x, 6) for x in hyp.token_logprobs],
        timing_ms=timing_ms,
    )
