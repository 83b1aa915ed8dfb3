"""Weights laid out for decoding, derived from a module's parameters and cached beside it.

Decoding multiplies one row (or a few) by each weight matrix at every step. The training layout
is slow there on the CPU, so while no gradient is recorded every float linear layer (the tied
output projection included) runs as a :data:`Product` built once from its parameters:

- the query, key and value projections of self-attention fused into one matrix (one product
  instead of three), and the cross-attention keys and values likewise;
- the weight **transposed and contiguous**, ``(in, out)``: on one core the 19 products of a
  decoding step of the shipped Transformer take 1.2 ms against 1.8 ms at batch 1;
- on the CPU, when every weight is exactly a half-precision number (the shipped models are stored
  in fp16, so theirs are), additionally **FBGEMM's packed fp16 copy**
  (``torch.fbgemm_linear_fp16_weight``): the same matrix in half the bytes, multiplied in fp32
  (the activations are not rounded; the results differ from MKL's by summation order only). MKL
  on this machine's AMD cores is slow on a few rows: one core, 5 rows times the (256, 8000)
  output matrix took 1197 us with MKL and 217 us packed, one row 178 and 83 us. The packed kernel
  runs on one thread, so with more torch threads products of more than :data:`PACKED_ROWS` rows
  go to MKL (which uses them).

The parameters keep their names and shapes, so saved models load as before; a product is rebuilt
whenever a parameter changes (training steps bump its version) and is used only when no gradient
is being recorded. The cache is keyed by module in a weak dictionary: nothing is stored on the
module, and it goes away with the module.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable
from typing import Any, TypeVar
from weakref import WeakKeyDictionary

import torch
from torch import Tensor, nn

_Key = tuple[tuple[int, int, torch.device, torch.dtype], ...]
_cache: WeakKeyDictionary[nn.Module, dict[str, tuple[_Key, Any]]] = WeakKeyDictionary()
_lock = threading.Lock()
T = TypeVar("T")

Product = Callable[[Tensor], Tensor]  # x (..., in) -> (..., out)

PACKED_ROWS = 24  # with more than one torch thread, larger products go to MKL (multi-threaded)


def _key(sources: tuple[Tensor, ...]) -> _Key:
    return tuple((t._version, t.data_ptr(), t.device, t.dtype) for t in sources)


def derived(owner: nn.Module, name: str, sources: tuple[Tensor, ...], build: Callable[[], T]) -> T:
    """``build()`` (computed from ``sources``, parameters of ``owner``), rebuilt only when one of
    them has changed since the last call."""
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


def fusable(*layers: nn.Module) -> bool:
    """Whether these are plain float linear layers (not int8 ones: see app.nn.quantize)."""
    return all(type(layer) is nn.Linear for layer in layers)


def product(owner: nn.Module, name: str, layers: tuple[nn.Linear, ...]) -> Product:
    """Float linear layers of the same input size as one product: x (..., in) -> their outputs
    side by side (..., sum of outs), cached on ``owner`` under ``name``."""
    sources = tuple(p for layer in layers for p in (layer.weight, layer.bias) if p is not None)

    def weight() -> Tensor:
        return torch.cat([layer.weight.detach() for layer in layers])

    def build() -> Product:
        if all(layer.bias is None for layer in layers):
            return _build(weight, None)
        bias = torch.cat([
            layer.weight.new_zeros(layer.out_features) if layer.bias is None else layer.bias.detach()
            for layer in layers
        ])
        return _build(weight, bias)

    return derived(owner, name, sources, build)


def matrix_product(owner: nn.Module, name: str, weight: Tensor) -> Product:
    """x (..., in) -> ``x @ weight.T`` (..., out) for a weight (out, in) of ``owner`` (e.g. a
    tied output projection), cached on ``owner`` under ``name``."""
    return derived(owner, name, (weight,), lambda: _build(weight.detach, None))


def linear(layer: nn.Module, x: Tensor) -> Tensor:
    """x: (..., in) -> ``layer(x)`` (..., out); for a float ``nn.Linear`` while decoding, through
    its cached :func:`product`; other layers (e.g. int8 ones) are called."""
    if type(layer) is nn.Linear and decoding():
        return product(layer, "linear", (layer,))(x)
    return layer(x)


def _build(weight: Callable[[], Tensor], bias: Tensor | None) -> Product:
    """The product of ``weight()`` (out, in) and bias (out,) or None: packed fp16 where that is
    exact (:func:`packed_fp16`), otherwise (and for many rows on several threads) the transposed
    weight. ``weight`` makes the fp32 matrix; the packed product keeps no fp32 copy of it and
    calls it again only if it ever needs the transposed one."""
    matrix = weight()
    packed = packed_fp16(matrix, bias)
    if packed is None:
        return _dense(matrix, bias)
    fp16, packed_bias = packed
    in_features = matrix.size(1)
    del matrix
    dense: list[Product] = []  # built on first use only: one thread never needs it

    def run(x: Tensor) -> Tensor:
        if x.numel() <= PACKED_ROWS * in_features or torch.get_num_threads() == 1:
            return torch.fbgemm_linear_fp16_weight(x, fp16, packed_bias)
        if not dense:
            dense.append(_dense(weight(), bias))
        return dense[0](x)

    return run


def _dense(weight: Tensor, bias: Tensor | None) -> Product:
    """``x @ W + b`` with W the (in, out) contiguous transpose of weight (out, in)."""
    transposed = weight.t().contiguous()

    def run(x: Tensor) -> Tensor:
        flat = x.reshape(-1, x.size(-1))
        out = torch.mm(flat, transposed) if bias is None else torch.addmm(bias, flat, transposed)
        return out.view(*x.shape[:-1], transposed.size(1))

    return run


def packed_fp16(weight: Tensor, bias: Tensor | None) -> tuple[Tensor, Tensor] | None:
    """FBGEMM's packed fp16 copy of weight (out, in) and a float bias (zeros for None), or None
    where that would not be the same product: a weight that is not float32 on the CPU or not
    exactly fp16 values, a torch without the kernel or a CPU it does not support (it needs
    AVX2), or a kernel whose result on a probe row is not the fp32 one."""
    if weight.device.type != "cpu" or weight.dtype != torch.float32 or not hasattr(torch, "fbgemm_linear_fp16_weight"):
        return None
    if not torch.equal(weight.half().float(), weight):
        return None
    bias = weight.new_zeros(weight.size(0)) if bias is None else bias.float().contiguous()
    probe = torch.linspace(-1.0, 1.0, weight.size(1), dtype=torch.float32)[None]
    try:
        with warnings.catch_warnings():  # torch warns once that these are deprecated
            warnings.simplefilter("ignore")
            matrix = torch.fbgemm_pack_gemm_matrix_fp16(weight.contiguous())
            got = torch.fbgemm_linear_fp16_weight(probe, matrix, bias)
    except (RuntimeError, AttributeError):
        return None
    want = torch.addmm(bias, probe, weight.t())
    if not torch.allclose(got, want, rtol=1e-4, atol=1e-4 * float(want.abs().max()) + 1e-6):
        return None
    return matrix, bias
