"""Admission's prices of the routes that run alone in a decode slot: gradient attribution
(``/api/attribution``), the logit lens with direct logit attribution (``/api/lens``) and
activation patching (``/api/patch``). One table, :data:`ROUTE_PRICES`, holds them; a new route
(an LLM's lens or patching, say) adds its own with :func:`register_route_price` and calls
:func:`price_route` before its job, then hands the returned :class:`~attnscope.engine.limits.Cost`
to ``ModelService.run_stoppable(job, cost=...)``.

A price has three parts, each read from the request's :class:`Shape` before any work:

- ``passes``: token positions run through the whole model (passes × positions), the unit of
  ``ATTNSCOPE_MAX_ATTRIBUTION_COST``; over it, 422 naming the limit and the ways under it.
- ``floats``: the largest tensors the job holds at once (the lens's log-probabilities over the
  vocabulary, integrated gradients' batch of logits and its activations), bounded by
  ``ATTNSCOPE_MAX_ROUTE_FLOATS``; over it, 422. (The translation first made where no target is
  given keeps its attention under ``ATTNSCOPE_MAX_ATTENTION_FLOATS``, as ``/api/translate``.)
- ``flops``: an estimate of the arithmetic, turned into the scheduler's unit of work (a decode's
  attention weights computed) by the route's ``flops_per_work`` (measured against large beam
  decodes on the same machine and load, ``bench/probe_prices.py``, and rounded down: a price
  that errs errs towards refusing).
  The scheduler adds it to the work queued ahead and refuses with 503 + ``Retry-After`` what the
  machine cannot finish before the deadline at the rate it runs now, so an admitted request does
  not become a 504.

When the target is the model's own translation, :func:`translate_first` makes it first, in a
slot of its own under its own price (the decode's kept attention, as ``/api/translate``), and
the route is priced on the real lengths: an upper bound (the output budget) would price a short
sentence at two or three times its cost (docs/api.md, "Admission")."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from attnscope.config import Settings
from attnscope.engine import metrics
from attnscope.engine.errors import InvalidInput
from attnscope.engine.limits import Cost, attention_floats, attribution_cost, output_budgets
from attnscope.nn.config import ModelConfig
from attnscope.nn.family import Geometry, geometry_of

if TYPE_CHECKING:
    from attnscope.engine.registry import ServedModel
    from attnscope.engine.service import ModelService
    from attnscope.translator import Translation

# Multiply-adds (×2) of one position through one layer (attention projections 4w², feed-forward
# 8w² with the usual 4w inner size), and of one position through the output layer (V × w).
LAYER_FLOPS_PER_W2, BACKWARD = 24, 3  # a backward pass costs about twice the forward


@dataclass(frozen=True)
class Shape:
    """What a price reads: the model's ``geometry``, ``vocab`` size and residual ``width``, the
    ``source`` and ``target`` lengths (with EOS; the target an upper bound where it is the
    translation still to come) and the request's own ``knobs`` (``steps``, ``k``, ...)."""

    geometry: Geometry
    vocab: int
    width: int
    source: int
    target: int
    knobs: Mapping[str, int] = field(default_factory=dict)

    @property
    def layers(self) -> int:
        return self.geometry.encoder_layers + self.geometry.decoder_layers

    def forward_flops(self, positions: int) -> int:
        """Flops of ``positions`` token positions through every layer (the output layer aside)."""
        return positions * self.layers * LAYER_FLOPS_PER_W2 * self.width * self.width


@dataclass(frozen=True)
class RoutePrice:
    """One route's price: ``passes``, ``floats`` and ``flops`` of a :class:`Shape`, the flops
    one unit of the scheduler's work stands for (``flops_per_work``); ``ways``
    names how to get under the ``passes`` limit (given it), for the 422's message."""

    name: str
    passes: Callable[[Shape], int]
    floats: Callable[[Shape], int]
    flops: Callable[[Shape], int]
    flops_per_work: float
    ways: Callable[[Shape, int | None], list[str]] = lambda shape, limit: []


ROUTE_PRICES: dict[str, RoutePrice] = {}


def register_route_price(price: RoutePrice) -> RoutePrice:
    """Add (or replace) a route's price in :data:`ROUTE_PRICES`."""
    ROUTE_PRICES[price.name] = price
    return price


