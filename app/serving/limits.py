"""The limits a request must keep before any decoding starts: text length in characters and
tokens (the model's positional range included), batch size, the output budget, and the cost
budget (attention weights the decode would keep) that admission control enforces."""

from __future__ import annotations

import unicodedata

from app.config import Settings
from app.decoding.output import target_budgets
from app.nn.config import ModelConfig, TransformerConfig
from app.serving import metrics
from app.serving.errors import InvalidInput, Loc
from app.serving.registry import ServedModel

# The decoders' default output budget: ratio × the text's source tokens (with EOS) + offset.
BUDGET_RATIO, BUDGET_OFFSET = 1.5, 10


def check_batch(settings: Settings, texts: list[str]) -> None:
    if len(texts) > settings.max_batch:
        raise InvalidInput(("body", "texts"), f"has {len(texts)} texts; the limit is {settings.max_batch}")


def check_text(settings: Settings, served: ServedModel, text: str, loc: Loc, *, empty_ok: bool = False) -> int:
    """Enforce the character and token limits; returns the token count with EOS."""
    if len(text) > settings.max_chars:
        raise InvalidInput(loc, f"has {len(text)} characters; the limit is {settings.max_chars}")
    n = len(served.loaded.tokenizer.encode(text))
    if (n == 0 or not visible(text)) and not empty_ok:
        # a byte-fallback model spells U+200B in byte pieces: tokens, but nothing to translate
        raise InvalidInput(loc, "has no tokens (only whitespace, control or zero-width characters)")
    if n > served.max_source_tokens:
        raise InvalidInput(loc, f"has {n} tokens; the limit is {served.max_source_tokens}")
    return n + 1


def visible(text: str) -> bool:
    """Whether ``text`` has a character other than whitespace, control (Cc) and format (Cf:
    zero-width spaces and joiners, bidi marks) characters."""
    return any(not ch.isspace() and unicodedata.category(ch) not in ("Cc", "Cf") for ch in text)


def check_coverage(served: ServedModel, coverage_penalty: float | None) -> None:
    """A coverage penalty needs cross-attention to measure coverage with."""
    if coverage_penalty and "cross" not in served.loaded.config.attention_kinds:
        raise InvalidInput(
            ("body", "coverage_penalty"),
            f"must be 0 for {served.loaded.id}: it has no cross-attention to measure coverage with",
        )


def output_budgets(served: ServedModel, lengths: list[int], max_length: int | None) -> list[int]:
    """Most output tokens for each source of ``lengths`` (EOS included): ``max_length`` if given,
    else the decoders' default for that text alone (so a text translates the same in a batch as
    on its own); never past the model's positions."""
    cap = served.max_decode_length
    if max_length is not None:
        return [max_length if cap is None else min(max_length, cap)] * len(lengths)
    return target_budgets(lengths, BUDGET_RATIO, BUDGET_OFFSET, cap)


def attention_floats(config: ModelConfig, source_lengths: list[int], budgets: list[int], beams: int) -> int:
    """The attention weights a decode keeps: for every text (source length S with EOS, up to its
    budget of T output tokens) each of the ``beams`` live hypotheses records, per step t, its
    cross row (layers × heads × S) and decoder self-attention row (layers × heads × t); the
    encoder's self-attention (encoder layers × heads × S²) is kept once per text."""
    kinds = config.attention_kinds
    per_head = config.layers * config.num_heads
    encoder_layers = config.encoder_layers if isinstance(config, TransformerConfig) else 1
    total = 0
    for s, budget in zip(source_lengths, budgets, strict=True):
        if "cross" in kinds:
            total += beams * per_head * budget * s
        if "decoder_self" in kinds:
            total += beams * per_head * budget * (budget + 1) // 2
        if "encoder_self" in kinds:
            total += encoder_layers * config.num_heads * s * s
    return total


def admit(
    settings: Settings, served: ServedModel, source_lengths: list[int], budgets: list[int], *, beams: int, weights: bool
) -> int:
    """Refuse (422) a decode whose attention would exceed ``max_attention_floats``, naming the
    limit and what would get under it. Returns the estimate (0 without attention)."""
    if not weights:
        return 0
    config, limit = served.loaded.config, settings.max_attention_floats
    cost = attention_floats(config, source_lengths, budgets, beams)
    if cost <= limit:
        return cost
    metrics.REJECTED.labels("cost").inc()
    ways = []
    fits_beams = [b for b in range(beams - 1, 0, -1) if attention_floats(config, source_lengths, budgets, b) <= limit]
    if fits_beams:
        ways.append(f"beam_size ≤ {fits_beams[0]}")
    budget, texts = max(budgets), len(budgets)  # max_length n, if asked for, applies to every text
    fits_length = [n for n in range(budget - 1, 0, -1) if attention_floats(config, source_lengths, [n] * texts, beams) <= limit]
    if fits_length:
        ways.append(f"max_length ≤ {fits_length[0]}")
    if len(source_lengths) > 1:
        ways.append("fewer texts")
    ways.append('"attention": [] (tokens and scores only)')
    raise InvalidInput(
        ("body",),
        f"this decode would keep about {cost / 1e6:.1f} M attention weights ({beams} beams × "
        f"{'' if len(set(budgets)) == 1 else 'up to '}{budget} output tokens); the limit is {limit / 1e6:g} M (ATTNSCOPE_MAX_ATTENTION_FLOATS). To get under "
        f"it, ask for {', or '.join(ways)}",
        kind="cost_limit",
    )


def attribution_cost(source_length: int, target_length: int, steps: int) -> int:
    """The work of attributing a target of ``target_length`` tokens to a source of
    ``source_length`` (both with EOS): one backward pass per target token, each through
    ``steps + 1`` rows of ``source + target`` positions."""
    return target_length * (steps + 1) * (source_length + target_length)


def admit_attribution(settings: Settings, source_length: int, target_length: int, steps: int) -> None:
    """Refuse (422) an attribution over ``max_attribution_cost``, naming the largest ``steps``
    that fit, if any, before it takes a decode slot for minutes."""
    limit = settings.max_attribution_cost
    cost = attribution_cost(source_length, target_length, steps)
    if cost <= limit:
        return
    metrics.REJECTED.labels("cost").inc()
    fits = limit // (target_length * (source_length + target_length)) - 1
    ways = ([f"steps ≤ {fits}"] if fits >= 1 else []) + ["a shorter text or target"]
    raise InvalidInput(
        ("body",),
        f"this attribution would cost {cost:,} ({target_length} target tokens × {steps + 1} integration points × "
        f"{source_length + target_length} positions); the limit is {limit:,} (ATTNSCOPE_MAX_ATTRIBUTION_COST). "
        f"To get under it, ask for {', or '.join(ways)}",
        kind="cost_limit",
    )
