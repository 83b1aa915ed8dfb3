"""The limits a request must keep before any decoding starts: text length in characters and
tokens (the model's positional range included), batch size, the output budget, and the costs
admission control enforces (:class:`Cost`): the attention weights the decode keeps, the
attention it computes whether kept or not (its work: ``"attention": []`` is cheaper, not free)
and the size of its JSON answer, extras included. Each applies to a request alone and to a
micro-batch as a whole (the scheduler never puts more into one decode)."""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from attnscope.config import Settings
from attnscope.decoding.output import target_budgets
from attnscope.nn.config import ModelConfig
from attnscope.nn.family import geometry_of
from attnscope.serving import metrics
from attnscope.serving.errors import InvalidInput, Loc
from attnscope.serving.registry import ServedModel

if TYPE_CHECKING:
    from attnscope.serving.explain import Extras

# The decoders' default output budget: ratio × the text's source tokens (with EOS) + offset.
BUDGET_RATIO, BUDGET_OFFSET = 1.5, 10


def check_batch(settings: Settings, texts: list[str]) -> None:
    if len(texts) > settings.max_batch:
        raise InvalidInput(("body", "texts"), f"has {len(texts)} texts; the limit is {settings.max_batch}")


# Characters that show nothing: controls, format characters (zero-width, bidi marks, BOM), separators
INVISIBLE = frozenset({"Cc", "Cf", "Zs", "Zl", "Zp"})


def visible(text: str) -> bool:
    """Whether ``text`` has a character that shows something (not whitespace, a control or a
    zero-width/format character)."""
    return any(not ch.isspace() and unicodedata.category(ch) not in INVISIBLE for ch in text)


def check_text(settings: Settings, served: ServedModel, text: str, loc: Loc, *, empty_ok: bool = False) -> int:
    """Enforce the character and token limits; returns the token count with EOS. A text with
    nothing visible is refused for every model, also where byte fallback would spell it in pieces."""
    if len(text) > settings.max_chars:
        raise InvalidInput(loc, f"has {len(text)} characters; the limit is {settings.max_chars}")
    n = len(served.loaded.tokenizer.encode(text))
    if (n == 0 or not visible(text)) and not empty_ok:
        raise InvalidInput(loc, "has no tokens to translate: nothing visible (only whitespace, control or zero-width characters)")
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
    g = geometry_of(config)
    kinds, per_head = g.kinds, g.decoder_layers * g.heads_of("cross")
    total = 0
    for s, budget in zip(source_lengths, budgets, strict=True):
        if "cross" in kinds:
            total += beams * per_head * budget * s
        if "decoder_self" in kinds:
            total += beams * per_head * budget * (budget + 1) // 2
        if "encoder_self" in kinds:
            total += g.encoder_layers * g.heads_of("encoder_self") * s * s
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


def vision_cost(width: int, height: int, *, passes: int, canvas: int) -> int:
    """The work of a vision request: decoding, graying and scaling the ``width`` × ``height``
    image, then ``passes`` reads of the model's ``canvas`` × ``canvas`` pixels."""
    return width * height + passes * canvas * canvas


def admit_vision(settings: Settings, width: int, height: int, *, passes: int, canvas: int, beams: int = 0) -> None:
    """Refuse (422 on ``image``) a vision request over ``max_vision_cost`` once its image's size is
    known from the file's header, before its pixels are decoded: naming the limit, the largest
    square image that fits and, for a caption (``beams`` > 0), the beam size that would."""
    limit = settings.max_vision_cost
    cost = vision_cost(width, height, passes=passes, canvas=canvas)
    if cost <= limit:
        return
    metrics.REJECTED.labels("cost").inc()
    ways = []
    room = limit - passes * canvas * canvas
    if room >= 64:
        side = int(room**0.5)
        ways.append(f"an image of at most {room:,} pixels (e.g. {side}×{side})")
    if beams > 1:
        steps = passes // beams
        fits = [b for b in range(beams - 1, 0, -1) if vision_cost(width, height, passes=b * steps, canvas=canvas) <= limit]
        ways += [f"beam_size ≤ {fits[0]}"] if fits else []
    raise InvalidInput(
        ("body", "image"),
        f"this request would cost {cost:,} pixels ({width}×{height} decoded + {passes} × {canvas}×{canvas} read by the model); "
        f"the limit is {limit:,} (ATTNSCOPE_MAX_VISION_COST). To get under it, send {', or '.join(ways or ['a smaller image'])}",
        kind="cost_limit",
    )


