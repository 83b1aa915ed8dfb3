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
from dataclasses import dataclass
from typing import Any, TypeVar, cast
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


def int8(layer: nn.Module) -> bool:
    """Whether ``layer`` is an int8 linear layer (:class:`attnscope.nn.quantize.Int8Linear`): its
    products while decoding are int8 ones (:func:`int8_product`)."""
    return bool(getattr(layer, "int8", False))


def fusable(*layers: nn.Module) -> bool:
    """Whether these linear layers can run as one product: all plain float ones, or all int8
    ones (:mod:`attnscope.nn.quantize`)."""
    return all(type(layer) is nn.Linear for layer in layers) or all(
        isinstance(layer, nn.Linear) and int8(layer) for layer in layers
    )


def product(owner: nn.Module, name: str, layers: tuple[nn.Linear, ...]) -> Product:
    """Float linear layers of the same input size as one product: x (..., in) -> their outputs
    side by side (..., sum of outs), cached on ``owner`` under ``name``."""
    sources = tuple(p for layer in layers for p in (layer.weight, layer.bias) if p is not None)
    weights = tuple(layer.weight for layer in layers)  # never the layers: see below

    def weight() -> Tensor:
        # the cached product keeps this function (for its lazy dense copy); had it kept the
        # layers, the cache's value would hold its own weak key (``owner`` is often the layer)
        # and no unloaded model's layers would ever be freed (issue 45.3: ~13 MB a load)
        return torch.cat([w.detach() for w in weights])

    build_product = int8_product if all(int8(layer) for layer in layers) else _build

    def build() -> Product:
        if all(layer.bias is None for layer in layers):
            return build_product(weight, None)
        bias = torch.cat([
            layer.weight.new_zeros(layer.out_features) if layer.bias is None else layer.bias.detach()
            for layer in layers
        ])
        return build_product(weight, bias)

    return derived(owner, name, sources, build)


def matrix_product(owner: nn.Module, name: str, weight: Tensor) -> Product:
    """x (..., in) -> ``x @ weight.T`` (..., out) for a weight (out, in) of ``owner`` (e.g. a
    tied output projection), cached on ``owner`` under ``name``."""
    return derived(owner, name, (weight,), lambda: _build(weight.detach, None))


def linear(layer: nn.Module, x: Tensor) -> Tensor:
    """x: (..., in) -> ``layer(x)`` (..., out); for a float or int8 linear layer while decoding,
    through its cached :func:`product`; other layers are called."""
    if fusable(layer) and decoding():
        return product(layer, "linear", (layer,))(x)  # type: ignore[arg-type]
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
    return PackedFp16Product(packed[0], packed[1], matrix.size(1), weight, bias)


def packs(rows: int) -> bool:
    """Whether a product of ``rows`` rows runs on a packed fp16 weight: on one torch thread
    always, on several only up to :data:`PACKED_ROWS` rows (the packed kernel runs on one)."""
    return rows <= PACKED_ROWS or torch.get_num_threads() == 1


