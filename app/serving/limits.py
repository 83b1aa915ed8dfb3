"""The limits a request must keep before any decoding starts: text length in characters and
tokens (the model's positional range included), batch size, and the output budget."""

from __future__ import annotations

import torch

from app.config import Settings
from app.decoding.output import max_target_length
from app.serving.errors import InvalidInput, Loc
from app.serving.registry import ServedModel

# The decoders' default output budget: ratio × longest source (with EOS) + offset tokens.
BUDGET_RATIO, BUDGET_OFFSET = 1.5, 10


def check_batch(settings: Settings, texts: list[str]) -> None:
    if len(texts) > settings.max_batch:
        raise InvalidInput(("body", "texts"), f"has {len(texts)} texts; the limit is {settings.max_batch}")


def check_text(settings: Settings, served: ServedModel, text: str, loc: Loc, *, empty_ok: bool = False) -> int:
    """Enforce the character and token limits; returns the token count with EOS."""
    if len(text) > settings.max_chars:
        raise InvalidInput(loc, f"has {len(text)} characters; the limit is {settings.max_chars}")
    n = len(served.loaded.tokenizer.encode(text))
    if n == 0 and not empty_ok:
        raise InvalidInput(loc, "has no tokens (only whitespace, control or zero-width characters)")
    if n > served.max_source_tokens:
        raise InvalidInput(loc, f"has {n} tokens; the limit is {served.max_source_tokens}")
    return n + 1


def check_coverage(served: ServedModel, coverage_penalty: float | None) -> None:
    """A coverage penalty needs cross-attention to measure coverage with."""
    if coverage_penalty and "cross" not in served.loaded.config.attention_kinds:
        raise InvalidInput(
            ("body", "coverage_penalty"),
            f"must be 0 for {served.loaded.id}: it has no cross-attention to measure coverage with",
        )


def output_budget(served: ServedModel, lengths: list[int], max_length: int | None) -> int:
    """Most output tokens for sources of ``lengths`` (EOS included): ``max_length`` if given,
    else the decoders' default; never past the model's positions."""
    cap = served.max_decode_length
    if max_length is not None:
        return max_length if cap is None else min(max_length, cap)
    return max_target_length(torch.tensor(lengths), BUDGET_RATIO, BUDGET_OFFSET, cap)