def explain_cost(config: ModelConfig, source_length: int, target_length: int, *, methods: tuple[str, ...]) -> int:
    """The work of ``explain`` on one sentence (lengths with EOS), in token-layer passes (one
    position through one layer): the teacher-forced trace, L_e·S + L_d·T, for any method; value
    zeroing reruns each layer once per token, L_e·S·(S+1) + L_d·T·(T+S+2); ALTI+ builds one
    vector per query-key pair of each sublayer, counted as L_e·S² + L_d·T·(T+S+1). An RNN's
    norm is one pass, S + T (its one layer; the methods its family does not compute cost nothing)."""
    if not methods:
        return 0
    s, t = source_length, target_length
    g = geometry_of(config)
    enc, dec, computed = g.encoder_layers, g.decoder_layers, set(methods) & set(g.explain_methods)
    cost = enc * s + dec * t
    if "value_zeroing" in computed:
        cost += enc * s * (s + 1) + dec * t * (t + s + 2)
    if "alti" in computed:
        cost += enc * s * s + dec * t * (t + s + 1)
    return cost


def admit_explain(
    settings: Settings, served: ServedModel, source_lengths: list[int], target_lengths: list[int], *, methods: tuple[str, ...]
) -> None:
    """Refuse (422) ``explain`` over ``max_explain_cost`` for any text (target lengths: the
    output budgets of a translation, the given target's tokens with EOS for an alignment)."""
    config, limit = served.loaded.config, settings.max_explain_cost
    cost = max((explain_cost(config, s, t, methods=methods) for s, t in zip(source_lengths, target_lengths, strict=True)), default=0)
    if cost <= limit:
        return
    metrics.REJECTED.labels("cost").inc()
    raise InvalidInput(
        ("body", "explain"),
        f"would cost {cost:,} token-layer passes for this text; the limit is {limit:,} (ATTNSCOPE_MAX_EXPLAIN_COST). "
        "To get under it, leave out value_zeroing or alti, or ask for a shorter text or max_length",
        kind="cost_limit",
    )


@dataclass(frozen=True)
class Cost:
    """What a decode costs: attention weights kept (``floats``), attention computed (``work``,
    kept or not: the decode's compute) and its answer's JSON size (``answer_bytes``)."""

    floats: int = 0
    work: int = 0
    answer_bytes: int = 0

    def __add__(self, other: Cost) -> Cost:
        return Cost(self.floats + other.floats, self.work + other.work, self.answer_bytes + other.answer_bytes)

    def within(self, limit: Cost) -> bool:
        return self.floats <= limit.floats and self.work <= limit.work and self.answer_bytes <= limit.answer_bytes


def batch_limit(settings: Settings) -> Cost:
    """The most one decode (a request alone, or a micro-batch of them) may cost."""
    return Cost(settings.max_attention_floats, settings.max_decode_work, settings.max_answer_bytes)


# Bytes of the JSON answer: a weight with d decimals ("0.123456,") at most d + 3; a raw score or
# a context value ("-12.345678," or null) 12; per token of the lists and words ~100; an
# alternative ~60; a beam tree node ~130.
SCORE_BYTES, TOKEN_BYTES, ALTERNATIVE_BYTES, NODE_BYTES = 12, 100, 60, 130
REASON_BYTES = 400  # an explanation method's "unavailable" reason


def _shapes(config: ModelConfig, s: int, t: int) -> dict[str, int]:
    """The floats of each attention kind in one answer: source ``s`` and output ``t`` tokens."""
    g = geometry_of(config)
    per_head = g.decoder_layers * g.heads_of("cross")
    sizes = {"cross": per_head * t * s, "decoder_self": per_head * t * t, "encoder_self": g.encoder_layers * g.heads_of("encoder_self") * s * s}
    return {kind: sizes[kind] for kind in g.kinds}


@dataclass(frozen=True)
class Asked:
    """What each answer holds: the attention ``kinds`` (None: all), ``decimals``, the extras
    (raw scores and context vectors, alternatives, the beam tree of ``beams``)."""

    kinds: tuple[str, ...] | None = None
    decimals: int = 6
    extras: Extras | None = None
    beams: int = 1


def answer_bytes(config: ModelConfig, source_lengths: list[int], budgets: list[int], asked: Asked) -> int:
    """An upper bound of the answers' JSON size: each text answers its best hypothesis (as long
    as its budget at most) with what was ``asked``."""
    g = geometry_of(config)
    extras = asked.extras
    total = 0
    for s, t in zip(source_lengths, budgets, strict=True):
        shapes = _shapes(config, s, t)
        total += sum(n for kind, n in shapes.items() if asked.kinds is None or kind in asked.kinds) * max(asked.decimals + 3, 4)
        total += TOKEN_BYTES * (s + 2 * t)
        if extras is not None and extras.return_scores:
            total += (sum(shapes.values()) + g.decoder_layers * t * g.context_width) * SCORE_BYTES
        if extras is not None:
            total += t * extras.alternatives * ALTERNATIVE_BYTES + (asked.beams * t * NODE_BYTES if extras.return_beam else 0)
            total += explanation_floats(config, s, t, extras.explain) * (asked.decimals + 4)  # a sign, maybe
            total += REASON_BYTES * len(extras.explain)  # a method unavailable for the family says why
    return total