class PackedFp16Product:
    """:func:`_build`'s product on FBGEMM's packed fp16 weight (``packed``, with ``bias``), its
    operands kept for the native step (:mod:`attnscope.nn.native`); products of more than
    :data:`PACKED_ROWS` rows on several threads go to the transposed fp32 weight (MKL), made from
    ``weight()`` on first use."""

    def __init__(
        self, packed: Tensor, bias: Tensor, in_features: int, weight: Callable[[], Tensor], dense_bias: Tensor | None
    ) -> None:
        self.packed, self.bias, self.in_features = packed, bias, in_features
        self._weight, self._dense_bias = weight, dense_bias
        self._dense: Product | None = None  # built on first use only: one thread never needs it

    def __call__(self, x: Tensor) -> Tensor:
        if packs(x.numel() // self.in_features):
            return torch.fbgemm_linear_fp16_weight(x, self.packed, self.bias)
        if self._dense is None:
            self._dense = _dense(self._weight(), self._dense_bias)
        return self._dense(x)


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


def int8_product(weight: Callable[[], Tensor], bias: Tensor | None) -> Product:
    """The int8 product of ``weight()`` (out, in) and bias (out,) or None, on FBGEMM's kernel
    (``torch.fbgemm_linear_int8_weight_fp32_activation``): the weight quantised once, each output
    row on its own scale (:func:`quantize_weight`), the activations quantised to 0..255 on each
    call from their own range, products accumulated in int32; the kernel returns them in fp32
    with the activation scale applied, and each output column is then multiplied by its weight
    scale and the bias added. One row times a (256, 1024) matrix costs about 11 us against 13 for
    the packed fp16 kernel and 33 for torch.ao's dynamically quantised Linear (whose call wraps
    the same kernel in quantised-tensor objects); 32 rows 113 against 184 and 134. Rows are
    quantised independently, so a fused product (query, key and value side by side) gives the
    same numbers as its parts. Where the kernel is missing (a torch without FBGEMM, a CPU without
    AVX2) or its result on a probe row is not near the product with the quantised weight, the
    weight is quantised through torch.ao's dynamic Linear instead."""
    matrix = weight().float().contiguous()
    bias = matrix.new_zeros(matrix.size(0)) if bias is None else bias.float().contiguous()
    q, col_offsets, scales = quantize_weight(matrix)
    zeros = torch.zeros_like(bias)
    probe = torch.linspace(-1.0, 1.0, matrix.size(1), dtype=torch.float32)[None]
    try:
        with warnings.catch_warnings():  # torch warns once that these are deprecated
            warnings.simplefilter("ignore")
            product = Int8Product(q, torch.fbgemm_pack_quantized_matrix(q), col_offsets, scales, bias, zeros)
            got = product(probe)
    except (RuntimeError, AttributeError):
        return _ao_int8(matrix, bias)
    # a working kernel gives the product with the quantised weight up to the activations'
    # rounding (under 1 % of the terms' magnitudes); a broken one is off by the magnitudes
    dequantised = q.float() * scales[:, None]
    want = torch.addmm(bias, probe, dequantised.t())
    magnitude = probe.abs() @ dequantised.abs().t()
    if not bool(((got - want).abs() <= 0.02 * magnitude + 1e-5).all()):
        return _ao_int8(matrix, bias)
    return product


@dataclass(frozen=True, eq=False)
class Int8Product:
    """:func:`int8_product`'s product, its operands kept for the native step
    (:mod:`attnscope.nn.native`), which makes the same calls."""

    weight: Tensor  # int8 (out, in), each row on its own scale
    packed: Tensor
    col_offsets: Tensor  # int32 (out,): the rows' sums
    scales: Tensor  # (out,)
    bias: Tensor  # (out,)
    zeros: Tensor  # (out,): the kernel's own bias

    def __call__(self, x: Tensor) -> Tensor:
        flat = x.reshape(-1, x.size(-1))
        if not flat.is_contiguous() or flat.dtype != torch.float32:
            flat = flat.float().contiguous()
        out = torch.fbgemm_linear_int8_weight_fp32_activation(
            flat, self.weight, self.packed, self.col_offsets, 1.0, 0, self.zeros
        )
        return torch.addcmul(self.bias, out, self.scales).view(*x.shape[:-1], out.size(-1))


WEIGHT_LEVELS = 63  # weights on -63..63 (7 bits): see quantize_weight


def quantize_weight(matrix: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """matrix (out, in) fp32 -> (int8 values, column offsets, scales (out,)): each row
    symmetrically on -63..63 (zero point 0, zero exact), as FBGEMM's int8 product takes a weight
    (its ``col_offsets`` are the rows' sums). Seven bits, not eight: the AVX2 kernel adds the
    products of two adjacent (activation 0..255, weight) pairs in a saturating 16-bit sum, which
    full-range weights can overflow (255 * 127 * 2 > 32767), and then one output comes out wrong
    by a lot (a tiny model's end-of-sentence logit moved from 3.12 to 2.01). torch.ao avoids it
    by quantising the activations to 7 bits (``reduce_range``); here the weights, once, take the
    lost bit, and each row gets a scale of its own."""
    levels = WEIGHT_LEVELS
    scales = (matrix.abs().amax(1) / levels).clamp(min=torch.finfo(torch.float32).tiny)
    q = torch.clamp(torch.round(matrix / scales[:, None]), -levels, levels).to(torch.int8)
    col_offsets = q.sum(1, dtype=torch.int32).to(torch.int32)
    return q.contiguous(), col_offsets, scales.float().contiguous()


def _ao_int8(matrix: Tensor, bias: Tensor) -> Product:
    """The int8 product through torch.ao's dynamically quantised Linear (slower on few rows)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        layer = torch.ao.nn.quantized.dynamic.Linear(matrix.size(1), matrix.size(0), dtype=torch.qint8)
        observer = torch.ao.quantization.default_dynamic_qconfig.weight()
        observer(matrix)
        scale, zero_point = observer.calculate_qparams()
        layer.set_weight_bias(
            torch.quantize_per_tensor(matrix, float(scale), int(zero_point), torch.qint8), bias
        )
    return cast(Product, layer.forward)
