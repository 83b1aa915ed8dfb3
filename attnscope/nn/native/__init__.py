"""A pre-norm Transformer's decoder step (and, int8, its encoder), and beam search's candidate
selection, as one native (C++) operation each, built at install time.

At one row per step the Python step (:mod:`attnscope.nn.layers` on prepared weights) is ~130 small PyTorch operations
around 19 matrix products, and their dispatch costs as much as the products, or several times
the int8 ones. Three operations run a Transformer:

- ``int8_step`` and ``int8_encode`` (``int8_step.cpp``) (models quantised with ``--quantize int8``): the same FBGEMM
  int8 calls on the same operands as the Python layers (:class:`attnscope.nn.inference.Int8Product`),
  the rest (embedding, layer norms, each head's attention, softmaxes, residuals) as plain loops;
  equal to the Python int8 layers up to float rounding.
- ``fp32_step`` (``fp32_step.cpp``; float models whose products are on FBGEMM's packed fp16 weights, as the shipped
  ones): the Python step's own ATen operations in C++, the same bits; what it saves is Python's
  share of each operation.

``beam.cpp`` has the decoders' bookkeeping (every model's, on the CPU): ``top_candidates``, each
sentence's best extensions in one pass over its rows' log-probabilities (beam search;
:func:`top_candidates` here), ``best_words`` (greedy; :func:`best_words`) and ``select_rows``,
every layer's self-attention cache reordered in one call (:func:`attnscope.nn.kv_cache.select_all`).

They are compiled when attnscope is installed (``make install``, or ``attnscope build-native``
alone: :mod:`attnscope.nn.native.library`, 1-2 minutes on 2 busy cores with a C++ compiler), into a file of this install
named by a hash of the sources and torch's version, and only loaded when a model is served:
nothing compiles on the way to serving. Where that file is missing or does not load (no
compiler at install time, other sources, a foreign file) or ``ATTNSCOPE_NATIVE=0``, one line
is logged ("using the Python step because ...") and decoding takes the Python layers: the same
results, slower on few rows.

Why keep them (``bench/native_ab.py``, docs/decoding.md): one sentence at a time, the shipped
en-de Transformer decodes 1.2-1.3x faster with them in fp32 (greedy and beam 5) and 1.8-2.1x in
int8, the additive RNN's beam 5 1.2x, with the same outputs. Built once at install time they
cost start-up nothing, and a missing build costs only that speed.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from attnscope import config
from attnscope.nn.inference import Int8Product, PackedFp16Product
from attnscope.nn.native import library

if TYPE_CHECKING:
    from attnscope.nn.layer_weights import LayerWeights

log = logging.getLogger(__name__)
SOURCES = library.SOURCES
_lock = threading.Lock()
_ops: list[Any] = []  # [] until tried, then [torch.ops.attnscope_native or None]


def enabled() -> bool:
    """False when ``ATTNSCOPE_NATIVE`` is 0/false/no/off (``Settings.native``, read afresh)."""
    return bool(config.current("native"))


def ops() -> Any | None:
    """``torch.ops.attnscope_native`` (``int8_step``, ``int8_encode``, ``fp32_step``,
    ``top_candidates``, ``best_words``, ``select_rows``), loaded on the first call from the
    library built at install time (never built here); None where there is none that loads, or
    when switched off."""
    if not enabled():
        return None
    with _lock:
        if not _ops or (_ops[0] is None and library.loaded() is not None):  # built here since
            _ops[:] = [_load()]
        return _ops[0]


def built() -> Any | None:
    """The operations if :func:`ops` has already built them (and they are not switched off),
    else None: for callers that must never wait for a build (a decoding loop)."""
    if not enabled() or not _ops:
        return None
    return _ops[0]


def _search_ops(*tensors: Tensor) -> Any | None:
    """The built operations where the search's take ``tensors``: float32 on the CPU, no
    gradient; else None."""
    namespace = built()
    if namespace is None or any(
        t.device.type != "cpu" or t.dtype != torch.float32 or t.requires_grad for t in tensors
    ):
        return None
    return namespace


def top_candidates(
    scores: Tensor, log_probs: Tensor, groups: int, count: int, banned: tuple[int, ...]
) -> tuple[Tensor, Tensor, Tensor] | None:
    """Beam search's ``count`` best extensions of each of ``groups`` sentences (its rows
    consecutive in scores (N,) and log_probs (N, V)), the words in ``banned`` never chosen:
    their scores, flat indices ``row_in_group * V + word`` and log-probabilities, (G, count)
    each, best first (ties to the lower index). None where the native operation does not apply
    (not built, not float32 on the CPU): the caller takes
    :func:`attnscope.decoding.beam.top_candidates`, which finds the same candidates."""
    namespace = _search_ops(scores, log_probs)
    if namespace is None:
        return None
    return namespace.top_candidates(scores, log_probs, groups, count, list(banned))


def best_words(log_probs: Tensor, banned: tuple[int, ...]) -> tuple[Tensor, Tensor] | None:
    """Greedy decoding's choice: each row's most likely word of log_probs (N, V) outside
    ``banned``, as (log-probability (N,), word (N,)), ties to the lower word (as ``max``); one
    pass per row. None where it does not apply (not built, not float32 on the CPU, no rows)."""
    namespace = _search_ops(log_probs)
    if namespace is None or not log_probs.size(0):
        return None
    return namespace.best_words(log_probs, list(banned))


def _load() -> Any | None:
    namespace, why = library.load()
    if namespace is None:
        log.warning("using the Python step because %s", why)
    else:
        log.info("native decoder operations loaded")
    return namespace


def _operands(products: list[Int8Product]) -> tuple[list[Tensor], ...]:
    return (
        [q.weight for q in products], [q.packed for q in products], [q.col_offsets for q in products],
        [q.scales for q in products], [q.bias for q in products], [q.zeros for q in products],
    )


def _norm_pairs(norms: list[torch.nn.LayerNorm | tuple[Tensor, Tensor]]) -> list[Tensor]:
    out: list[Tensor] = []
    for n in norms:
        w, b = (n.weight, n.bias) if isinstance(n, torch.nn.LayerNorm) else n
        out += [w.detach().contiguous(), b.detach().contiguous()]
    return out


@dataclass(frozen=True, eq=False)
class NativeStep:
    """A decoder's weights as the native step takes them."""

    op: Callable[..., Any]
    heads: int
    eps: float
    norms: list[Tensor]  # per layer: self, cross, feed-forward (weight, bias); then the final norm
    operands: tuple[list[Tensor], ...]  # per layer: qkv, self out, cross q, cross out, ff in, ff out; then the output

    def __call__(
        self,
        tokens: Tensor,
        embedding: tuple[Tensor, Tensor, float],
        caches: list[Tensor],
        t: int,
        cross: list[tuple[Tensor, Tensor]],
        blocked: Tensor,
    ) -> tuple[Tensor, Tensor, Tensor]:
        """tokens (N,) the new tokens, embedded as ``matrix[token] * scale + position`` from
        embedding = (matrix (V, D), position (D,), scale); caches per layer (2, N, H, capacity,
        Dh) with room at position t (written in place); cross per layer (G, H, S, Dh) keys and
        values; blocked (G, 1, 1, S). Returns log-probabilities (N, V), self (N, L, H, t+1) and
        cross (N, L, H, S) attention."""
        return self.op(
            tokens, *embedding, caches, t, [k for k, _ in cross], [v for _, v in cross],
            blocked.view(blocked.size(0), blocked.size(-1)), self.norms, *self.operands, self.heads, self.eps,
        )