def shape_of(config: ModelConfig, source: int, target: int, **knobs: int) -> Shape:
    """The :class:`Shape` of a request on a model of ``config``."""
    g = geometry_of(config)
    width = int(
        getattr(config, "d_model", 0) or getattr(config, "hidden_dim", 0) or g.context_width
    )
    return Shape(g, config.vocab_size, width, source, target, knobs)


def price_route(settings: Settings, route: str, shape: Shape) -> Cost:
    """The :class:`Cost` of ``route`` on ``shape`` (its real lengths) before any work: 422 from
    :func:`check_route` over a limit; the cost's ``work`` is what the scheduler's 503 weighs and
    ``floats`` what the job holds at most."""
    check_route(settings, route, shape)
    price = ROUTE_PRICES[route]
    return Cost(floats=price.floats(shape), work=round(price.flops(shape) / price.flops_per_work))


def translation_price(settings: Settings, config: ModelConfig, source: int, budget: int, beams: int) -> Cost:
    """The translation a route makes first when no target is given, priced as ``/api/translate``
    prices a decode (its kept attention; 422 over ``max_attention_floats``)."""
    kept = attention_floats(config, [source], [budget], beams)
    if kept > settings.max_attention_floats:
        metrics.REJECTED.labels("cost").inc()
        raise InvalidInput(
            ("body",),
            f"translating first at beam {beams} would keep about {kept / 1e6:.1f} M attention weights; "
            f"the limit is {settings.max_attention_floats / 1e6:g} M (ATTNSCOPE_MAX_ATTENTION_FLOATS). Ask for a "
            "smaller beam_size, a shorter text, or give the target",
            kind="cost_limit",
        )
    return Cost(floats=kept, work=kept)


async def translate_first(
    service: ModelService, served: ServedModel, text: str, *, beams: int, gone: threading.Event | None
) -> Translation:
    """The model's translation of ``text`` at ``beams``, in a decode slot of its own under its own
    price (:func:`translation_price`), so the route after it is priced on the real target."""
    source = len(served.translator.source_ids(text))
    (budget,) = output_budgets(served, [source], None)
    cost = translation_price(service.settings, served.loaded.config, source, budget, beams)

    def job(should_stop: Callable[[], bool]) -> Translation:
        (result,) = served.translator.translate([text], beam_size=beams, max_length=budget, should_stop=should_stop)
        return result

    return await service.run_stoppable(job, gone=gone, cost=cost)


def check_route(settings: Settings, route: str, shape: Shape) -> None:
    """422 (``kind`` cost_limit) when ``route`` on ``shape`` would run more token positions than
    ``max_attribution_cost`` or hold more floats at once than ``max_route_floats``, naming the
    limit and the ways under it."""
    price = ROUTE_PRICES[route]
    passes, limit = price.passes(shape), settings.max_attribution_cost
    if passes > limit:
        metrics.REJECTED.labels("cost").inc()
        ways = [*price.ways(shape, limit), "a shorter text or target"]
        raise InvalidInput(
            ("body",),
            f"this {route} would run {passes:,} token positions through the model ({shape.target} target tokens, "
            f"{shape.source} source tokens); the limit is {limit:,} (ATTNSCOPE_MAX_ATTRIBUTION_COST). "
            f"To get under it, ask for {', or '.join(ways)}",
            kind="cost_limit",
        )
    floats = price.floats(shape)
    if floats > settings.max_route_floats:
        metrics.REJECTED.labels("cost").inc()
        raise InvalidInput(
            ("body",),
            f"this {route} would hold about {floats / 1e6:.1f} M floats at once ({shape.target} target tokens, "
            f"{shape.source} source tokens, a vocabulary of {shape.vocab:,}); the limit is "
            f"{settings.max_route_floats / 1e6:g} M (ATTNSCOPE_MAX_ROUTE_FLOATS). To get under it, ask for "
            f"{', or '.join([*price.ways(shape, None), 'a shorter text or target'])}",
            kind="cost_limit",
        )


# -- the routes ---------------------------------------------------------------------------------


def _attribution_passes(s: Shape) -> int:
    """One backward pass per target token through ``steps + 1`` rows of source + target
    (:func:`attnscope.engine.limits.attribution_cost`), and with a ``contrast`` one more (its
    own integrated gradients)."""
    return attribution_cost(
        s.source, s.target + s.knobs.get("contrast", 0), s.knobs.get("steps", 16)
    )


