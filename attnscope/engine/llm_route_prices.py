"""Admission's prices of the decoder-only LLM translators' logit lens (with DLA), activation
patching and the translation they read when no target is given, by the model's size (issue 45:
priced by positions alone, a 0.5B model's patching grid was admitted and ran for over 8 minutes).

Each price counts the matrix products the job runs (:mod:`attnscope.inside.decoder_only`, exactly
as ``torch.utils.flop_counter`` counts them: 2·m·n·k per product; the tests hold the count to
it), from the model's config (layers L, query heads H sharing KVH key/value heads of size Dh,
width D, feed-forward size F, vocabulary V) and the request's lengths (prompt P, target T, the
traced pass running N = P + T - 1 positions):

- one position through one layer: ``2·(D·Dh·(2H + 2KVH) + 2·H·Dh·N + (3 if gated else 2)·D·F)``
  (q, k, v, o; the scores and the weighted values over N keys; the feed-forward);
- the output layer, per position read: ``2·D·V``: at a 0.5B model's vocabulary (152k × 896) it is
  ten times a layer, so the lens's 1 + 2L points and patching's logits over every row dominate;
- patching runs each layer's batch (H + 1 rows, then P + 1) from that layer on: Σ (L - l) layers
  = L(L+1)/2, so its price grows with the square of the depth.

The flops become the scheduler's unit of work by :data:`LLM_FLOPS_PER_WORK` (the translation's
by :data:`LLM_DECODE_FLOPS_PER_WORK`; measured by
``bench/probe_llm_prices.py`` against the start-up calibration's large decode, rounded down:
a price that errs errs towards refusing). Over ``ATTNSCOPE_MAX_ROUTE_FLOATS`` (floats held at
once) or the positions limit (``ATTNSCOPE_MAX_ATTRIBUTION_COST``, as the encoder-decoder
routes): 422 naming it; past what the machine can finish before the deadline at the rate it runs
now: the scheduler's 503 with ``Retry-After`` (:mod:`attnscope.engine.batching`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from attnscope.config import Settings
from attnscope.engine.limits import Cost
from attnscope.engine.route_prices import (
    RoutePrice,
    Shape,
    price_route,
    register_route_price,
)
from attnscope.nn.decoder_only_config import DecoderOnlyConfig
from attnscope.nn.family import geometry_of

# Flops one unit of the scheduler's work stands for: bench/probe_llm_prices.py, one thread, random
# LLMs of D=512/L=6/V=32k and D=256/L=4/V=8k, 2-core machine at load 10 (2026-11-28): lens
# 2,773 and 4,635, patching 5,241 and 3,815 (batched products), translation 826 and 448 (one
# position a step: overhead-bound); the constants sit below the lowest.
LLM_FLOPS_PER_WORK = 2_500
LLM_DECODE_FLOPS_PER_WORK = 400


def llm_shape(config: DecoderOnlyConfig, prompt: int, target: int, beams: int = 1) -> Shape:
    """The :class:`Shape` of a request over ``prompt`` tokens and ``target`` written ones (the
    last of which is never fed back), with the model's own sizes as knobs."""
    knobs = {"kv_heads": config.kv_heads, "head_dim": config.head_dim, "ff": config.ff_dim,
             "gated": int(config.gated_ff), "beams": beams}  # fmt: skip
    return Shape(geometry_of(config), config.vocab_size, config.d_model, prompt, target, knobs)


def _positions(s: Shape) -> int:
    return s.source + s.target - 1  # the traced pass: prompt + target but its last token


def layer_flops(s: Shape, rows: int, positions: int) -> int:
    """Flops of ``rows`` × ``positions`` through one layer, each attending to ``positions`` keys."""
    k, heads, width = s.knobs, s.geometry.heads, s.width
    projections = width * k["head_dim"] * (2 * heads + 2 * k["kv_heads"])
    attention = 2 * heads * k["head_dim"] * positions
    ff = (3 if k["gated"] else 2) * width * k["ff"]
    return 2 * rows * positions * (projections + attention + ff)


def readout_flops(s: Shape, positions: int) -> int:
    """Flops of the output layer over ``positions`` (rows × positions)."""
    return 2 * positions * s.width * s.vocab


def _points(s: Shape) -> int:
    return 1 + 2 * s.geometry.decoder_layers  # embed, then each layer's attention and feed-forward