@dataclass(frozen=True, eq=False)
class NativeFp32Step:
    """A float decoder's weights as the native float step takes them: the Python step's
    operations in C++, the same bits (products on FBGEMM's packed fp16 weights). It runs where
    every product of a step's rows packs (one thread, or few rows: more go to MKL in the Python
    step); the decode plan decides that once (:meth:`attnscope.nn.transformer.Transformer.step_path`)."""

    op: Callable[..., Any]
    heads: int
    eps: float
    padding_idx: int
    norms: list[Tensor]
    packed: list[Tensor]
    bias: list[Tensor]

    def __call__(
        self,
        tokens: Tensor,
        embedding: tuple[Tensor, Tensor, float],
        caches: list[Tensor],
        t: int,
        cross: list[tuple[Tensor, Tensor]],
        blocked: Tensor,
    ) -> tuple[Tensor, Tensor, Tensor]:
        """As :meth:`NativeStep.__call__`."""
        matrix, position, scale = embedding
        return self.op(
            tokens, matrix, self.padding_idx, position, scale, caches, t, [k for k, _ in cross],
            [v for _, v in cross], blocked, self.norms, self.packed, self.bias, self.heads, self.eps,
        )


def _decoder(
    layers: list[LayerWeights] | None, final_norm: torch.nn.Module, output: Callable[[Tensor], Tensor], kind: type
) -> tuple[Any, list[Any], list[Tensor]] | None:
    """(the operations, the products in the native order, the norms as (weight, bias) pairs) of a
    pre-norm decoder whose every product is a ``kind``; None when it does not apply (post-norm,
    another product, norms the operation does not take, or no build)."""
    if not layers or not all(w.pre_norm for w in layers):
        return None
    products: list[Any] = []
    norms: list[torch.nn.LayerNorm | tuple[Tensor, Tensor]] = []
    for w in layers:
        products += [w.qkv, w.self_out, w.cross_q, w.cross_out, w.ff_in, w.ff_out]
        norms += [w.norm_self, w.norm_cross, w.norm_ff]  # type: ignore[list-item]
    products.append(output)
    norms.append(final_norm)  # type: ignore[arg-type]
    if not all(type(n) is torch.nn.LayerNorm and n.weight is not None and n.bias is not None for n in norms):
        return None
    if any(n.eps != final_norm.eps for n in norms):  # type: ignore[union-attr]
        return None
    if not all(isinstance(p, kind) for p in products):
        return None
    namespace = ops()
    return None if namespace is None else (namespace, products, _norm_pairs(norms))