def _attribution_floats(s: Shape) -> int:
    """The batch's logits over the vocabulary and their log-softmax, and its activations kept
    for the backward passes (~16 floats per position, layer and width: measured, 128 steps on
    en-de-transformer, 12 + 11 tokens: +395 MB peak RSS, 96 M floats priced)."""
    rows = s.knobs.get("steps", 16) + 1
    return rows * (2 * s.target * s.vocab + 16 * s.layers * (s.source + s.target) * s.width)


def _attribution_flops(s: Shape) -> int:
    rows, positions = s.knobs.get("steps", 16) + 1, s.source + s.target
    forward = s.forward_flops(rows * positions) + 2 * rows * s.target * s.vocab * s.width
    return (
        BACKWARD * forward * (s.target + s.knobs.get("contrast", 0))
    )  # one backward per target token


def _attribution_ways(s: Shape, limit: int | None) -> list[str]:
    steps = s.knobs.get("steps", 16)
    if limit is None:  # the floats: each step adds a row of logits
        return ["fewer steps"] if steps > 1 else []
    fits = limit // max(1, (s.target + s.knobs.get("contrast", 0)) * (s.source + s.target)) - 1
    return [f"steps ≤ {fits}"] if 1 <= fits < steps else []


def _lens_points(s: Shape) -> int:
    return 1 + 3 * s.geometry.decoder_layers  # embed, then self, cross and ff of each layer


def _lens_passes(s: Shape) -> int:
    return _lens_points(s) * (s.source + s.target)


def _lens_floats(s: Shape) -> int:
    """Every point's log-probabilities over the vocabulary (points × target × V)."""
    return _lens_points(s) * s.target * s.vocab


def _lens_flops(s: Shape) -> int:
    points = _lens_points(s)
    return s.forward_flops(s.source + s.target) + 2 * points * s.target * s.vocab * s.width


def _patch_passes(s: Shape) -> int:
    """Two full runs, one per decoder layer and attention kind with every head, one per
    encoder boundary with every position; each through source + target positions."""
    g = s.geometry
    passes = (
        2
        + 2 * g.decoder_layers * (g.heads_of("cross") + 1)
        + (g.encoder_layers + 1) * (s.source + 1)
    )
    return passes * (s.source + s.target)


def _patch_floats(s: Shape) -> int:
    """The largest batch's logits: a boundary's every position (source + 1 rows) × target × V."""
    g = s.geometry
    rows = max(s.source + 1, g.heads_of("cross") + 1)
    return rows * s.target * s.vocab + rows * 16 * s.layers * (s.source + s.target) * s.width


def _patch_flops(s: Shape) -> int:
    rows = _patch_passes(s) // max(1, s.source + s.target)
    return s.forward_flops(_patch_passes(s)) + 2 * rows * s.target * s.vocab * s.width


# flops per unit of work measured by bench/probe_prices.py on en-de-transformer, one thread,
# 2-core machine at load 2-8 (2026-11-28): attribution 15,600-55,000, lens 800-5,600, patching
# 4,800-28,600; the table takes about the lowest (batched backward passes run many flops a
# second; the lens's per-point projections few).
register_route_price(
    RoutePrice(
        "attribution",
        _attribution_passes,
        _attribution_floats,
        _attribution_flops,
        15_000,
        _attribution_ways,
    )
)
register_route_price(RoutePrice("lens", _lens_passes, _lens_floats, _lens_flops, 1_000))
register_route_price(RoutePrice("patching", _patch_passes, _patch_floats, _patch_flops, 5_000))

# A vision request's work, priced before its image is read: at most ATTNSCOPE_MAX_VISION_COST
# pixels (decoded + read by the model, :func:`attnscope.engine.limits.vision_cost`), at the pixels
# per unit of work measured (a 2048² caption at beam 10, 5.3 M pixels: 0.2-0.34 s on one thread
# at load 9, against large decodes' 1.3e-7 s/work: ~2.3 pixels per unit; rounded down).
PIXELS_PER_WORK = 2.0


def vision_price(settings: Settings) -> Cost:
    """What a vision request (glimpses or a caption) costs the scheduler, at its limit's bound."""
    return Cost(work=round(settings.max_vision_cost / PIXELS_PER_WORK))
