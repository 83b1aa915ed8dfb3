"""Weights laid out for decoding, derived from a module's parameters and cached beside it.

Decoding multiplies one row (or a few) by each weight matrix at every step. Two layouts are much
faster there than the training layout, on the CPU in particular: every linear layer's weight,
the tied output projection included, transposed and contiguous, ``(in, out)`` (``x @ W.T`` with
``W`` stored ``(out, in)``: on one core, the 19 products of a decoding step of the shipped
Transformer take 1.2 ms against 1.8 ms at batch 1, 3.1 against 5.4 at batch 5), and the query,
key and value projections of self-attention fused into one ``(D, 3D)`` matrix (one product
instead of three). The parameters keep their names and shapes, so
saved models load as before; the derived tensors are rebuilt whenever a parameter changes
(training steps bump its version) and are used only when no gradient is being recorded.

The cache is keyed by module in a weak dictionary: nothing is stored on the module, and it goes
away with the module.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from weakref import WeakKeyDictionary

import torch
from torch import Tensor, nn

_Key = tuple[tuple[int, int, torch.device, torch.dtype], ...]
_cache: WeakKeyDictionary[nn.Module, dict[str, tuple[_Key, Tensor]]] = WeakKeyDictionary()
_lock = threading.Lock()


def _key(sources: tuple[Tensor, ...]) -> _Key:
    return tuple((t._version, t.data_ptr(), t.device, t.dtype) for t in sources)


def derived(owner: nn.Module, name: str, sources: tuple[Tensor, ...], build: Callable[[], Tensor]) -> Tensor:
    """``build()`` (a tensor computed from ``sources``, parameters of ``owner``), rebuilt only when
    one of them has changed since the last call."""
    key = _key(sources)
    with _lock:
        entries = _cache.setdefault(owner, {})
        hit = entries.get(name)
        if hit is not None and hit[0] == key:
            return hit[1]
    with torch.no_grad():
        value = build()
    with _lock:
        entries[name] = (key, value)
    return value


def decoding() -> bool:
    """True when no gradient is recorded (evaluation, ``no_grad``/``inference_mode``)."""
    return not torch.is_grad_enabled()


def transposed(owner: nn.Module, weight: Tensor) -> Tensor:
    """weight: (out, in) -> (in, out), contiguous, cached."""
    return derived(owner, "transposed", (weight,), lambda: weight.detach().t().contiguous())


def linear(layer: nn.Module, x: Tensor) -> Tensor:
    """x: (..., in) -> ``layer(x)`` (..., out); for a float ``nn.Linear`` while decoding, through
    its cached transposed weight (one row times a contiguous (in, out) matrix is much faster on
    the CPU than times the (out, in) parameter; other layers, e.g. int8 ones, are called)."""
    if type(layer) is nn.Linear and decoding():
        return apply(x, transposed(layer, layer.weight), layer.bias)
    return layer(x)


def fusable(*layers: nn.Module) -> bool:
    """Whether these are plain float linear layers (not int8 ones: see app.nn.quantize)."""
    return all(type(layer) is nn.Linear for layer in layers)


def fused_linear(owner: nn.Module, name: str, layers: tuple[nn.Linear, ...]) -> tuple[Tensor, Tensor]:
    """Linear layers of the same input size as one: weight (in, sum of outs), contiguous, and
    bias (sum of outs), both cached. ``x @ weight + bias`` is the outputs side by side."""
    sources = tuple(p for layer in layers for p in (layer.weight, layer.bias))
    weight = derived(
        owner, name + ".weight", sources, lambda: torch.cat([layer.weight.detach() for layer in layers]).t().contiguous()
    )
    bias = derived(owner, name + ".bias", sources, lambda: torch.cat([layer.bias.detach() for layer in layers]))
    return weight, bias


def apply(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """x: (..., in) times a (in, out) weight, plus bias -> (..., out)."""
    flat = x.reshape(-1, x.size(-1))
    out = torch.mm(flat, weight) if bias is None else torch.addmm(bias, flat, weight)
    return out.view(*x.shape[:-1], weight.size(1))