def prepare_fp32(
    layers: list[LayerWeights] | None, final_norm: torch.nn.Module, output: Callable[[Tensor], Tensor], padding_idx: int
) -> NativeFp32Step | None:
    """The native float step, or None when it does not apply: a product not on packed fp16
    weights (a model whose weights are not fp16 numbers, e.g. one being trained), post-norm, or
    no build."""
    found = _decoder(layers, final_norm, output, PackedFp16Product)
    if found is None or not layers:
        return None
    namespace, products, norms = found
    return NativeFp32Step(
        namespace.fp32_step, layers[0].heads, layers[0].eps, padding_idx, norms,
        [p.packed for p in products], [p.bias for p in products],
    )


def prepare(
    layers: list[LayerWeights] | None, final_norm: torch.nn.Module, output: Callable[[Tensor], Tensor]
) -> NativeStep | None:
    """The native step for these prepared decoder layers, their final norm and output product,
    or None when it does not apply: not every product int8, a post-norm model, or no build."""
    found = _decoder(layers, final_norm, output, Int8Product)
    if found is None or not layers:
        return None
    namespace, products, norms = found
    return NativeStep(namespace.int8_step, layers[0].heads, layers[0].eps, norms, _operands(products))


@dataclass(frozen=True, eq=False)
class NativeEncoder:
    """An encoder's weights as the native encoder takes them."""

    op: Callable[..., Any]
    heads: int
    eps: float
    norms: list[Tensor]  # per layer: attention, feed-forward (weight, bias); then the final norm
    operands: tuple[list[Tensor], ...]  # per layer: qkv, out, ff in, ff out

    def __call__(self, x: Tensor, real: Tensor) -> tuple[Tensor, Tensor]:
        """x (B, S, D) the embedded sources; real (B, S) True at real positions. Returns the
        normed memory (B, S, D), zero at padding, and the self-attention weights
        (B, L, H, S, S), zero in padded rows and columns."""
        return self.op(x, real, self.norms, *self.operands, self.heads, self.eps)


def prepare_encoder(
    layers: list[tuple[torch.nn.LayerNorm, torch.nn.LayerNorm, list[Any]]], final_norm: torch.nn.Module, heads: int
) -> NativeEncoder | None:
    """The native encoder for layers given as (attention norm, feed-forward norm, products
    qkv/out/ff in/ff out) of a pre-norm encoder and its final norm, or None when it does not
    apply (a product not int8, no build)."""
    if not isinstance(final_norm, torch.nn.LayerNorm) or final_norm.weight is None or final_norm.bias is None:
        return None
    products = [p for _, _, ps in layers for p in ps]
    if not layers or not all(isinstance(p, Int8Product) for p in products):
        return None
    if any(n.eps != final_norm.eps for a, f, _ in layers for n in (a, f)):
        return None
    namespace = ops()
    if namespace is None:
        return None
    norms: list[torch.nn.LayerNorm | tuple[Tensor, Tensor]] = [n for a, f, _ in layers for n in (a, f)]
    norms.append(final_norm)
    return NativeEncoder(namespace.int8_encode, heads, final_norm.eps, _norm_pairs(norms), _operands(products))