def _lens_flops(s: Shape) -> int:
    """One traced pass (its logits at every position), the lens read at every point and target
    position, and DLA's heads through their W_O slices."""
    n, layers, heads = _positions(s), s.geometry.decoder_layers, s.geometry.heads
    dla = 2 * layers * s.target * heads * s.knobs["head_dim"] * s.width
    return layers * layer_flops(s, 1, n) + readout_flops(s, n) + readout_flops(s, _points(s) * s.target) + dla


def _lens_floats(s: Shape) -> int:
    """The pass's logits (N × V), the lens's log-probabilities (points × T × V, and its readout
    before them) and the residual stream at every point."""
    n = _positions(s)
    return n * s.vocab + 2 * _points(s) * s.target * s.vocab + _points(s) * n * s.width


def _lens_passes(s: Shape) -> int:
    return _points(s) * (s.source + s.target)


def _patch_flops(s: Shape) -> int:
    """Two traced passes, then per layer l a batch of H + 1 rows (every head patched) and one of
    P + 1 (every prompt position), each from layer l on with its logits at every position."""
    n, layers, heads = _positions(s), s.geometry.decoder_layers, s.geometry.heads
    full = layers * layer_flops(s, 1, n) + readout_flops(s, n)
    rows = heads + 1 + s.source + 1
    depth = layers * (layers + 1) // 2
    return 2 * full + depth * layer_flops(s, rows, n) + layers * readout_flops(s, rows * n)


def _patch_floats(s: Shape) -> int:
    """The largest batch's logits and log-probabilities, its scores and activations, and the two
    traces' residual streams."""
    n, heads = _positions(s), s.geometry.heads
    rows = max(heads + 1, s.source + 1)
    batch = rows * (n * s.vocab + s.target * s.vocab + heads * n * n + n * (4 * s.width + s.knobs["ff"]))
    return batch + 2 * _points(s) * n * s.width


def _patch_passes(s: Shape) -> int:
    """As ``attnscope.inside.decoder_only.patch_cost``: full runs × the positions each runs."""
    layers, heads = s.geometry.decoder_layers, s.geometry.heads
    return (2 + layers * (heads + 1) + layers * (s.source + 1)) * (s.source + s.target)


def _decode_flops(s: Shape) -> int:
    """Generating ``target`` tokens at ``beams`` after the prompt (keys and values cached): the
    prompt once, then each new position per beam through every layer and the output layer."""
    layers, beams = s.geometry.decoder_layers, s.knobs.get("beams", 1)
    prompt = layers * layer_flops(s, 1, s.source) + readout_flops(s, s.source)  # logits at every prompt position
    step = layers * layer_flops(s, beams, 1) + readout_flops(s, beams)  # one new position, one key
    cached = sum(s.source + t for t in range(s.target))  # the keys each step attends to, beyond its own
    return prompt + s.target * step + 4 * layers * beams * s.geometry.heads * s.knobs["head_dim"] * cached


def _decode_floats(s: Shape) -> int:
    return s.knobs.get("beams", 1) * (s.vocab + 2 * s.geometry.decoder_layers * s.knobs["kv_heads"]
                                      * s.knobs["head_dim"] * (s.source + s.target))  # fmt: skip


def _attribution_flops(s: Shape) -> int:
    """Integrated gradients (:func:`attnscope.llm.attribution.attribute_llm`): one forward pass
    of ``steps + 1`` rows over the N positions with logits everywhere, then one backward pass per
    target token back to the path points (inputs' gradients only, no weights': about one forward
    each; ``torch.utils.flop_counter`` counts 0.8-0.9 of this price on the tiny Llama)."""
    n, rows = _positions(s), s.knobs.get("steps", 16) + 1
    forward = s.geometry.decoder_layers * layer_flops(s, rows, n) + readout_flops(s, rows * n)
    return forward * (1 + s.target)


def _attribution_floats(s: Shape) -> int:
    """The batch's logits and their log-softmax (rows × N × V, twice) and the activations kept
    for the backward passes (~16 floats per position, layer and width, as the encoder-decoder's)."""
    n, rows = _positions(s), s.knobs.get("steps", 16) + 1
    return rows * n * (2 * s.vocab + 16 * s.geometry.decoder_layers * s.width)