def explanation_floats(config: ModelConfig, s: int, t: int, methods: tuple[str, ...]) -> int:
    """The numbers ``explain`` adds to one answer (source ``s``, output ``t`` tokens): norm, the
    attention's shape and [layer][head][key] value norms; rollout and value zeroing [layer][query][key]
    per kind; ALTI+ [layer][query][source and target], the source share and [layer][source][source].
    Only a Transformer has the last three (an RNN's answer says why not)."""
    if not methods:
        return 0
    shapes = _shapes(config, s, t)
    g = geometry_of(config)
    heads = g.heads_of("cross")  # the decoder's; the encoder's below
    total = 0
    if "norm" in methods:
        values = {"cross": g.decoder_layers * heads * s, "decoder_self": g.decoder_layers * heads * t, "encoder_self": g.encoder_layers * g.heads_of("encoder_self") * s}
        total += sum(shapes.values()) + sum(values[kind] for kind in shapes)
    if "alti" in g.explain_methods:  # the family computes the per-layer methods (a Transformer)
        per_layer = sum(shapes.values()) // min(heads, g.heads_of("encoder_self"))  # an upper bound
        total += per_layer * sum(m in methods for m in ("rollout", "value_zeroing"))
        if "alti" in methods:
            encoder = g.encoder_layers * s * s
            total += g.decoder_layers * t * (s + t) + t + encoder
    return total


def admission(settings: Settings, served: ServedModel, source_lengths: list[int], budgets: list[int], asked: Asked) -> Cost:
    """Every cost check of a translation (or of a teacher-forced align: 1 beam): the weights
    kept (:func:`admit`), the work and the answer's size; 422 naming the limit and ways under it."""
    weights = asked.kinds is None or len(asked.kinds) > 0
    floats = admit(settings, served, source_lengths, budgets, beams=asked.beams, weights=weights)
    config = served.loaded.config
    work = attention_floats(config, source_lengths, budgets, asked.beams)
    if work > settings.max_decode_work:
        _refuse_work(settings, config, source_lengths, budgets, asked.beams, work)
    size = answer_bytes(config, source_lengths, budgets, asked)
    if size > settings.max_answer_bytes:
        _refuse_size(settings, config, source_lengths, budgets, asked, size)
    return Cost(floats, work, size)


def _refuse_work(
    settings: Settings, config: ModelConfig, lengths: list[int], budgets: list[int], beams: int, work: int
) -> None:
    metrics.REJECTED.labels("cost").inc()
    limit = settings.max_decode_work
    ways = [f"beam_size ≤ {b}" for b in range(beams - 1, 0, -1) if attention_floats(config, lengths, budgets, b) <= limit][:1]
    n = max(budgets)
    ways += [f"max_length ≤ {m}" for m in range(n - 1, 0, -1) if attention_floats(config, lengths, [m] * len(budgets), beams) <= limit][:1]
    ways += ["fewer texts"] if len(lengths) > 1 else []
    raise InvalidInput(
        ("body",),
        f"this decode would compute about {work / 1e6:.1f} M attention weights ({beams} beams × up to {n} output "
        f"tokens), kept or not; the limit is {limit / 1e6:g} M (ATTNSCOPE_MAX_DECODE_WORK). To get under it, ask for "
        f"{', or '.join(ways or ['a shorter text'])}",
        kind="cost_limit",
    )


def _refuse_size(
    settings: Settings, config: ModelConfig, lengths: list[int], budgets: list[int], asked: Asked, size: int
) -> None:
    metrics.REJECTED.labels("answer_size").inc()
    limit = settings.max_answer_bytes

    def fits(new_budgets: list[int] = budgets, **change: object) -> bool:
        return answer_bytes(config, lengths, new_budgets, replace(asked, **change)) <= limit  # type: ignore[arg-type]

    extras = asked.extras
    ways = [f"precision ≤ {d}" for d in range(asked.decimals - 1, -1, -1) if fits(decimals=d)][:1]
    if asked.kinds is None or len(asked.kinds) > 1:
        ways += [f'"attention": ["{k}"]' for k in config.attention_kinds if fits(kinds=(k,))][:1]
    if extras is not None and extras.return_scores and fits(extras=replace(extras, return_scores=False)):
        ways.append("return_scores false")
    if extras is not None and (extras.alternatives or extras.return_beam):
        if fits(extras=replace(extras, alternatives=0, return_beam=False)):
            ways.append("no alternatives and no beam tree")
    if extras is not None and extras.explain and fits(extras=replace(extras, explain=())):
        ways.append('no "explain"')
    n = max(budgets)
    ways += [f"max_length ≤ {m}" for m in range(n - 1, 0, -1) if fits([m] * len(budgets))][:1]
    ways += ["fewer texts"] if len(lengths) > 1 else []
    ways.append('"attention": [] without extras')
    raise InvalidInput(
        ("body",),
        f"the answer would be up to {size / 1e6:.1f} MB of JSON ({len(lengths)} text(s) × up to {n} output tokens, "
        f"with the attention, decimals and extras asked for); the limit is {limit / 1e6:g} MB "
        f"(ATTNSCOPE_MAX_ANSWER_BYTES). To get under it, ask for {', or '.join(ways)}",
        kind="answer_size_limit",
    )