def _attribution_passes(s: Shape) -> int:
    """As :func:`attnscope.engine.limits.attribution_cost`: one backward per target token through
    ``steps + 1`` rows of prompt + target."""
    return s.target * (s.knobs.get("steps", 16) + 1) * (s.source + s.target)


def _pass_flops(s: Shape) -> int:
    """One teacher-forced pass over the N positions, logits at every one."""
    n = _positions(s)
    return s.geometry.decoder_layers * layer_flops(s, 1, n) + readout_flops(s, n)


def _pass_floats(s: Shape) -> int:
    """Its logits and every layer's attention (L × H × N × N)."""
    n = _positions(s)
    return n * s.vocab + s.geometry.decoder_layers * s.geometry.heads * n * n


def _explain_flops(method: str) -> Callable[[Shape], int]:
    """An explanation of a stored or fresh answer (:mod:`attnscope.explain`'s decoder-only
    runners): the pass, then the method's own products per layer; knob ``span``: the source
    tokens in the prompt (value zeroing reruns each layer on 1 + span copies)."""

    def flops(s: Shape) -> int:
        n, layers, heads, d = _positions(s), s.geometry.decoder_layers, s.geometry.heads, s.width
        extra = {
            # a second pass for the values, each head's through its W_O slice, weighed by α
            "norm": _pass_flops(s) + 2 * layers * heads * n * s.knobs["head_dim"] * (n + d),
            "rollout": 2 * layers * n * n * n,  # the product of the layers' (N, N) matrices
            "value_zeroing": layers * layer_flops(s, s.knobs["span"] + 1, n),  # 1 + S copies of each layer rerun
            "alti": _pass_flops(s) // 2 + layers * (2 * heads * n * n * d + 12 * n * n * d + 2 * n * n * n),  # a vector per pair
        }[method]
        return _pass_flops(s) + extra

    return flops


def _explain_floats(method: str) -> Callable[[Shape], int]:
    def floats(s: Shape) -> int:
        n, layers, heads, d = _positions(s), s.geometry.decoder_layers, s.geometry.heads, s.width
        extra = {
            "norm": 2 * layers * heads * n * n,
            "rollout": 2 * layers * n * n,
            "value_zeroing": (s.knobs["span"] + 1) * n * (4 * d + s.knobs["ff"]),
            "alti": 2 * n * n * d + layers * n * n,
        }[method]
        return _pass_floats(s) + extra

    return floats


EXPLAIN_METHODS = ("norm", "rollout", "value_zeroing", "alti")  # attnscope.llm.common.METHODS

register_route_price(RoutePrice("llm_lens", _lens_passes, _lens_floats, _lens_flops, LLM_FLOPS_PER_WORK))
register_route_price(RoutePrice("llm_patching", _patch_passes, _patch_floats, _patch_flops, LLM_FLOPS_PER_WORK))
register_route_price(
    RoutePrice("llm_translation", lambda s: 0, _decode_floats, _decode_flops, LLM_DECODE_FLOPS_PER_WORK)
)


register_route_price(
    RoutePrice("llm_attribution", _attribution_passes, _attribution_floats, _attribution_flops, LLM_FLOPS_PER_WORK,
               lambda s, limit: ["fewer steps"] if s.knobs.get("steps", 16) > 1 else [])  # fmt: skip
)
for _method in EXPLAIN_METHODS:
    register_route_price(RoutePrice(f"llm_explain_{_method}", lambda s: 0, _explain_floats(_method),
                                    _explain_flops(_method), LLM_FLOPS_PER_WORK))  # fmt: skip


def price_llm_route(settings: Settings, route: str, config: DecoderOnlyConfig, prompt: int, target: int,
                    beams: int = 1, **knobs: int) -> Cost:  # fmt: skip
    """The :class:`Cost` of ``route`` (``llm_lens``, ``llm_patching``, ``llm_translation``,
    ``llm_attribution`` with ``steps``, ``llm_explain_<method>``) on a model of ``config`` over
    ``prompt`` and ``target`` tokens: 422 past a limit (naming it)."""
    shape = llm_shape(config, prompt, target, beams)
    if knobs:
        shape = replace(shape, knobs={**shape.knobs, **knobs})
    return price_route(settings, route, shape)
